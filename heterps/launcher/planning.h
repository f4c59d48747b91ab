// The one way to plan: from a model, the catalog of now, a profile and the job's rules to a plan
// (MakePlan), and from a plan to the job that runs it (JobOfPlan). `heterps plan` (and its
// --pareto), the plan `heterps train` makes on its host, and the elastic re-planner all come
// through here, so that what one of them proposes the others would propose too, and what is
// proposed the job can run.
//
//   PlanRequest request;
//   request.model = spec; request.cluster = catalog; request.profile = profile;
//   request.workload = cost::ColocatedWorkload(limit, samples);
//   request.rules.gpu_tier = true;  // the tier's stage on one replica, in every plan
//   HETERPS_ASSIGN_OR_RETURN(MadePlan made, MakePlan(request));
//   if (made.plan.feasible) {
//     HETERPS_ASSIGN_OR_RETURN(worker::JobSpec job, JobOfPlan(recipe, made.run, catalog));
//   }
//
// Thread safety: the functions keep no state; one call per request at a time.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/cost_model.h"
#include "heterps/cost/profile.h"
#include "heterps/cost/region_sync.h"
#include "heterps/sched/priced_plan.h"
#include "heterps/sched/run_plan.h"
#include "heterps/sched/scheduler.h"
#include "heterps/worker/job.h"

