// The cost model (docs/cost_model.md): how long a stage of layers takes on a resource type, with
// k data-parallel units, and what a job costs. docs/cost_model.md has every formula.
//
//   OCT(l,t) = o_t ops_l + B (3 f_l / F_t + bytes_l / M_t + 2 r_l / R_t)   (or the profile's value)
//   X_s      = sum_{l in s} OCT(l,t) + DT_s            one unit's seconds per batch for stage s
//   ET_s(k)  = X_s (1 + beta_t (k - 1)) / k           with k data-parallel units
//   Theta    = B / max_s ET_s(k_s);  job seconds = N / Theta;  cost = job hours * sum_s k_s p_t
//   and the parameter servers as one more pipeline stage: n shards of a CPU type, each holding
//   its share of the tables in memory up to a budget and the rest on its SSD, at ET_ps(t, n)
//   seconds per batch and n p_t per hour (docs/cost_model.md, "Parameter servers").
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

// The most parameter-server shards a job may have. The one limit: the cost model never prices
// more (so no scheduler proposes more), and the runtime refuses more wherever a count is given
// (a plan file, `--ps-shards`, a job description, `heterps ctl`).
inline constexpr int64_t kMaxPsShards = 64;

// What the job must achieve.
struct Workload {
  // TL: the training throughput the plan must reach, samples/s. Must be > 0.
  double throughput_limit = 0;
  // N: samples the job processes (dataset size x epochs). Default: one epoch of the Criteo 1TB
  // click logs (4,373,472,329 samples).
  double samples = 4373472329.0;
  // Price the parameter servers: the plan chooses their type (a CPU type) and shards, and they
  // count in the throughput and the cost. Off: the stages' units only (the paper's model).
  bool price_parameter_servers = true;
  // The Zipf exponent of the embedding rows' popularity (0: uniform): how many of the lookups
  // the rows a shard keeps in memory serve when the tables do not fit it. >= 0.
  double access_skew = 1.0;
  // Floats of optimizer state per value float of an embedding row (SGD 0, Adagrad 1, Adam 2).
  int ps_state_floats = 1;
  // The first stage: the most units it may have (0: as many as its type has), and the layer it
  // must reach at least (-1: any). A job with a GPU tier (--gpu-cache-gib) looks its embeddings up
  // in the first stage, on one replica, the tier's rows on its one device: the plans made for it
  // keep 1 unit and the first embedding layer (launcher::JobRules).
  int64_t first_stage_max_units = 0;
  int first_stage_through = -1;
  // The job has a GPU tier (--gpu-cache-gib): a first stage on a type the profile measured with
  // one (Profile::tier) moves the tier's misses to and from the servers instead of every row it
  // looks up (docs/cost_model.md, "The GPU tier"). With tier_holds_dense (a synchronous job,
  // dense parameters on the replicas, one block a step), such a stage that is the whole model
  // moves no dense weights where the profile held them on the device.
  bool gpu_tier = false;
  bool tier_holds_dense = false;
  // Data residency (docs/cost_model.md, "Data residency"): the region the training data is kept
  // in, which nothing derived from it may leave. Every stage reads the data or what the layers
  // before it made of it, and the parameter servers receive its ids, so the stages and the servers
  // run on types of this region only; other types cannot hold a stage (StageSeconds is
  // kInfinity). Empty: no rule. `data_source` names the data in messages ("day_0.tsv").
  std::string data_region = "";
  std::string data_source = "";
  // The opt-in policy that lets pooled activations (and the labels the loss needs) leave the
  // data's region (--activations-may-cross): a stage from FirstLayerAwayFromData on may run on
  // another region's types; the stages before it and the servers stay. Meaningless, and refused
  // by the commands, without a data_region.
  bool activations_may_cross = false;
  // Every stage's dense weights are pulled from the parameter servers and their gradients pushed
  // to them each step (an asynchronous job, or --dense-on-servers). Off, as in the runtime's
  // default synchronous job, each stage's replicas hold their dense parameters and exchange the
  // step's sums among themselves (one type, so one region), and no dense weight crosses to the
  // servers' region per step (AddServerLoad; a stage's DT_s keeps its calibrated bytes).
  bool dense_through_servers = false;
};

