#include "tools/plan_here.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "heterps/sched/default_schedulers.h"
#include "heterps/worker/profile.h"
#include "tools/cli_common.h"

namespace heterps::tools {

absl::StatusOr<Planned> PlanHere(const TrainFlags& flags, const config::ModelSpec& spec,
                                 const config::ClusterSpec& cluster, int64_t samples,
                                 const std::string& policy_out) {
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
    for (const config::ResourceType* t : local) {
      HETERPS_ASSIGN_OR_RETURN(
          worker::HostProfile one,
          worker::ProfileHost(
              spec, static_cast<int>(spec.batch_size), t->name, 5,
              [&](int done, int total) {
                progress.Show(absl::StrFormat("profiling this host's %s %s", t->local_device,
                                              Bar(done, total)));
              },
              t->local_device));
      if (t == cpu) measured.total_seconds = one.total_seconds;
      if (measured.profile.entries.empty()) {
        measured.profile = one.profile;
      } else {
        measured.profile.entries.insert(measured.profile.entries.end(), one.profile.entries.begin(),
                                        one.profile.entries.end());
      }
    }
  }
  const double one_unit = spec.batch_size / std::max(measured.total_seconds, 1e-9);
  std::vector<double> limits = {flags.throughput};
  if (flags.throughput <= 0) limits = {1.5 * one_unit, one_unit, 0.5 * one_unit};
  sched::SchedulerRegistry registry = sched::DefaultSchedulers();
  HETERPS_ASSIGN_OR_RETURN(auto scheduler, registry.Create(flags.scheduler));
  Planned out;
  out.profile = measured.profile;
  for (double limit : limits) {
    HETERPS_ASSIGN_OR_RETURN(
        cost::CostModel model,
        cost::CostModel::Create(spec, cluster,
                                cost::ColocatedWorkload(limit, static_cast<double>(samples)),
                                &measured.profile));
    sched::SchedulerOptions options;
    options.seed = flags.job.tables.seed;
    options.time_limit_seconds = 10;
    options.policy_out = policy_out;
    HETERPS_ASSIGN_OR_RETURN(sched::Plan plan, scheduler->Schedule(model, options));
    out.plan = sched::FromPlan(model, plan);
    if (plan.feasible) return out;
    out.why_not = plan.why.message;
  }
  return out;
}

}  // namespace heterps::tools
