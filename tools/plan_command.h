// `heterps plan`: schedule and provision a model on a cluster, print the plan, write its JSON.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "heterps/cost/cost_model.h"
#include "heterps/launcher/planning.h"
#include "heterps/sched/scheduler.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"

namespace heterps::tools {

struct PlanFlags {
  std::string model_path;               // empty: the embedded dlrm-small example
  std::string cluster_path;             // empty: the embedded cloud example
  std::string profile_path;             // optional measured per-layer times
  std::vector<std::string> data_paths;  // optional: multi-hot slots' ids measured on these
  // samples/s; NaN (not given): the embedded default, allowed only with the embedded model.
  double throughput = std::numeric_limits<double>::quiet_NaN();
  double samples = 4373472329.0;
  std::string scheduler = "auto";
  uint64_t seed = 1;
  double time_limit = 60;
  int64_t max_plans = 0;
  std::string policy_in;   // rl: warm-start from this policy file
  std::string policy_out;  // rl: write the trained policy here
  std::string out_path;
  std::string report_path;  // --report: the plan (and with --pareto the frontier) as a page
  bool json = false;
  // --pareto: the cheapest plan at each of `pareto_points` limits spaced geometrically from
  // `pareto_from` (default: the limit / 100) to the limit.
  bool pareto = false;
  double pareto_from = 0;
  int pareto_points = 10;
  std::string csv_path;  // --pareto: also write the frontier as CSV here
  // The parameter servers (docs/cost_model.md): priced unless --stages-only; the Zipf exponent of
  // the rows' popularity.
  bool stages_only = false;
  double access_skew = 1.0;
  bool gpu_tier = false;  // the first stage on one replica (launcher::JobRules)
  // --data-region: the region the training data is kept in; the plan runs there only
  // (launcher::JobRules::data_region). Empty: no rule.
  std::string data_region;
  // --activations-may-cross: stages past the raw features may run in other regions
  // (launcher::JobRules::activations_may_cross).
  bool activations_may_cross = false;
  // --data-shares: REGION=SHARE for each region the data is kept in (a job across regions,
  // launcher::MakeRegionsPlan), the regions syncing every `sync_steps` of their steps.
  std::vector<std::string> data_shares;
  int64_t sync_steps = 100;
  // --sync-eager: windows after the steps between too (an eager threshold), priced at their bound
  // (cost::SyncJob::eager).
  bool sync_eager = false;
};

// Registers the subcommand; `flags` must outlive `app`.
CLI::App* AddPlanCommand(CLI::App& app, PlanFlags& flags);

// Runs it. Returns the process exit code: 0 a feasible plan, 1 no feasible plan (the reason on
// stderr), 2 bad input (one line on stderr).
int RunPlan(const PlanFlags& flags);

// --pareto (pareto_command.cc): 0 if some limit has a feasible plan, 1 if none has, 2 bad input.
int RunPareto(const PlanFlags& flags);

// --data-shares (regions_command.cc): a plan per region and the syncs between them. 0 if every
// region's plan is feasible and the links carry the syncs in time, 1 if not, 2 bad input.
int RunRegionsPlan(const PlanFlags& flags);

namespace internal {
// The plan the flags ask for (launcher/planning.h), at their throughput limit (the embedded
// model's default without one).
absl::StatusOr<launcher::PlanRequest> PlanRequestFrom(const PlanFlags& flags);
// --report: writes the page of `plan` (PlanToJson's text) on `model`, beside the homogeneous and
// greedy baselines' plans at the same limit, and `frontier` (an array of plans; empty without
// --pareto).
absl::Status WritePlanReport(const PlanFlags& flags, const cost::CostModel& model,
                             const std::string& plan, const nlohmann::ordered_json& frontier);
// The plan as `heterps plan` prints it: the header, a row per stage and the servers, and the
// pipeline's rate, time and cost.
std::string RenderPlan(const cost::CostModel& model, const sched::PricedPlan& plan);
// InvalidArgument for an unknown --scheduler, or an option it would silently ignore
// (--policy-in/--policy-out but rl's, --max-plans of a scheduler with no budget of plans).
absl::Status CheckSchedulerFlags(const PlanFlags& flags);
// PlanRequestFrom's request, its flags checked (CheckSchedulerFlags), its search showing its
// progress on `progress` (which must outlive the search).
absl::StatusOr<launcher::PlanRequest> SearchRequestFrom(const PlanFlags& flags,
                                                        ProgressLine& progress);
// Scheduler options from the flags (PlanRequestFrom's); `progress` may be empty.
sched::SchedulerOptions OptionsFrom(const PlanFlags& flags,
                                    std::function<void(int64_t, double)> progress);
}  // namespace internal

}  // namespace heterps::tools
