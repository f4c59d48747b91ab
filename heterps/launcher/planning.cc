#include "heterps/launcher/planning.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/dense/default_backends.h"
#include "heterps/sched/default_schedulers.h"
#include "nlohmann/json.hpp"

namespace heterps::launcher {

absl::StatusOr<cost::CostModel> PlanningModel(const PlanRequest& request) {
  return cost::CostModel::Create(request.model, request.cluster,
                                 WithRules(request.model, request.rules, request.workload),
                                 request.profile ? &*request.profile : nullptr);
}

JobRules RulesOf(const worker::JobSpec& job) {
  JobRules rules;
  rules.gpu_tier = job.settings.gpu_tier_bytes > 0;
  rules.block_size = job.settings.block_size;
  rules.tier_holds_dense = rules.gpu_tier && job.settings.dense_on_replicas() &&
                           worker::StepBlocks(job.batch_size(), job.settings.block_size) == 1;
  rules.dense_through_servers = !job.settings.dense_on_replicas();
  return rules;
}

cost::Workload WithRules(const config::ModelSpec& model, const JobRules& rules,
                         cost::Workload workload) {
  if (rules.gpu_tier) {
    // The tier holds the first stage's embedding tables: that stage reaches the first of them,
    // on one replica.
    workload.first_stage_max_units = 1;
    workload.gpu_tier = true;
    workload.tier_holds_dense = rules.tier_holds_dense;
    const auto& layers = model.layers;
    for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
      if (layers[l].kind == config::LayerKind::kEmbedding) {
        workload.first_stage_through = l;
        break;
      }
    }
  }
  if (rules.block_size > 0) {
    const int64_t blocks = worker::StepBlocks(model.batch_size, rules.block_size);
    workload.first_stage_max_units = workload.first_stage_max_units > 0
                                         ? std::min(workload.first_stage_max_units, blocks)
                                         : blocks;
  }
  workload.data_region = rules.data_region;
  workload.data_source = rules.data_source;
  workload.activations_may_cross = rules.activations_may_cross;
  workload.dense_through_servers = rules.dense_through_servers;
  return workload;
}

cost::Workload ResidencyOf(const JobRules& rules) {
  cost::Workload workload;
  workload.data_region = rules.data_region;
  workload.data_source = rules.data_source;
  workload.activations_may_cross = rules.activations_may_cross;
  return workload;
}

absl::Status CheckResidency(const sched::RunPlan& plan, absl::string_view source,
                            const config::ModelSpec& model, const config::ClusterSpec& cluster,
                            const JobRules& rules) {
  if (!plan.data_region.empty() && plan.data_region != rules.data_region) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": data_region: the plan keeps the data in region '", plan.data_region,
        "', the job ",
        rules.data_region.empty() ? std::string("names no region (--data-region)")
                                  : absl::StrCat("in region '", rules.data_region, "'"),
        "; run it under the plan's rule, so that the job's re-plans keep it too"));
  }
  if (rules.data_region.empty()) return absl::OkStatus();
  // A plan made under a rule keeps its policy too (one made without a rule has none to keep).
  if (!plan.data_region.empty() && plan.activations_may_cross != rules.activations_may_cross) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": activations_may_cross: the plan ",
        plan.activations_may_cross ? "lets activations leave region '"
                                   : "keeps everything in region '",
        rules.data_region, "', the job ",
        rules.activations_may_cross ? "lets activations leave it (--activations-may-cross)"
                                    : "does not (--activations-may-cross)",
        "; run it under the plan's rule, so that the job's re-plans keep it too"));
  }
  const cost::Workload workload = ResidencyOf(rules);
  HETERPS_RETURN_IF_ERROR(cost::CheckDataRegion(cluster, workload));
  const int away_from = rules.activations_may_cross ? cost::FirstLayerAwayFromData(model)
                                                    : static_cast<int>(model.layers.size());
  const std::string away_name =
      away_from < static_cast<int>(model.layers.size()) ? model.layers[away_from].name : "";
  const auto elsewhere = [&](const std::string& field, const std::string& type_name) {
    const int t = cluster.FindType(type_name);
    const std::string region = t < 0 ? "" : cluster.types[t].region;
    if (t < 0 || region == rules.data_region) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", field, ": ", cost::ResidencyBreach(type_name, region, workload, away_name)));
  };
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    if (plan.stages[s].first >= away_from) continue;
    HETERPS_RETURN_IF_ERROR(elsewhere(absl::StrCat("stages[", s, "].type"), plan.stages[s].type));
  }
  if (!plan.servers.type.empty()) {
    HETERPS_RETURN_IF_ERROR(elsewhere("parameter_servers.type", plan.servers.type));
  }
  return absl::OkStatus();
}

