// What `heterps train` shows of a distributed job: the plan as a table before it runs, and after
// it, the summary, the metrics JSON and the calibrated profile for the next plan.
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/cost/cost_model.h"
#include "heterps/cost/profile.h"
#include "heterps/launcher/job_result.h"
#include "heterps/worker/job.h"
#include "nlohmann/json.hpp"
#include "tools/train_common.h"

namespace heterps::tools {

// The plan as a table: each stage's layers, type, device, units, predicted time and price.
std::string RenderPlan(const worker::JobSpec& job, const config::ClusterSpec& cluster);

// The plan for the job report (html_report.h): each stage's layers, type, device, units,
// predicted time per batch and $/hour.
nlohmann::ordered_json PlanJson(const worker::JobSpec& job, const config::ClusterSpec& cluster);

// The summary printed at the end: losses, AUC, samples/s against the prediction, restarts, cost,
// and each stage's measured time against the plan's.
std::string Summary(const worker::JobSpec& job, const launcher::JobResult& result,
                    const DataFile& data, const std::string& job_dir);

// The metrics as JSON (docs/runtime.md, "Metrics"), and written at `path`.
nlohmann::ordered_json MetricsJson(const worker::JobSpec& job, const launcher::JobResult& result,
                                   const DataFile& data);
absl::Status WriteMetrics(const std::string& path, const worker::JobSpec& job,
                          const launcher::JobResult& result, const DataFile& data);
absl::Status WriteMetrics(const std::string& path, const nlohmann::ordered_json& metrics);

// The cost model a made job is priced with as it was planned (its rules: the tier's traffic where
// it had one, its dense weights' path), on `cluster` with `profile`. Errors: CostModel::Create's.
absl::StatusOr<cost::CostModel> JobCostModel(const worker::JobSpec& job,
                                             const config::ClusterSpec& cluster,
                                             const std::optional<cost::Profile>& profile);

// Writes <job_dir>/calibrated_profile.json: the profile that makes the cost model predict each
// stage's measured time per step, the time outside the busiest stage (barriers, the commit)
// counted against every stage (heterps/cost/calibration.h). Its path.
absl::StatusOr<std::string> WriteCalibratedProfile(const worker::JobSpec& job,
                                                   const config::ClusterSpec& cluster,
                                                   const std::optional<cost::Profile>& profile,
                                                   const launcher::JobResult& result,
                                                   const std::string& job_dir);

}  // namespace heterps::tools
