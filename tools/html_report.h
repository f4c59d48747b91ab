// <job_dir>/report.html: one self-contained page (Chart.js inlined, no network) that shows a
// distributed job while it runs (the page reloads itself every 5 s) and after it ends.
//
//   JobReport report(job_dir, PlanJson(job, cluster));
//   options.progress = [&](const launcher::JobProgress& p) { report.Progress(p); };
//   ... the job runs ...
//   report.Finish(MetricsJson(job, result, data), "done");
//
// The page draws: training loss against samples (the eval logloss and AUC, each evaluation's
// during training and the end's, and the synthetic teacher's AUC, once known); samples/s over time
// against the plan's prediction, with restarts and plan switches marked; the dollars the run spent
// as it went, one colour per plan it ran (the job's own account at the end); each stage's predicted
// against measured time per batch, and its busy time split into computing, parameter servers,
// sending and idle; the plan as a pipeline of stages (layers, type, device, units, $/hour); the
// parameter servers' rows in memory and on SSD per table, with hit rates; between regions, what
// crossed each link (a plan across regions: by kind, against the prediction; a region's job: its
// windows), the egress, and whether the data's ids stayed in its region. The charts fill the
// window's width, two or more abreast where it is wide. A hidden element (#report-check, its
// data-charts, data-drawn and data-errors) says whether every chart drew data and whether any
// script failed, for a headless browser to read.
//
// Errors writing the file are kept (last_error) but never stop the job: the report is a view.
//
// Thread safety: Progress and Finish from one thread (the job's progress callback's).
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "heterps/launcher/job_result.h"
#include "nlohmann/json.hpp"

namespace heterps::tools {

class JobReport {
 public:
  // `plan`: {"scheduler", "predicted_samples_per_second", "cost_per_hour_usd", "stages":
  // [{"layers", "type", "device", "units", "predicted_seconds_per_batch", "usd_per_hour"}]}.
  JobReport(std::string job_dir, nlohmann::ordered_json plan);

  // The job runs `plan` from now on (the elastic re-planner switched to it): the page draws it,
  // and lists every plan the job ran with the time it started. The first plan is the
  // constructor's; giving it again changes nothing.
  void Running(nlohmann::ordered_json plan);

  // Records a point of the job's progress (at most 1,000 kept, evenly spread over the job);
  // rewrites the page at most every 5 s, as often as it reloads itself.
  void Progress(const launcher::JobProgress& progress);

  // The final page, without the reload: `metrics` as WriteMetrics writes them, `state` "done" or
  // "failed" (with `error`).
  absl::Status Finish(const nlohmann::ordered_json& metrics, const std::string& state,
                      const std::string& error = "");

  // The page for `data` (the object the page's script reads), reloading itself if `refresh`.
  static std::string Html(const nlohmann::ordered_json& data, bool refresh);

  const std::string& path() const { return path_; }

 private:
  absl::Status Write(const nlohmann::ordered_json& metrics, const std::string& state,
                     const std::string& error, bool refresh);

  std::string job_dir_, path_;
  nlohmann::ordered_json plan_;
  nlohmann::ordered_json series_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json events_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json evals_ = nlohmann::ordered_json::array();  // at most kMaxPoints
  nlohmann::ordered_json plans_ = nlohmann::ordered_json::array();  // {"seconds", "plan"}
  double last_seconds_ = 0;  // the latest progress's time since the job started
  static constexpr size_t kMaxPoints = 1000;
  absl::Time last_write_ = absl::InfinitePast();
  double min_gap_ = 0.5;  // seconds between the series' points
  int restarts_ = 0;
};

// `heterps plan --report plan.html`: one self-contained page with the plan as a pipeline, its
// cost beside the baselines' (`data["baselines"]`, plans of other schedulers at the same limit),
// and with --pareto the cost/throughput frontier (`data["frontier"]`) with the plan marked.
// `data["plan"]` and each entry are plans as PlanToJson writes them (docs/plan_format.md). The
// same #report-check as the job report.
std::string PlanReportHtml(const nlohmann::ordered_json& data);

}  // namespace heterps::tools