absl::StatusOr<MadePlan> MakePlan(const PlanRequest& request) {
  HETERPS_ASSIGN_OR_RETURN(cost::CostModel model, PlanningModel(request));
  sched::SchedulerRegistry registry = sched::DefaultSchedulers();
  HETERPS_ASSIGN_OR_RETURN(auto scheduler, registry.Create(request.scheduler));
  HETERPS_ASSIGN_OR_RETURN(sched::PricedPlan plan, scheduler->Schedule(model, request.options));
  sched::RunPlan run = sched::FromPlan(model, plan);
  return MadePlan{std::move(model), std::move(plan), std::move(run)};
}

bool RegionsPlan::feasible() const {
  if (!sync.keeps_up()) return false;
  for (const MadePlan& made : regions) {
    if (!made.plan.feasible) return false;
  }
  return true;
}

double RegionsPlan::total_cost_usd() const {
  double usd = sync.egress_usd;
  for (double c : cost_usd) usd += c;
  return usd;
}

double RegionsPlan::total_job_seconds() const {
  double seconds = 0;
  for (double s : job_seconds) {
    if (std::isnan(s)) return s;
    seconds = std::max(seconds, s);
  }
  return seconds;
}

absl::StatusOr<RegionsPlan> MakeRegionsPlan(const PlanRequest& request,
                                            const std::vector<cost::DataShare>& shares,
                                            int64_t sync_steps, bool eager) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  if (!request.rules.data_region.empty() || request.rules.activations_may_cross) {
    return absl::InvalidArgumentError(
        "a job across regions keeps each share of its data in its own region: it takes no data "
        "region (nor activations that cross) of its own");
  }
  cost::SyncJob job{shares,
                    sync_steps,
                    request.workload.throughput_limit,
                    request.workload.samples,
                    request.workload.access_skew,
                    eager};
  RegionsPlan made;
  HETERPS_ASSIGN_OR_RETURN(made.sync, cost::CheapestSync(request.model, request.cluster, job));
  made.sync_steps = sync_steps;
  made.eager = eager;
  made.shares = shares;
  std::vector<double> cost_per_hour;
  for (const cost::DataShare& share : shares) {
    PlanRequest region = request;
    region.rules.data_region = share.region;
    // Its share of every step's batch (docs/regions.md: B_r = f_r B).
    region.model.batch_size = std::max<int64_t>(
        1, std::llround(share.share * static_cast<double>(request.model.batch_size)));
    const double batch = static_cast<double>(region.model.batch_size);
    region.workload.throughput_limit = share.share * request.workload.throughput_limit;
    region.workload.samples = share.share * request.workload.samples;
    if (request.options.time_limit_seconds > 0) {
      region.options.time_limit_seconds =
          request.options.time_limit_seconds / static_cast<double>(shares.size());
    }
    HETERPS_ASSIGN_OR_RETURN(MadePlan plan, MakePlan(region));
    // The syncs on this region's pace: each link's windows (the K-th steps' and the eager ones
    // between) take their seconds a step, the links side by side.
    std::map<std::pair<std::string, std::string>, double> link_seconds;
    for (const cost::SyncFlow& flow : made.sync.flows) {
      if (flow.cadence == share.region) {
        link_seconds[{flow.from, flow.to}] += flow.seconds_per_sync * flow.syncs_per_step;
      }
    }
    double sync_seconds = 0;
    for (const auto& [link, seconds] : link_seconds) sync_seconds = std::max(sync_seconds, seconds);
    // A region with no feasible plan has no time nor cost (NaN; null in the JSON), nor has the
    // job.
    double throughput = plan.plan.feasible ? plan.plan.throughput : kNaN;
    if (sync_seconds > 0 && plan.plan.feasible) {
      throughput = std::min(throughput, batch / sync_seconds);
    }
    made.throughput.push_back(throughput);
    made.job_seconds.push_back(region.workload.samples / throughput);
    cost_per_hour.push_back(plan.plan.cost_per_hour_usd);
    made.cost_usd.push_back(plan.plan.egress_usd);
    made.regions.push_back(std::move(plan));
  }
  // The regions step together (a window's merge is due at the same step in every region), so
  // every region runs at the slowest one's pace and is rented for the whole job.
  const double seconds = made.total_job_seconds();
  for (size_t r = 0; r < shares.size(); ++r) {
    made.throughput[r] = made.regions[r].plan.feasible
                             ? shares[r].share * request.workload.samples / seconds
                             : kNaN;
    made.job_seconds[r] = seconds;
    made.cost_usd[r] += cost_per_hour[r] * seconds / 3600;
  }
  return made;
}

