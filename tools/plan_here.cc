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

worker::BatchSources DataBatches(const config::ModelSpec& spec,
                                 const std::vector<std::string>& files,
                                 data::BadLinePolicy bad_lines) {
  if (files.empty()) return nullptr;
  return [spec, files, bad_lines](int size) {
    return worker::FileBatches(spec, files, size, bad_lines);
  };
}

void SetResidency(const TrainFlags& flags, launcher::JobRules* rules) {
  rules->data_region = flags.data_region;
  rules->activations_may_cross = flags.activations_may_cross;
  rules->data_source = absl::StrJoin(flags.data, ", ");
}

absl::StatusOr<Planned> PlanHere(const TrainFlags& flags, const config::ModelSpec& spec,
                                 const config::ClusterSpec& cluster, int64_t samples,
                                 const std::string& policy_out,
                                 const std::vector<std::string>& data_files) {
  // A region the catalog lacks is refused before the host is measured.
  launcher::JobRules rules;
  SetResidency(flags, &rules);
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
    for (const cost::ProfileEntry& e : measured.profile.entries) {
      if (e.type == cpu->name) measured.total_seconds += e.seconds_per_batch;
    }
  } else {
    ProgressLine progress(true);
    const worker::BatchSources batches = DataBatches(spec, data_files, flags.job.bad_lines);
    for (const config::ResourceType* t : local) {
      HETERPS_ASSIGN_OR_RETURN(
          worker::HostProfile one,
          worker::ProfileHost(
              spec, static_cast<int>(spec.batch_size), t->name, 5,
              [&](int done, int total) {
                progress.Show(absl::StrFormat("profiling this host's %s %s", t->local_device,
                                              Bar(done, total)));
              },
              t->local_device, batches));
      if (t == cpu) measured.total_seconds = one.total_seconds;
      if (measured.profile.entries.empty()) {
        measured.profile = one.profile;
      } else {
        measured.profile.entries.insert(measured.profile.entries.end(), one.profile.entries.begin(),
                                        one.profile.entries.end());
      }
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
  request.rules.block_size = flags.block_size;  // named or resumed; 0: the plan's
  SetResidency(flags, &request.rules);
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
