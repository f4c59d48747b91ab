// The plan the runtime executes: stages of consecutive layers, each on a resource type with a
// number of data-parallel units, with the cost model's predictions to measure against. It comes
// from a scheduler in this process (FromPlan) or from a plan.json written by `heterps plan`
// (ReadRunPlan, which checks it against the model and the cluster it is to run on).
//
//   HETERPS_ASSIGN_OR_RETURN(RunPlan plan, ReadRunPlan(text, "plan.json", model, cluster));
//   for (const RunStage& stage : plan.stages) ... stage.first .. stage.last, stage.units ...
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/cost_model.h"
#include "heterps/sched/priced_plan.h"

namespace heterps::sched {

struct RunStage {
  int first = 0, last = 0;       // spec layer indices, inclusive
  std::string type;              // resource type
  std::string device;            // the type's local device ("cpu", "cuda:0"), empty if none here
  int64_t units = 0;             // data-parallel replicas
  double seconds_per_batch = 0;  // predicted ET with `units` units (0 if unknown)
  double compute_seconds = 0;    // predicted OCT of one unit per batch
  double comm_seconds = 0;       // predicted DT of one unit per batch
};

// The parameter servers a plan rents (docs/cost_model.md): `shards` of `type`, each keeping
// `memory_bytes` of the tables' rows in memory and the rest (`ssd_bytes`) on its SSD tier.
struct RunServers {
  std::string type;
  int64_t shards = 0;                      // 0: the plan does not say (the stages only were priced)
  double memory_bytes = 0, ssd_bytes = 0;  // per shard
};

struct RunPlan {
  std::string model, cluster, scheduler;
  int64_t batch_size = 0;
  double throughput = 0;  // predicted samples/s (0 if unknown)
  double throughput_limit = 0;
  double cost_per_hour_usd = 0, cost_usd = 0;
  bool feasible = false;
  // The region the plan keeps the data in (`data_region`; empty: none): a job runs it only under
  // the same rule (launcher::CheckResidency).
  std::string data_region;
  // The plan lets activations leave that region (`activations_may_cross`; cost::Workload): a job
  // runs it only under the same policy.
  bool activations_may_cross = false;
  std::vector<RunStage> stages;
  RunServers servers;

  // "input..emb", or the one layer's name.
  std::string StageName(const config::ModelSpec& model, int stage) const;
};

// The plan `plan` made on `model`'s instance.
RunPlan FromPlan(const cost::CostModel& model, const PricedPlan& plan);

// Parses plan JSON (docs/plan_format.md) and checks it against the model and the cluster: the
// plan must be for this model's layers, all of them, in order, in stages of consecutive layers;
// its types must be the cluster's and within their units; its batch size the model's.
// InvalidArgument naming `source` and the field ("plan.json: stages[1].layers[0]: 'top.9' is not
// a layer of dlrm-small"), or the mismatch.
absl::StatusOr<RunPlan> ReadRunPlan(absl::string_view json_text, absl::string_view source,
                                    const config::ModelSpec& model,
                                    const config::ClusterSpec& cluster);

}  // namespace heterps::sched