// The first layer whose input holds nothing raw (docs/cost_model.md, "Data residency"): every
// embedding layer is behind it (the ids stay) and the dense features went through a learned
// layer (an `fc`, or a custom layer with parameters) since the input. A stage starting there may
// leave the data's region under activations_may_cross. The number of layers where no such layer
// exists (the loss itself reads raw features, or an embedding is last). O(layers).
int FirstLayerAwayFromData(const config::ModelSpec& model);

// The parameter servers of a plan: `shards` shards of type `type`, each holding `memory_bytes`
// of the tables' rows in memory and `ssd_bytes` on its SSD.
struct PsServers {
  int type = -1;  // -1: none (not priced, or no CPU type can hold them)
  int64_t shards = 0;
  double memory_bytes = 0;       // per shard
  double ssd_bytes = 0;          // per shard
  double hit_rate = 1;           // share of the lookups served from memory
  double seconds_per_batch = 0;  // ET_ps: one shard's time per batch; kInfinity if it cannot
                                 // hold its share
  double usd_per_hour = 0;       // shards * p_t
};

// The workload of a job whose parameter servers run beside its stages, on the stages' own machines
// (`heterps train` planning on this host, and re-planning it): they rent no units of their own,
// so the plan prices the stages only.
inline Workload ColocatedWorkload(double throughput_limit, double samples) {
  Workload workload{throughput_limit, samples};
  workload.price_parameter_servers = false;
  return workload;
}

// What a stage sends and receives per batch: DT_s = bytes / W_t + messages lat_t.
struct StageTraffic {
  double bytes = 0;
  double messages = 0;
};

// The pieces of one unit's time per batch for a stage.
struct StageTime {
  double compute = 0;  // OCT_s: seconds
  double comm = 0;     // DT_s: seconds
  double total() const { return compute + comm; }
};

// What a plan sends across the links between regions per batch (docs/cost_model.md, "Links
// between regions"): bytes and messages for each ordered pair of the cluster's regions,
// [a * R + b] for a link from region a to region b (indices into ClusterSpec::Regions()).
struct WanLoad {
  std::vector<double> bytes, messages;
  bool empty() const;  // nothing crosses
};

// OK where the workload names no data region or the cluster has a type in it; else
// InvalidArgument naming the data, the region and the cluster's regions.
absl::Status CheckDataRegion(const config::ClusterSpec& cluster, const Workload& workload);

