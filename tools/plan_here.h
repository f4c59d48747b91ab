// The plan `heterps train` runs when the user gives none: this host profiled (its layers and its
// wire, docs/cost_model.md "Profiles"; or a profile the user gives), then the chosen scheduler on
// the cluster, at the flags' throughput or, by default, at 1.5x what one unit does by the model
// (the layers measured and, with a wire profile, the wire: the plan may then use several units),
// then 1x, then 0.5x.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/profile.h"
#include "heterps/sched/run_plan.h"
#include "heterps/worker/wire_profile.h"
#include "tools/cli_common.h"
#include "tools/train_command.h"

namespace heterps::tools {

struct Planned {
  sched::RunPlan plan;
  std::string why_not;                   // when no plan is feasible
  std::optional<cost::Profile> profile;  // what the plan was made with
};

// This host's wire (worker::ProfileWire at `batch`) measured with as many replicas as `cpu` has
// units here (at most this host's hardware threads): the default job's layout, every unit a
// replica sharing the cores with the server. Adds one entry for each of `types`, fitted with its
// data-parallel loss, to `profile`, replacing any it had; the progress line shows the
// measurement.
struct WireMeasured {
  int replicas = 1;
  std::vector<worker::WirePoint> points;
  std::vector<worker::WireFit> fits;  // one per type
};
absl::StatusOr<WireMeasured> AddWireProfile(const config::ModelSpec& spec, int batch,
                                            const config::ResourceType& cpu,
                                            const std::vector<const config::ResourceType*>& types,
                                            ProgressLine& progress, cost::Profile* profile);

// InvalidArgument naming the cluster when no type has a local device to profile. `policy_out`:
// where a learned scheduler saves its policy (empty: nowhere), for the job's re-plans.
absl::StatusOr<Planned> PlanHere(const TrainFlags& flags, const config::ModelSpec& spec,
                                 const config::ClusterSpec& cluster, int64_t samples,
                                 const std::string& policy_out = "");

}  // namespace heterps::tools
