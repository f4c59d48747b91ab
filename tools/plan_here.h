// The plan `heterps train` runs when the user gives none: this host profiled (or a profile the
// user gives), then the chosen scheduler on the cluster, at the flags' throughput or, by default,
// at 1.5x what one unit measured (the plan may then use several units), then 1x, then 0.5x.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/profile.h"
#include "heterps/sched/run_plan.h"
#include "tools/train_command.h"

namespace heterps::tools {

struct Planned {
  sched::RunPlan plan;
  std::string why_not;                   // when no plan is feasible
  std::optional<cost::Profile> profile;  // what the plan was made with
};

// InvalidArgument naming the cluster when no type has a local device to profile. `policy_out`:
// where a learned scheduler saves its policy (empty: nowhere), for the job's re-plans.
absl::StatusOr<Planned> PlanHere(const TrainFlags& flags, const config::ModelSpec& spec,
                                 const config::ClusterSpec& cluster, int64_t samples,
                                 const std::string& policy_out = "");

}  // namespace heterps::tools