// How messages name the workload's data: "the data (day_0.tsv)", or "the data" where it has no
// source.
std::string DataName(const Workload& workload);
// The sentence every refusal of a part outside the data's region makes: "<what> is in region
// '<region>', but the data (S) is kept in region '<data_region>' and nothing derived from it may
// leave it" (`region` empty: "(none)"). Under activations_may_cross, `away_from` names the first
// layer that may leave (FirstLayerAwayFromData; empty: none may): "... may leave it before layer
// 'bottom.1' (activations may cross from there on)".
std::string ResidencyBreach(absl::string_view what, absl::string_view region,
                            const Workload& workload, absl::string_view away_from = "");

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
  // The bytes and messages of DT_s for the stage [first, last] on type t (-1: whatever its type,
  // as though no type had a GPU tier). O(1).
  StageTraffic Traffic(int first, int last, int t = -1) const;
  // Under Workload::gpu_tier, whether a stage starting at `first` on type t looks its rows up in
  // a GPU tier the profile measured (a first stage on a type with a tier entry; false for t -1).
  bool TierFeeds(int first, int t) const;
  // Whether the stage [first, last] on type t keeps its dense weights on its device: fed by the
  // tier, the whole model, under Workload::tier_holds_dense, where the tier entry held them. It
  // pulls and pushes none per batch.
  bool HoldsDense(int first, int last, int t) const;
  // The profile's network entries this model applied (the types' network figures they replaced).
  const std::vector<NetworkEntry>& network() const { return network_; }
  // The profile's tier entries this model applied.
  const std::vector<TierEntry>& tier() const { return tier_entries_; }
  // Whether type t may run a part of this job: true, or, under a residency rule, whether t is in
  // the data's region.
  bool InDataRegion(int t) const {
    return workload_.data_region.empty() || cluster_.types[t].region == workload_.data_region;
  }
  // Whether a stage starting at layer `first` may run on type t: t is in the data's region, or
  // the workload lets activations cross and the stage starts at or after away_from(). O(1).
  bool MayRun(int first, int t) const { return first >= away_from_ || InDataRegion(t); }
  // The first layer a stage outside the data's region may start at: FirstLayerAwayFromData under
  // activations_may_cross, else num_layers() (none may).
  int away_from() const { return away_from_; }
  // That layer's name for messages (ResidencyBreach), or empty where no stage may leave.
  absl::string_view away_from_name() const {
    return away_from_ < num_layers() ? absl::string_view(model_.layers[away_from_].name)
                                     : absl::string_view();
  }
  // Whether one unit of type t can run the stage [first, last]: it may run there (MayRun) and
  // has the memory. O(1).
  bool CanHold(int first, int last, int t) const {
    return MayRun(first, t) && StageMemoryBytes(first, last) <= cluster_.types[t].memory;
  }
  // X_s = Stage(...).total(), or kInfinity where the type cannot hold the stage (CanHold).
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
  // The workload's rules on the first stage, in one place for the provisioning and the searches:
  // the most units a stage starting at layer `first` on type t may have (the type's, less the
  // cap where first is 0), and MinUnits for layers [first, last] on t (x: their StageSeconds)
  // that is also 0 where that stage would break the rules (more units than the cap, or a first
  // stage ending before first_stage_through).
  int64_t MaxStageUnits(int first, int t) const;
  int64_t MinStageUnits(int first, int last, double x, int t, double e) const;

  // ---- The links between regions (docs/cost_model.md, "Links between regions") ----

  // The index of type t's region in cluster().Regions(), or -1 where the types name none.
  int RegionOf(int t) const { return region_of_[t]; }
  int num_regions() const { return static_cast<int>(regions_.size()); }
  // An empty load: no byte across any link.
  WanLoad NoWanLoad() const;
  // Adds to `load` the boundary after layer `last` between a stage on type t and the next on
  // type u: the activations one way and their gradients back (nothing where both are in one
  // region).
  void AddBoundaryLoad(int last, int t, int u, WanLoad* load) const;
  // Adds the traffic between a stage of layers [first, last] on type t and the parameter servers
  // on type `ps_type` (nothing in one region, or with ps_type -1): its embedding rows, and its
  // dense weights under Workload::dense_through_servers.
  void AddServerLoad(int first, int last, int t, int ps_type, WanLoad* load) const;
  // max over links of bytes / W_ab + messages lat_ab: the slowest link's seconds per batch (0
  // for an empty load).
  double LinkSeconds(const WanLoad& load) const;
  // sum over links of bytes e_ab: the egress dollars of one batch.
  double EgressUsdPerBatch(const WanLoad& load) const;
  // The whole job's egress dollars: N / B batches of EgressUsdPerBatch.
  double JobEgressUsd(const WanLoad& load) const {
    return workload_.samples / batch_ * EgressUsdPerBatch(load);
  }
  // One link's share of a load: what crosses it per batch, its seconds and its egress dollars.
  struct LinkUse {
    std::string from, to;
    double bytes = 0, messages = 0, seconds = 0, usd = 0;  // per batch
  };
  // The links `load` uses, in the order of the regions (none for a default-constructed load).
  std::vector<LinkUse> LinkUses(const WanLoad& load) const;
  // "the link from us-east-1 to eu-west-1 (1.2 MB and 4 messages per batch at 1 Gbit/s, 40 ms
  // one way)": the slowest link of `load`, for messages. Empty for an empty load.
  std::string DescribeSlowestLink(const WanLoad& load) const;

  // ---- The parameter servers (docs/cost_model.md, "Parameter servers") ----

  // Whether plans price them: the workload asks for it and some type is a CPU type. Where no CPU
  // type is in the data's region, they are priced and no plan can have them.
  bool prices_ps() const { return prices_ps_; }
  // T: bytes of every embedding row with its key and optimizer state.
  double table_bytes() const { return table_bytes_; }
  // Whether type t may hold the parameter servers (a CPU type in the data's region, when they are
  // priced).
  bool HostsPs(int t) const;
  // n shards on type t: their memory and SSD budgets, hit rate, ET_ps and price. O(embedding
  // layers).
  PsServers Ps(int t, int64_t n) const;
  // The fewest shards of type t, at most `max_shards` (and kMaxPsShards), with ET_ps <= e (0 if
  // none). O(log units).
  int64_t MinPsShards(int t, double e, int64_t max_shards) const;
  // The cheapest parameter servers with ET_ps <= e when `used[t]` units of each type are taken
  // by the stages (ties: the faster); type -1 if none fits. With prices_ps() false: type -1 and
  // no cost, always.
  PsServers CheapestPs(double e, absl::Span<const int64_t> used) const;
  // min over types of shards * p_t with ET_ps <= e, the stages' use of units ignored: a lower
  // bound on what the servers of any plan with bottleneck e cost per hour (0 when not priced;
  // kInfinity if none can). O(log candidates).
  double CheapestPsRate(double e) const;
  // Every ET_ps(t, n) <= B / TL of every type that may hold the servers, ascending: the
  // bottlenecks at which the servers can be the slowest stage.
  const std::vector<double>& ps_candidates() const { return ps_candidates_; }

  // Job seconds and cost for a bottleneck time `e` (seconds per batch) and a rental rate
  // (USD per hour, sum of k_s p_t).
  double JobSeconds(double e) const { return workload_.samples * e / batch_; }
  double JobCost(double e, double usd_per_hour) const {
    return JobSeconds(e) / 3600.0 * usd_per_hour;
  }

 private:
  CostModel() = default;
  absl::Status ApplyProfile(const Profile& profile);
  // regions_, region_of_ and link_of_; InvalidArgument where a pair of regions has no link.
  absl::Status IndexLinks();
  void BuildPrefixSums(const std::vector<std::vector<double>>& oct);

  config::ModelSpec model_;
  config::ClusterSpec cluster_;
  Workload workload_;
  double batch_ = 0;
  std::vector<LayerCost> layers_;
  std::vector<std::vector<double>> oct_;       // [t][l]: prefix sums of OCT(., t), size L + 1
  std::vector<std::vector<bool>> profiled_;    // [t][l]
  std::vector<std::vector<double>> measured_;  // [t][l]: profiled seconds where profiled_
  std::vector<NetworkEntry> network_;
  std::vector<TierEntry> tier_entries_;
  std::vector<TierEntry> tier_;  // [t]: the profile's tier entry (or lent); lookups 0 where none
  std::vector<double> sparse_bytes_;  // prefix sums: B * rows * (2 row bytes + 2 keys)
  std::vector<double> dense_bytes_;   // prefix sums: 8 * w (pull weights, push grads)
  std::vector<double> memory_bytes_;  // prefix sums of each layer's working memory
  std::vector<std::string> regions_;  // cluster_.Regions()
  std::vector<int> region_of_;        // [t]: index into regions_, -1 where none
  int away_from_ = 0;                 // away_from()
  // [a * R + b]: the index in cluster_.links of the link from region a to region b (-1 on the
  // diagonal).
  std::vector<int> link_of_;
  std::vector<double> pull_keys_bytes_;  // prefix sums: 8 B r_l, the keys a pull sends
  // The bytes to and from the servers of the rows of layers [first, last] a GPU tier on type t
  // moves: its loads and write-backs (key, value and optimizer state each way) and its pass-
  // throughs (as a pull and a push). Split as AddServerLoad needs them: sent (keys, gradients,
  // written-back rows) and received (rows).
  struct TierBytes {
    double sent = 0, received = 0;
  };
  TierBytes TierRowBytes(int first, int last, int t) const;
  // Seconds per batch of `load` on the link of pair i (an index into link_of_).
  double LinkTime(const WanLoad& load, size_t i) const;

  void BuildPsModel();
  // The parameter servers' figures.
  struct PsTable {
    double rows = 0;     // rows of one table (R)
    double lookups = 0;  // rows looked up per sample in its tables (slots x ids per slot)
  };
  std::vector<PsTable> ps_tables_;
  bool prices_ps_ = false;
  std::vector<int> ps_types_;  // types that may hold them
  double table_bytes_ = 0, ps_lookups_ = 0, ps_sparse_bytes_ = 0, ps_dense_bytes_ = 0;
  std::vector<double> ps_candidates_;
  // The relaxed frontier: at each point's ET_ps and above, the cheapest servers of any type are
  // the point's (or a later one's); ascending ET_ps, descending rate.
  struct PsPoint {
    double seconds = 0, rate = 0;
    int type = 0;
    int64_t shards = 0;
  };
  std::vector<PsPoint> ps_frontier_;
  // The frontier point for bottleneck e, or null if the servers cannot reach e.
  const PsPoint* FrontierAt(double e) const;
};

}  // namespace heterps::cost
