// A priced plan: a scheduler's answer, the scheduling plan (a resource type per layer, grouped
// into stages) together with its exact provisioning and what it costs on one cost model.
// docs/plan_format.md documents its JSON form. The same plan as a job runs it, with types by name
// and nothing that needs a cost model, is a RunPlan (run_plan.h, made by FromPlan).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heterps/cost/cost_model.h"
#include "heterps/cost/provisioner.h"

namespace heterps::sched {

struct PricedStage {
  cost::StageSpec spec;          // layers [first, last] on a type
  int64_t units = 0;             // k_s
  double seconds_per_batch = 0;  // ET_s(k_s)
  double compute_seconds = 0;    // OCT_s: one unit's compute time per batch
  double comm_seconds = 0;       // DT_s: one unit's communication time per batch
};

struct PricedPlan {
  std::string scheduler;            // name of the scheduler that made it
  std::vector<int> assignment;      // resource type per layer
  std::vector<PricedStage> stages;  // maximal runs of layers on one type
  bool feasible = false;
  bool certified_optimal = false;  // proven optimal under the cost model
  // An exhaustive search (brute, exact) stopped by its time limit before it was done: an
  // infeasible result then does not prove that no plan is feasible.
  bool cut_short = false;
  double throughput = 0;  // samples/s
  double cost_usd = 0;    // whole job
  double cost_per_hour_usd = 0;
  double job_seconds = 0;
  // The parameter servers the plan rents (type -1: not priced); in throughput and cost above.
  cost::PsServers ps;
  // What the plan sends across the links between regions per batch (docs/cost_model.md, "Links
  // between regions"), the slowest link's seconds per batch and the job's egress dollars (in
  // cost_usd); empty, 0 and 0 for a plan in one region.
  cost::WanLoad wan;
  double link_seconds = 0;
  double egress_usd = 0;
  double search_seconds = 0;    // wall time the scheduler took
  int64_t plans_evaluated = 0;  // scheduling plans provisioned (or bounded) by the search
  cost::Infeasibility why;      // when !feasible
  // The best lower bound known on the cost (USD) of any feasible plan of the instance, from the
  // exact method's bounds (BoundPlan); 0 when none is known. Equal to cost_usd when certified.
  double lower_bound_usd = 0;

  // How far the plan may be above the optimum: (cost_usd - lower_bound_usd) / cost_usd, in
  // [0, 1]; negative (unknown) for an infeasible plan or without a bound.
  double optimality_gap() const;
};

// Groups `assignment` (a type per layer) into stages and provisions them exactly.
PricedPlan PricePlan(const cost::CostModel& model, const std::vector<int>& assignment);

// The stages of an assignment: maximal runs of consecutive layers on one type.
std::vector<cost::StageSpec> StagesOf(const std::vector<int>& assignment);

// True if `a` is strictly better than `b`: feasible beats infeasible; then lower cost; then
// higher throughput. Between infeasible plans, the smaller shortfall wins.
bool Better(const PricedPlan& a, const PricedPlan& b);

// The plan as JSON text (docs/plan_format.md).
std::string PlanToJson(const cost::CostModel& model, const PricedPlan& plan);

// The plan on one line, for benchmarks' and tests' messages: "$cost [first..last units x type]
// ... servers shards x type" (first and last: layer names), "infeasible" after the cost where it
// is.
std::string PlanLine(const cost::CostModel& model, const PricedPlan& plan);

}  // namespace heterps::sched
