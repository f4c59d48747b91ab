// Exact provisioning: how many units each stage of a fixed scheduling plan gets, so that the
// pipeline meets the throughput limit at the lowest cost.
//
// The bottleneck time E of the optimal provisioning is one of the values ET_s(k). For every such
// candidate E <= B / TL, each stage gets the fewest units with ET_s(k) <= E; a candidate whose
// per-type totals exceed what is available is skipped; the cheapest survivor wins (ties: the
// faster one). Exact: the optimum's own bottleneck is a candidate, and at that candidate the
// fewest-units choice is no more expensive and no slower than the optimum. Adding units to a cheap
// bottleneck stage can lower the total cost because every unit is paid for the whole job.
//
// The parameter servers (when the workload prices them) are one more stage whose type is free: at
// every candidate E (the stages' ET values and the servers' own, cost_model.h ps_candidates), the
// cheapest servers with ET_ps <= E that fit in the units the stages leave. Exact in the same way.
//
// Cost: O(S * C) for S stages and C = sum_s units_t(s) candidates plus the servers' candidates
// that the stages can reach; well under a millisecond for 8 stages of 64 units.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "heterps/cost/cost_model.h"

namespace heterps::cost {

// A stage of a scheduling plan: layers [first, last] on resource type `type`.
struct StageSpec {
  int first = 0;
  int last = 0;
  int type = 0;
};

// Why a plan cannot be provisioned: the first constraint that fails, and by how much.
struct Infeasibility {
  std::string constraint;  // "first stage", "residency", "memory", "throughput", "links",
                           // "units" or "parameter servers"
  double shortfall = 0;    // how far over, relative: needed / available - 1 (0.25: 25% more)
  std::string message;     // one line naming the stage, the type and the figures
};

struct Provisioning {
  bool feasible = false;
  std::vector<int64_t> units;     // k_s per stage (empty when infeasible)
  std::vector<double> seconds;    // ET_s(k_s): seconds per batch per stage
  double bottleneck_seconds = 0;  // max_s ET_s(k_s)
  double throughput = 0;          // B / bottleneck, samples/s
  double usd_per_hour = 0;        // sum_s k_s p_t(s)
  double job_seconds = 0;         // N / throughput
  double cost_usd = 0;            // job_seconds / 3600 * usd_per_hour
  PsServers ps;                   // the parameter servers (type -1: not priced)
  // Across the links between regions (docs/cost_model.md, "Links between regions"): what the plan
  // sends per batch, the slowest link's seconds per batch (a bound on the bottleneck) and the
  // job's egress dollars (in cost_usd).
  WanLoad wan;
  double link_seconds = 0;
  double egress_usd = 0;
  Infeasibility why;              // set when !feasible
};

// Provisions `stages` (consecutive, covering every layer once, in order) exactly.
Provisioning Provision(const CostModel& model, absl::Span<const StageSpec> stages);

// What the plan of `stages` sends across the links between regions per batch with its parameter
// servers on `ps_type` (-1: none): every boundary between stages and every stage's traffic with
// the servers (docs/cost_model.md, "Links between regions").
WanLoad PlanWanLoad(const CostModel& model, absl::Span<const StageSpec> stages, int ps_type);

// "emb..top.2 on t4": the stage's layers and type, for messages and tables.
std::string DescribeStage(const CostModel& model, const StageSpec& stage);

}  // namespace heterps::cost
