#include "tools/plan_here.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "heterps/launcher/planning.h"
#include "heterps/worker/profile.h"
#include "tools/cli_common.h"
#include "tools/table.h"
#include "tools/train_common.h"

namespace heterps::tools {

absl::StatusOr<NetworkMeasured> AddNetworkProfile(
    const config::ModelSpec& spec, int batch, double layer_seconds, const config::ResourceType& cpu,
    const std::vector<const config::ResourceType*>& types,
    worker::rpc::NetworkProfileOptions options, ProgressLine& progress, cost::Profile* profile) {
  NetworkMeasured out;
  const int64_t threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  out.replicas = static_cast<int>(std::clamp<int64_t>(cpu.units, 1, threads));
  options.replicas = out.replicas;
  options.layer_seconds = layer_seconds;
  options.progress = [&](int done, int total) {
    progress.Show(absl::StrFormat("profiling this host's network %s", Bar(done, total)));
  };
  HETERPS_ASSIGN_OR_RETURN(out.points, worker::rpc::ProfileNetwork(spec, batch, options));
  for (const config::ResourceType* type : types) {
    out.fits.push_back(worker::rpc::FitNetwork(out.points, out.replicas, type->dp_loss));
    auto same = [&](const cost::NetworkEntry& e) { return e.type == type->name; };
    profile->network.erase(std::remove_if(profile->network.begin(), profile->network.end(), same),
                           profile->network.end());
    profile->network.push_back(
        {type->name, out.fits.back().bytes_per_second, out.fits.back().seconds_per_message});
  }
  return out;
}

absl::Status AddTierNetworkProfiles(
    const config::ModelSpec& spec, int batch, const std::vector<const config::ResourceType*>& types,
    const std::function<worker::ProfileOptions(const config::ResourceType&)>& tier,
    worker::rpc::NetworkProfileOptions options, ProgressLine& progress, cost::Profile* profile) {
  if (!options.synchronous) return absl::OkStatus();
  for (const config::ResourceType* type : types) {
    const bool measured =
        std::any_of(profile->tier.begin(), profile->tier.end(),
                    [&](const cost::TierEntry& e) { return e.type == type->name; });
    if (!measured) continue;
    options.tier = tier(*type);
    options.replicas = 1;
    options.layer_seconds = 0;
    for (const cost::ProfileEntry& e : profile->entries) {
      if (e.type == type->name) options.layer_seconds += e.seconds_per_batch;
    }
    options.progress = [&](int done, int total) {
      progress.Show(absl::StrFormat("profiling the GPU tier's step on %s %s", type->local_device,
                                    Bar(done, total)));
    };
    HETERPS_ASSIGN_OR_RETURN(const std::vector<worker::rpc::NetworkPoint> points,
                             worker::rpc::ProfileNetwork(spec, batch, options));
    const worker::rpc::NetworkFit fit = worker::rpc::FitNetwork(points, 1, type->dp_loss);
    auto same = [&](const cost::NetworkEntry& e) { return e.type == type->name; };
    profile->network.erase(std::remove_if(profile->network.begin(), profile->network.end(), same),
                           profile->network.end());
    profile->network.push_back({type->name, fit.bytes_per_second, fit.seconds_per_message});
  }
  return absl::OkStatus();
}

worker::BatchSources DataBatches(const config::ModelSpec& spec,
                                 const std::vector<std::string>& files,
                                 data::BadLinePolicy bad_lines) {
  if (files.empty()) return nullptr;
  return [spec, files, bad_lines](int size) {
    return worker::FileBatches(spec, files, size, bad_lines);
  };
}

int64_t GpuCacheBytes(const TrainFlags& flags) {
  return flags.gpu_cache_gib > 0 ? static_cast<int64_t>(flags.gpu_cache_gib * (int64_t{1} << 30))
                                 : 0;
}

worker::ProfileOptions TierProfileOptions(const TrainFlags& flags, const config::ModelSpec& spec,
                                          const std::string& device) {
  worker::ProfileOptions options;
  options.device = device;
  if (flags.gpu_cache_gib > 0 &&
      (flags.gpu_cache_device.empty() || flags.gpu_cache_device == device)) {
    options.gpu_tier_bytes = GpuCacheBytes(flags);
    options.tier_lookahead = flags.job.tier_lookahead;
    options.hold_dense = TierHoldsDense(flags, spec);
  }
  return options;
}

bool TierHoldsDense(const TrainFlags& flags, const config::ModelSpec& spec) {
  return flags.gpu_cache_gib > 0 && flags.job.dense_on_replicas() &&
         (flags.block_size <= 0 || worker::StepBlocks(spec.batch_size, flags.block_size) == 1);
}

absl::Status CheckTierEntries(const cost::Profile& profile, const TrainFlags& flags) {
  const int64_t bytes = GpuCacheBytes(flags);
  for (size_t i = 0; i < profile.tier.size(); ++i) {
    const cost::TierEntry& e = profile.tier[i];
    if (e.tier_bytes == 0 || bytes == 0 || e.tier_bytes == bytes) continue;
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: tier[%d]: %s was measured with a GPU tier of %s GiB, the job's is %s GiB "
        "(--gpu-cache-gib); profile again with the job's, or leave the tier entry out",
        flags.profile_path, static_cast<int>(i), e.type,
        HumanNumber(static_cast<double>(e.tier_bytes) / (int64_t{1} << 30)),
        HumanNumber(flags.gpu_cache_gib)));
  }
  return absl::OkStatus();
}