namespace heterps::launcher {

// What a job demands of every plan made for it, whoever makes it.
struct JobRules {
  // A GPU tier (--gpu-cache-gib): the rows it holds have one writer, so the stage that looks them
  // up, the first, holds the first embedding layer and runs on one replica (cost::Workload::
  // first_stage_through and first_stage_max_units).
  bool gpu_tier = false;
  // With the tier: a synchronous job whose dense parameters are on the replicas and whose step is
  // one block holds them on the tier's GPU where one stage is the whole model
  // (cost::Workload::tier_holds_dense).
  bool tier_holds_dense = false;
  // The job's block size, kept for its life (worker::PlanBlockSize): stage 0's replicas each read
  // whole blocks of a step, so a plan gives it at most ceil(batch / block_size). 0: no limit.
  int64_t block_size = 0;
  // Data residency (--data-region): the region the training data is kept in; every stage and
  // the parameter servers run on its types (cost::Workload::data_region). Empty: no rule.
  // `data_source` names the data in messages.
  std::string data_region = "";
  std::string data_source = "";
  // --activations-may-cross (cost::Workload::activations_may_cross): stages from the first layer
  // past the raw features (cost::FirstLayerAwayFromData) may run in other regions.
  bool activations_may_cross = false;
  // The job's dense weights go through the parameter servers every step (an asynchronous job,
  // or --dense-on-servers: cost::Workload::dense_through_servers).
  bool dense_through_servers = false;
};

struct PlanRequest {
  config::ModelSpec model;
  config::ClusterSpec cluster;  // the catalog of now: the spec with the cluster state applied
  std::optional<cost::Profile> profile;  // measured layer and network times; none: the model's
  cost::Workload workload;               // the limit, the samples, whether servers are priced
  JobRules rules;
  std::string scheduler = "exact";  // by name (sched/default_schedulers.h)
  sched::SchedulerOptions options;
};

// The cost model every plan of `request` is priced with: its workload with the job's rules.
// InvalidArgument as cost::CostModel::Create.
absl::StatusOr<cost::CostModel> PlanningModel(const PlanRequest& request);
// `workload` with `rules` applied, as PlanningModel applies them (the tier's first stage, the
// block size's limit on it, the data residency).
cost::Workload WithRules(const config::ModelSpec& model, const JobRules& rules,
                         cost::Workload workload);
// The rules a made job keeps (its GPU tier and whether it holds the dense parameters with it, its
// block size), for pricing what it ran (calibration) as it was planned.
JobRules RulesOf(const worker::JobSpec& job);

// A workload that carries only the rules' data residency (data_region, data_source,
// activations_may_cross): what cost::CheckDataRegion and the residency messages
// (cost::ResidencyBreach) read.
cost::Workload ResidencyOf(const JobRules& rules);

// Whether a plan made elsewhere (a plan file, `heterps train --plan`, `heterps ctl --plan`) keeps
// the job's data residency rule: a plan made under a rule (its data_region and
// activations_may_cross) run under the same, and every stage and the servers on types of
// rules.data_region, except, under activations_may_cross, the stages that start at or after
// cost::FirstLayerAwayFromData(model). InvalidArgument naming the plan's field: a plan made for a
// region the job does not name (or for another, or under another policy), a region missing from
// the cluster, or a stage (or the servers) elsewhere, with the data and its region. OK without a
// rule on either side. `source` names the plan in messages.
absl::Status CheckResidency(const sched::RunPlan& plan, absl::string_view source,
                            const config::ModelSpec& model, const config::ClusterSpec& cluster,
                            const JobRules& rules);

struct MadePlan {
  cost::CostModel model;   // what the plan was priced with (PlanningModel)
  sched::PricedPlan plan;  // the scheduler's; !feasible says why (plan.why)
  sched::RunPlan run;      // the plan as a job runs it (sched::FromPlan)
};

// The request's scheduler on its cost model. An unknown scheduler, a bad workload or profile, or
// a scheduler's error: its status.
absl::StatusOr<MadePlan> MakePlan(const PlanRequest& request);

// A job whose data sources are kept in several regions (docs/cost_model.md, "Training across
// regions"): each region trains on its share of the samples with a plan of its own, made as
// MakePlan makes one with the region for data_region and its share of the limit and of the
// samples, and the regions exchange parameter deltas every `sync_steps` of their steps (and,
// `eager`, after the steps between: cost::SyncJob::eager) (cost::CheapestSync). A region whose syncs take longer than its plan's steps runs at the
// syncs' pace: its time and cost are the plan's at that pace.
struct RegionsPlan {
  int64_t sync_steps = 0;
  bool eager = false;  // windows after the steps between too (cost::SyncJob::eager)
  std::vector<cost::DataShare> shares;
  std::vector<MadePlan> regions;  // in the shares' order
  // Per region: samples/s, the job's seconds and its USD, at the pace of the slowest region with
  // its syncs (the regions step together: every region the job's seconds, at most its plan's
  // speed); NaN for a region with no feasible plan (and so the job's totals).
  std::vector<double> throughput, job_seconds, cost_usd;
  cost::SyncPrice sync;
  // Every region's plan feasible and every link carrying its syncs in time.
  bool feasible() const;
  double total_cost_usd() const;     // the regions' and the egress
  double total_job_seconds() const;  // the slowest region's
};

// The plans and the syncs of a job across regions. InvalidArgument for shares or sync steps that
// cost::PriceSync refuses, or a request with a data region of its own (the shares name the
// regions); MakePlan's errors otherwise. The request's time limit is shared by the regions.
absl::StatusOr<RegionsPlan> MakeRegionsPlan(const PlanRequest& request,
                                            const std::vector<cost::DataShare>& shares,
                                            int64_t sync_steps, bool eager = false);

// The plans and syncs as JSON (docs/plan_format.md, "Across regions"): format
// heterps-regions-plan-v1, each region's plan as sched::PlanToJson writes it.
std::string RegionsPlanToJson(const RegionsPlan& made);

// What the user set for every job of a run, whatever its plan.
struct JobRecipe {
  worker::ModelText model;
  std::vector<std::string> data_files;
  // The user's settings. ps_shards 0: the plan's servers (or, when the plan has none, sized for
  // the plan); tables.sparse_memory_budget_bytes 0: where the plan keeps part of the tables on
  // SSD, the plan's memory per shard shared by its tables. gpu_tier_bytes > 0: a GPU tier, on
  // gpu_tier_device, or where that is empty on DefaultTierDevice.
  worker::JobSettings settings;
};

// The job of `plan` on `cluster` (worker::MakeJob with the recipe's settings completed as above),
// with `ps_shards` servers when > 0 (a re-plan that keeps the servers, `heterps ctl --plan`).
// InvalidArgument as MakeJob, or when a GPU tier has no device.
absl::StatusOr<worker::JobSpec> JobOfPlan(const JobRecipe& recipe, const sched::RunPlan& plan,
                                          const config::ClusterSpec& cluster, int ps_shards = 0);

// The device a GPU tier goes on when the user names none: the first GPU device of the plan's
// stages, else the first GPU of the catalog; empty when there is none.
std::string DefaultTierDevice(const config::ClusterSpec& cluster,
                              const std::vector<std::string>& stage_devices);

// A stage planned on a device this build or host cannot run (or on a type with no local device)
// is moved to this host's CPU; one line per stage moved, for the user.
std::vector<std::string> PlaceStagesHere(const config::ModelSpec& model, sched::RunPlan* plan);

}  // namespace heterps::launcher
