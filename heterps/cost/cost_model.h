// The cost model (docs/cost_model.md): how long a stage of layers takes on a resource type, with
// k data-parallel units, and what a job costs. docs/cost_model.md has every formula.
//
//   OCT(l,t) = o_t ops_l + B (3 f_l / F_t + bytes_l / M_t + 2 r_l / R_t)   (or the profile's value)
//   X_s      = sum_{l in s} OCT(l,t) + DT_s            one unit's seconds per batch for stage s
//   ET_s(k)  = X_s (1 + beta_t (k - 1)) / k           with k data-parallel units
//   Theta    = B / max_s ET_s(k_s);  job seconds = N / Theta;  cost = job hours * sum_s k_s p_t
//
// Example:
//   HETERPS_ASSIGN_OR_RETURN(CostModel cm, CostModel::Create(model, cluster, {.throughput_limit =
//                                                                             1e6}));
//   double x = cm.StageSeconds(0, 3, cluster.FindType("t4"));
//
// Thread safety: immutable after Create(); every method may be called concurrently.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/layer_cost.h"
#include "heterps/cost/profile.h"

namespace heterps::cost {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

// What the job must achieve.
struct Workload {
  // TL: the training throughput the plan must reach, samples/s. Must be > 0.
  double throughput_limit = 0;
  // N: samples the job processes (dataset size x epochs). Default: one epoch of the Criteo 1TB
  // click logs (4,373,472,329 samples).
  double samples = 4373472329.0;
};

// The pieces of one unit's time per batch for a stage.
struct StageTime {
  double compute = 0;  // OCT_s: seconds
  double comm = 0;     // DT_s: seconds
  double total() const { return compute + comm; }
};

class CostModel {
 public:
  // Validates the workload and the profile against the model and the cluster. Errors:
  // InvalidArgument naming the bad workload figure or profile entry.
  static absl::StatusOr<CostModel> Create(const config::ModelSpec& model,
                                          const config::ClusterSpec& cluster,
                                          const Workload& workload,
                                          const Profile* profile = nullptr);

  const config::ModelSpec& model() const { return model_; }
  const config::ClusterSpec& cluster() const { return cluster_; }
  const Workload& workload() const { return workload_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  int num_types() const { return static_cast<int>(cluster_.types.size()); }
  const LayerCost& layer(int l) const { return layers_[l]; }
  const config::ResourceType& type(int t) const { return cluster_.types[t]; }
  double batch() const { return batch_; }

  // E_max = B / TL: the largest per-batch bottleneck time that still meets the throughput limit.
  double max_bottleneck_seconds() const { return batch_ / workload_.throughput_limit; }

  // OCT(l, t): one unit's compute seconds for layer l on one batch (profiled where measured).
  double LayerSeconds(int l, int t) const { return oct_[t][l + 1] - oct_[t][l]; }
  // Whether OCT(l, t) comes from a measurement (false: analytic, possibly calibrated).
  bool IsProfiled(int l, int t) const { return profiled_[t][l]; }

  // One unit's time per batch for the stage of layers [first, last] on type t. O(1).
  StageTime Stage(int first, int last, int t) const;
  // X_s = Stage(...).total(), or kInfinity when the stage does not fit one unit's memory.
  double StageSeconds(int first, int last, int t) const;
  // Bytes one unit needs to run the stage [first, last]: dense weights and gradients, one batch's
  // activations and their gradients, the looked-up rows and their gradients.
  double StageMemoryBytes(int first, int last) const;

  // ET(k) = x (1 + beta (k - 1)) / k.
  static double ExecSeconds(double x, double beta, int64_t k) {
    return x * (1.0 + beta * static_cast<double>(k - 1)) / static_cast<double>(k);
  }
  // The fewest units k <= units_t with ExecSeconds(x, beta_t, k) <= e, or 0 if even all units
  // are too slow. Exact with respect to ExecSeconds (no rounding surprises).
  int64_t MinUnits(double x, int t, double e) const;

  // Job seconds and cost for a bottleneck time `e` (seconds per batch) and a rental rate
  // (USD per hour, sum of k_s p_t).
  double JobSeconds(double e) const { return workload_.samples * e / batch_; }
  double JobCost(double e, double usd_per_hour) const { return JobSeconds(e) / 3600.0 * usd_per_hour; }

 private:
  CostModel() = default;
  absl::Status ApplyProfile(const Profile& profile);
  void BuildPrefixSums(const std::vector<std::vector<double>>& oct);

  config::ModelSpec model_;
  config::ClusterSpec cluster_;
  Workload workload_;
  double batch_ = 0;
  std::vector<LayerCost> layers_;
  std::vector<std::vector<double>> oct_;     // [t][l]: prefix sums of OCT(., t), size L + 1
  std::vector<std::vector<bool>> profiled_;  // [t][l]
  std::vector<std::vector<double>> measured_;  // [t][l]: profiled seconds where profiled_
  std::vector<double> sparse_bytes_;         // prefix sums: B * rows * (2 row bytes + 2 keys)
  std::vector<double> dense_bytes_;          // prefix sums: 8 * w (pull weights, push grads)
  std::vector<double> memory_bytes_;         // prefix sums of each layer's working memory
};

}  // namespace heterps::cost