void MergeProfile(const cost::Profile& one, cost::Profile* into) {
  if (into->entries.empty() && into->network.empty() && into->tier.empty()) {
    *into = one;
    return;
  }
  into->entries.insert(into->entries.end(), one.entries.begin(), one.entries.end());
  into->network.insert(into->network.end(), one.network.begin(), one.network.end());
  into->tier.insert(into->tier.end(), one.tier.begin(), one.tier.end());
}

void SetPlanRules(const TrainFlags& flags, launcher::JobRules* rules) {
  rules->data_region = flags.data_region;
  rules->activations_may_cross = flags.activations_may_cross;
  rules->data_source = absl::StrJoin(flags.data, ", ");
  rules->dense_through_servers = !flags.job.dense_on_replicas();
}

absl::StatusOr<Planned> PlanHere(const TrainFlags& flags, const config::ModelSpec& spec,
                                 const config::ClusterSpec& cluster, int64_t samples,
                                 const std::string& policy_out,
                                 const std::vector<std::string>& data_files) {
  // A region the catalog lacks is refused before the host is measured.
  launcher::JobRules rules;
  SetPlanRules(flags, &rules);
  HETERPS_RETURN_IF_ERROR(cost::CheckDataRegion(cluster, launcher::ResidencyOf(rules)));
  // Every type this host has a device of is measured on it; the CPU's time sets the default limit.
  std::vector<const config::ResourceType*> local;
  const config::ResourceType* cpu = nullptr;
  for (const config::ResourceType& t : cluster.types) {
    if (t.local_device.empty()) continue;
    local.push_back(&t);
    if (t.local_device == "cpu") cpu = &t;
  }
  if (local.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(cluster.source,
                     ": no type has a local_device, so none can be profiled on this host; "
                     "give --plan, or a cluster with this host's type"));
  }
  if (cpu == nullptr) cpu = local.front();
  worker::HostProfile measured;
  if (!flags.profile_path.empty()) {
    HETERPS_ASSIGN_OR_RETURN(measured.profile, cost::LoadProfile(flags.profile_path));
    HETERPS_RETURN_IF_ERROR(CheckTierEntries(measured.profile, flags));
    for (const cost::ProfileEntry& e : measured.profile.entries) {
      if (e.type == cpu->name) measured.total_seconds += e.seconds_per_batch;
    }
  } else {
    ProgressLine progress(true);
    const worker::BatchSources batches = DataBatches(spec, data_files, flags.job.bad_lines);
    HETERPS_ASSIGN_OR_RETURN(const worker::ModelOptions tables,
                             ModelOptionsFrom(flags, spec, spec.batch_size));
    for (const config::ResourceType* t : local) {
      worker::ProfileOptions options = TierProfileOptions(flags, spec, t->local_device);
      options.type = t->name;
      options.repeats = 5;
      options.tables = tables;
      options.progress = [&](int done, int total) {
        progress.Show(
            absl::StrFormat("profiling this host's %s %s", t->local_device, Bar(done, total)));
      };
      HETERPS_ASSIGN_OR_RETURN(
          worker::HostProfile one,
          worker::ProfileHost(spec, static_cast<int>(spec.batch_size), options, batches));
      if (t == cpu) measured.total_seconds = one.total_seconds;
      MergeProfile(one.profile, &measured.profile);
    }
    // What the job pays beyond the layers: the same for every type of this host.
    worker::rpc::NetworkProfileOptions network;
    network.batches = batches;
    network.synchronous = flags.job.mode == worker::Consistency::kSync;
    network.dense_on_servers = flags.job.dense_on_servers;
    HETERPS_ASSIGN_OR_RETURN(network.model_options, ModelOptionsFrom(flags, spec, spec.batch_size));
    HETERPS_RETURN_IF_ERROR(AddNetworkProfile(spec, static_cast<int>(spec.batch_size),
                                              measured.total_seconds, *cpu, local, network,
                                              progress, &measured.profile)
                                .status());
    // A GPU with the tier pays what its own step pays.
    HETERPS_RETURN_IF_ERROR(AddTierNetworkProfiles(
        spec, static_cast<int>(spec.batch_size), local,
        [&](const config::ResourceType& t) {
          worker::ProfileOptions options = TierProfileOptions(flags, spec, t.local_device);
          options.tables = tables;
          return options;
        },
        network, progress, &measured.profile));
  }
  // One unit's speed as the model sees it: the layers and, with a network profile, what the job
  // pays beyond them.
  double unit_seconds = measured.total_seconds;
  if (!measured.profile.network.empty()) {
    HETERPS_ASSIGN_OR_RETURN(
        const cost::CostModel whole,
        cost::CostModel::Create(spec, cluster,
                                cost::ColocatedWorkload(1, std::max<double>(samples, 1)),
                                &measured.profile));
    const int t = cluster.FindType(cpu->name);
    const double x = whole.StageSeconds(0, whole.num_layers() - 1, t);
    if (std::isfinite(x)) unit_seconds = x;
  }
  const double one_unit = spec.batch_size / std::max(unit_seconds, 1e-9);
  const bool tier = flags.gpu_cache_gib > 0;
  std::vector<double> limits = {flags.throughput};
  if (flags.throughput <= 0) limits = {1.5 * one_unit, one_unit, 0.5 * one_unit};
  if (flags.throughput <= 0 && tier) limits.push_back(0.25 * one_unit);
  Planned out;
  out.profile = measured.profile;
  launcher::PlanRequest request;
  request.model = spec;
  request.cluster = cluster;
  request.profile = measured.profile;
  request.rules.gpu_tier = tier;
  request.rules.tier_holds_dense = TierHoldsDense(flags, spec);
  request.rules.block_size = flags.block_size;  // named or resumed; 0: the plan's
  SetPlanRules(flags, &request.rules);
  request.scheduler = flags.scheduler;
  request.options.seed = flags.job.tables.seed;
  request.options.time_limit_seconds = 10;
  request.options.policy_out = policy_out;
  for (double limit : limits) {
    request.workload = cost::ColocatedWorkload(limit, static_cast<double>(samples));
    HETERPS_ASSIGN_OR_RETURN(launcher::MadePlan made, launcher::MakePlan(request));
    const sched::PricedPlan& plan = made.plan;
    out.plan = std::move(made.run);
    if (flags.throughput <= 0) {
      std::vector<std::string> tried;
      for (double l : limits) tried.push_back(absl::StrCat(HumanNumber(l / one_unit), "x"));
      out.limit_origin = absl::StrFormat(
          "the limit: %sx the %s samples/s that one unit of %s measured on this host, the "
          "first of %s that a plan meets%s; --throughput sets it",
          HumanNumber(limit / one_unit), WithCommas(one_unit), cpu->name,
          absl::StrJoin(tried, ", "), tier ? " with the GPU tier's stage on one replica" : "");
    }
    if (plan.feasible) return out;
    out.why_not = plan.why.message;
  }
  return out;
}

}  // namespace heterps::tools