namespace {

using json = nlohmann::ordered_json;

json SyncJson(const cost::SyncPrice& sync) {
  json flows = json::array();
  for (const cost::SyncFlow& f : sync.flows) {
    flows.push_back({{"from", f.from},
                     {"to", f.to},
                     {"cadence", f.cadence},
                     {"eager", f.eager},
                     {"bytes_per_sync", f.bytes_per_sync},
                     {"syncs", f.syncs},
                     {"seconds_per_sync", f.seconds_per_sync},
                     {"seconds_between_syncs", f.seconds_between_syncs},
                     {"load", f.load()},
                     {"egress_usd", f.egress_usd}});
  }
  return {{"topology", sync.topology == cost::SyncTopology::kHub ? "hub" : "peer_to_peer"},
          {"hub", sync.hub},
          {"keeps_up", sync.keeps_up()},
          {"bytes", sync.bytes},
          {"egress_usd", sync.egress_usd},
          {"flows", flows}};
}

}  // namespace

std::string RegionsPlanToJson(const RegionsPlan& made) {
  json regions = json::array();
  for (size_t r = 0; r < made.regions.size(); ++r) {
    const MadePlan& plan = made.regions[r];
    regions.push_back({{"region", made.shares[r].region},
                       {"share", made.shares[r].share},
                       {"throughput", made.throughput[r]},
                       {"job_seconds", made.job_seconds[r]},
                       {"cost_usd", made.cost_usd[r]},
                       {"plan", json::parse(sched::PlanToJson(plan.model, plan.plan))}});
  }
  const json out = {{"format", "heterps-regions-plan-v1"},
                    {"sync_steps", made.sync_steps},
                    {"eager", made.eager},
                    {"feasible", made.feasible()},
                    {"cost_usd", made.total_cost_usd()},
                    {"job_seconds", made.total_job_seconds()},
                    {"regions", regions},
                    {"sync", SyncJson(made.sync)}};
  return out.dump(2) + "\n";
}

absl::StatusOr<worker::JobSpec> JobOfPlan(const JobRecipe& recipe, const sched::RunPlan& plan,
                                          const config::ClusterSpec& cluster, int ps_shards) {
  worker::JobSettings settings = recipe.settings;
  if (ps_shards > 0) settings.ps_shards = ps_shards;
  // The parameter servers the plan priced (heterps plan), unless the user said otherwise: its
  // shards, and its memory where the rest of the tables go to the SSD tier (the budget is per
  // table on each shard: the shard's, shared by its tables).
  if (plan.servers.shards > 0) {
    if (settings.ps_shards == 0) settings.ps_shards = plan.servers.shards;
    HETERPS_ASSIGN_OR_RETURN(config::ModelSpec spec,
                             config::ParseModelSpec(recipe.model.yaml, recipe.model.source));
    int tables = 0;
    for (const config::LayerSpec& layer : spec.layers) {
      tables += layer.kind == config::LayerKind::kEmbedding;
    }
    if (settings.tables.sparse_memory_budget_bytes == 0 && plan.servers.ssd_bytes > 0 &&
        tables > 0) {
      settings.tables.sparse_memory_budget_bytes =
          std::max<int64_t>(1, static_cast<int64_t>(plan.servers.memory_bytes / tables));
    }
  }
  if (settings.gpu_tier_bytes > 0 && settings.gpu_tier_device.empty()) {
    std::vector<std::string> devices;
    for (const sched::RunStage& stage : plan.stages) devices.push_back(stage.device);
    settings.gpu_tier_device = DefaultTierDevice(cluster, devices);
    if (settings.gpu_tier_device.empty()) {
      return absl::InvalidArgumentError(
          "--gpu-cache-gib: this host has no GPU for the tier (--gpu-cache-device names one; "
          "--gpu-emulate N adds emulated ones)");
    }
  }
  return worker::MakeJob(recipe.model, plan, cluster, recipe.data_files, settings);
}

std::string DefaultTierDevice(const config::ClusterSpec& cluster,
                              const std::vector<std::string>& stage_devices) {
  auto gpu = [](const std::string& d) {
    return absl::StartsWith(d, "cuda:") || absl::StartsWith(d, "twin:");
  };
  for (const std::string& d : stage_devices) {
    if (gpu(d)) return d;
  }
  for (const config::ResourceType& t : cluster.types) {
    if (gpu(t.local_device)) return t.local_device;
  }
  return "";
}

std::vector<std::string> PlaceStagesHere(const config::ModelSpec& model, sched::RunPlan* plan) {
  std::vector<std::string> notes;
  const dense::BackendRegistry backends = dense::DefaultBackends();
  for (size_t s = 0; s < plan->stages.size(); ++s) {
    sched::RunStage& st = plan->stages[s];
    if (st.device == "cpu") continue;
    const absl::Status usable =
        st.device.empty() ? absl::NotFoundError("") : backends.Create(st.device, {}).status();
    if (usable.ok()) continue;
    notes.push_back(absl::StrCat(
        "stage ", s, " (", plan->StageName(model, static_cast<int>(s)), ") is planned on ", st.type,
        ", ",
        st.device.empty()
            ? "a type this host does not have (no local_device)"
            : absl::StrCat("which this host maps to ", st.device, ": ", usable.message()),
        "; its replicas run on this host's CPU"));
    st.device = "cpu";
  }
  return notes;
}

}  // namespace heterps::launcher
