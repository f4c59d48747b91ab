#include "tools/job_report.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "heterps/base/file.h"
#include "heterps/base/host.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/calibration.h"
#include "heterps/cost/cost_model.h"
#include "heterps/launcher/replanner.h"
#include "nlohmann/json.hpp"
#include "tools/table.h"

namespace heterps::tools {
namespace {

// The busiest stage's measured seconds per step.
double Busiest(const launcher::JobResult& r) {
  double busiest = 0;
  for (const launcher::StageReport& s : r.stages) busiest = std::max(busiest, s.measured_seconds);
  return busiest;
}

// The plans the job ran on, one row each, and what they cost against the first plan alone.
std::string Segments(const launcher::JobResult& r) {
  Table table(
      {"#", "from step", "plan", "why", "steps", "samples/s", "time", "switch", "$/hour", "cost"},
      {true, true, false, false, true, true, true, true, true, true});
  for (size_t i = 0; i < r.segments.size(); ++i) {
    const launcher::JobSegment& s = r.segments[i];
    table.AddRow({std::to_string(i), std::to_string(s.first_step), s.plan, s.reason,
                  std::to_string(s.steps), WithCommas(s.samples_per_second),
                  HumanSeconds(s.seconds), i == 0 ? "-" : HumanSeconds(s.switch_seconds),
                  absl::StrFormat("%.2f", s.cost_per_hour_usd), launcher::FormatUsd(s.cost_usd)});
  }
  std::string out = absl::StrCat("  cost            ", launcher::FormatUsd(r.cost_usd), " over ",
                                 r.segments.size(), " plans, of which ",
                                 launcher::FormatUsd(r.switch_cost_usd), " for the switches; ");
  if (r.first_plan_cost_usd >= 0) {
    absl::StrAppend(&out, "the first plan alone: ", launcher::FormatUsd(r.first_plan_cost_usd),
                    "\n");
  } else {
    absl::StrAppend(&out, "the first plan alone could not have finished (its units went)\n");
  }
  return absl::StrCat(out, "\n", table.Render(), "\n");
}

}  // namespace

std::string RenderPlan(const worker::JobSpec& job, const config::ClusterSpec& cluster) {
  const sched::RunPlan& plan = job.plan;
  std::string out = absl::StrFormat(
      "plan for %s on %s (scheduler %s, %s samples/s needed):\n\n", job.model.name, cluster.name,
      plan.scheduler.empty() ? "?" : plan.scheduler, WithCommas(plan.throughput_limit));
  Table table({"stage", "layers", "type", "device", "units", "time/batch", "samples/s", "$/hour"},
              {true, false, false, false, true, true, true, true});
  for (int s = 0; s < job.stages(); ++s) {
    const sched::RunStage& st = plan.stages[s];
    const int t = cluster.FindType(st.type);
    const double price = t >= 0 ? cluster.types[t].price_per_hour : 0;
    table.AddRow(
        {std::to_string(s), plan.StageName(job.model, s), st.type,
         st.device.empty() ? "-" : st.device, std::to_string(st.units),
         st.seconds_per_batch > 0 ? HumanSeconds(st.seconds_per_batch) : "-",
         st.seconds_per_batch > 0 ? WithCommas(job.batch_size() / st.seconds_per_batch) : "-",
         absl::StrFormat("%.2f", st.units * price)});
  }
  out += table.Render();
  if (plan.throughput > 0) {
    absl::StrAppendFormat(&out, "\npipeline %s samples/s predicted, %s/hour\n",
                          WithCommas(plan.throughput), base::HumanUsd(plan.cost_per_hour_usd));
  }
  absl::StrAppendFormat(&out, "steps of %s samples in blocks of %s, micro-batches of %s\n",
                        WithCommas(job.batch_size()), WithCommas(job.settings.block_size),
                        WithCommas(job.settings.micro_batch));
  return out;
}

nlohmann::ordered_json PlanJson(const worker::JobSpec& job, const config::ClusterSpec& cluster) {
  const sched::RunPlan& plan = job.plan;
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (int s = 0; s < job.stages(); ++s) {
    const sched::RunStage& st = plan.stages[s];
    const int t = cluster.FindType(st.type);
    stages.push_back({{"layers", plan.StageName(job.model, s)},
                      {"type", st.type},
                      {"device", st.device},
                      {"units", st.units},
                      {"predicted_seconds_per_batch", st.seconds_per_batch},
                      {"usd_per_hour", st.units * (t >= 0 ? cluster.types[t].price_per_hour : 0)}});
  }
  return {{"model", job.model.name},
          {"cluster", cluster.name},
          {"scheduler", plan.scheduler},
          {"predicted_samples_per_second", plan.throughput},
          {"cost_per_hour_usd", plan.cost_per_hour_usd},
          {"stages", stages}};
}

std::string Summary(const worker::JobSpec& job, const launcher::JobResult& r, const DataFile& data,
                    const std::string& job_dir) {
  const sched::RunPlan& plan = job.plan;
  const int epochs = job.settings.epochs;
  std::string out = absl::StrFormat(
      "%s: %s training samples (%d epoch%s, %d steps, %s), %s held out; %d stage%s, %d "
      "parameter server%s\n"
      "  train logloss   %.4f\n"
      "  eval logloss    %.4f\n"
      "  eval AUC        %.4f%s\n",
      job.model.name, WithCommas(r.train_samples), epochs, epochs == 1 ? "" : "s", r.steps,
      worker::ConsistencyName(job.settings.mode), WithCommas(r.eval_samples), job.stages(),
      job.stages() == 1 ? "" : "s", r.ps_shards, r.ps_shards == 1 ? "" : "s", r.train_loss,
      r.eval_loss, r.eval_auc,
      data.teacher_auc >= 0 ? absl::StrFormat("   (the teacher's: %.4f)", data.teacher_auc) : "");
  absl::StrAppendFormat(&out, "  samples/s       %s measured", WithCommas(r.samples_per_second));
  if (plan.throughput > 0) {
    absl::StrAppendFormat(&out, ", %s predicted by the plan (%.2fx)", WithCommas(plan.throughput),
                          r.samples_per_second / plan.throughput);
  }
  absl::StrAppendFormat(&out, "\n  restarts        %d\n", r.restarts);
  absl::StrAppendFormat(&out, "  parameters      digest %016x\n", r.parameter_digest);
  if (r.skipped_lines > 0) {
    absl::StrAppend(
        &out, "  skipped lines   ", WithCommas(r.skipped_lines),
        r.first_bad_line.empty() ? "" : absl::StrCat(" (first: ", r.first_bad_line, ")"), "\n");
  }
  for (const std::string& failure : r.failures) absl::StrAppend(&out, "    after: ", failure, "\n");
  if (!r.stages.empty() && r.stages[0].tier_hit_rate >= 0) {
    const launcher::StageReport& s0 = r.stages[0];
    absl::StrAppendFormat(
        &out,
        "  GPU tier        %s, %.0f MB%s: %.1f%% of the keys served from it; %s rows loaded per "
        "step%s; written back at the ends of rounds: %s rows per step on average, %s in all "
        "(outside the per-step figures)\n",
        job.settings.gpu_tier_device, job.settings.gpu_tier_bytes / 1e6,
        s0.tier_feeds_stage ? ", feeding the stage on the device" : "", 100 * s0.tier_hit_rate,
        WithCommas(s0.tier_loaded_rows),
        s0.tier_loaded_rows > 0 ? absl::StrCat(" (", WithCommas(s0.tier_ahead_rows),
                                               " of them fetched while the step before ran)")
                                : "",
        WithCommas(s0.tier_written_back_rows), HumanSeconds(s0.write_back_seconds));
  }
  for (size_t s = 0; s < r.stages.size(); ++s) {
    if (!r.stages[s].dense_held) continue;
    absl::StrAppendFormat(&out,
                          "  dense on GPU    stage %d: parameters and optimizer held on %s, "
                          "written back at the ends of rounds\n",
                          s, r.stages[s].device);
  }
  if (r.segments.size() <= 1 && plan.cost_per_hour_usd > 0) {
    const double seconds = r.wall_seconds > 0 ? r.wall_seconds : r.seconds;
    absl::StrAppendFormat(&out, "  plan cost       %s/hour; %s for this run's %s\n",
                          base::HumanUsd(plan.cost_per_hour_usd),
                          base::HumanUsd(plan.cost_per_hour_usd * seconds / 3600),
                          HumanSeconds(seconds));
  }
  if (r.segments.size() > 1) absl::StrAppend(&out, Segments(r));
  Table table(
      {"stage", "layers", "type", "device", "units", "predicted/batch", "measured/batch", "error",
       "ps wait", "prefetch", "step end", "send", "pcie/step", "idle"},
      {true, false, false, false, true, true, true, true, true, true, true, true, true, true});
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const launcher::StageReport& st = r.stages[s];
    const bool both = st.predicted_seconds > 0 && st.measured_seconds > 0;
    table.AddRow(
        {std::to_string(s), st.name, st.type, st.device.empty() ? "-" : st.device,
         std::to_string(st.units),
         st.predicted_seconds > 0 ? HumanSeconds(st.predicted_seconds) : "-",
         HumanSeconds(st.measured_seconds),
         both ? absl::StrFormat("%+.0f%%", 100 * (st.measured_seconds / st.predicted_seconds - 1))
              : "-",
         HumanSeconds(st.ps_seconds), HumanSeconds(st.prefetch_seconds),
         HumanSeconds(st.step_end_seconds), HumanSeconds(st.send_seconds),
         st.pcie_bytes > 0 ? absl::StrFormat("%.1f MB", st.pcie_bytes / 1e6) : "-",
         absl::StrFormat("%.0f%%", 100 * st.idle_fraction)});
  }
  absl::StrAppend(&out, "\n", table.Render(),
                  absl::StrFormat("\nper step %s measured", HumanSeconds(r.step_seconds)));
  if (plan.throughput > 0) {
    const double predicted = job.batch_size() / plan.throughput;
    absl::StrAppendFormat(&out, " against %s predicted (%+.0f%%)", HumanSeconds(predicted),
                          100 * (r.step_seconds / predicted - 1));
  }
  absl::StrAppendFormat(&out,
                        "; %s of it outside the busiest stage (waiting for the others, "
                        "flushes, the commit)\njob directory: %s (logs, status.json, "
                        "checkpoints)\n",
                        HumanSeconds(std::max(0.0, r.step_seconds - Busiest(r))), job_dir);
  return out;
}

nlohmann::ordered_json MetricsJson(const worker::JobSpec& job, const launcher::JobResult& r,
                                   const DataFile& data) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const launcher::StageReport& s : r.stages) {
    stages.push_back({{"layers", s.name},
                      {"type", s.type},
                      {"device", s.device},
                      {"units", s.units},
                      {"predicted_seconds_per_batch", s.predicted_seconds},
                      {"measured_seconds_per_batch", s.measured_seconds},
                      {"ps_seconds_per_batch", s.ps_seconds},
                      {"prefetch_seconds_per_batch", s.prefetch_seconds},
                      {"step_end_seconds_per_batch", s.step_end_seconds},
                      {"lookup_seconds_per_batch", s.lookup_seconds},
                      {"dense_seconds_per_batch", s.dense_seconds},
                      {"rows_seconds_per_batch", s.rows_seconds},
                      {"gradients_seconds_per_batch", s.gradients_seconds},
                      {"read_seconds_per_batch", s.read_seconds},
                      {"run_seconds_per_batch", s.run_seconds},
                      {"send_seconds_per_batch", s.send_seconds},
                      {"idle_fraction", s.idle_fraction},
                      {"pcie_bytes_per_batch", s.pcie_bytes},
                      {"forward_bytes_per_batch", s.forward_bytes},
                      {"back_bytes_per_batch", s.back_bytes},
                      {"ps_sent_bytes_per_batch", s.rows_sent_bytes + s.dense_sent_bytes},
                      {"ps_received_bytes_per_batch",
                       s.rows_received_bytes + s.dense_received_bytes},
                      {"dense_held", s.dense_held}});
    if (s.tier_hit_rate >= 0) {
      stages.back()["gpu_tier"] = {{"hit_rate", s.tier_hit_rate},
                                   {"loaded_rows_per_batch", s.tier_loaded_rows},
                                   {"ahead_rows_per_batch", s.tier_ahead_rows},
                                   {"written_back_rows_per_batch", s.tier_written_back_rows},
                                   {"feeds_stage", s.tier_feeds_stage},
                                   {"write_back_seconds", s.write_back_seconds}};
    }
  }
  nlohmann::ordered_json segments = nlohmann::ordered_json::array();
  for (const launcher::JobSegment& s : r.segments) {
    segments.push_back({{"plan", s.plan},
                        {"reason", s.reason},
                        {"first_step", s.first_step},
                        {"steps", s.steps},
                        {"samples", s.samples},
                        {"seconds", s.seconds},
                        {"switch_seconds", s.switch_seconds},
                        {"checkpoint_seconds", s.checkpoint_seconds},
                        {"load_seconds", s.load_seconds},
                        {"predicted_samples_per_second", s.predicted_samples_per_second},
                        {"samples_per_second", s.samples_per_second},
                        {"cost_per_hour_usd", s.cost_per_hour_usd},
                        {"cost_usd", s.cost_usd},
                        {"switch_cost_usd", s.switch_cost_usd}});
  }
  nlohmann::ordered_json evals = nlohmann::ordered_json::array();
  for (const launcher::EvalPoint& e : r.evals) {
    evals.push_back(
        {{"step", e.step}, {"samples", e.samples}, {"logloss", e.logloss}, {"auc", e.auc}});
  }
  nlohmann::ordered_json metrics = {
      {"model", job.model.name},
      {"data", absl::StrJoin(data.paths, " ")},
      {"data_files", data.paths},
      {"mode", std::string(worker::ConsistencyName(job.settings.mode))},
      {"epochs", job.settings.epochs},
      {"steps", r.steps},
      {"train_samples", r.train_samples},
      {"eval_samples", r.eval_samples},
      {"train_logloss", r.train_loss},
      {"eval_logloss", r.eval_loss},
      {"eval_auc", r.eval_auc},
      {"evals", evals},
      {"teacher_auc", data.teacher_auc >= 0 ? nlohmann::ordered_json(data.teacher_auc)
                                            : nlohmann::ordered_json(nullptr)},
      {"samples_per_second", r.samples_per_second},
      {"predicted_samples_per_second", job.plan.throughput},
      {"plan_cost_per_hour_usd", job.plan.cost_per_hour_usd},
      {"scheduler", job.plan.scheduler},
      {"seconds", r.seconds},
      {"wall_seconds", r.wall_seconds},
      {"step_seconds", r.step_seconds},
      {"run_step_seconds", r.run_step_seconds},
      {"commit_seconds", r.commit_seconds},
      {"restarts", r.restarts},
      {"skipped_lines", r.skipped_lines},
      {"failures", r.failures},
      {"parameter_digest", absl::StrFormat("%016x", r.parameter_digest)},
      {"ps_shards", r.ps_shards},
      {"stages", stages},
      {"segments", segments},
      {"cost_usd", r.cost_usd},
      {"switch_cost_usd", r.switch_cost_usd},
      {"first_plan_cost_usd", r.first_plan_cost_usd >= 0
                                  ? nlohmann::ordered_json(r.first_plan_cost_usd)
                                  : nlohmann::ordered_json(nullptr)},
      {"losses", r.losses}};
  return metrics;
}

absl::Status WriteMetrics(const std::string& path, const worker::JobSpec& job,
                          const launcher::JobResult& r, const DataFile& data) {
  return WriteMetrics(path, MetricsJson(job, r, data));
}

absl::Status WriteMetrics(const std::string& path, const nlohmann::ordered_json& metrics) {
  return base::WriteFileAtomically(
      path,
      metrics.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
}

absl::StatusOr<cost::CostModel> JobCostModel(const worker::JobSpec& job,
                                             const config::ClusterSpec& cluster,
                                             const std::optional<cost::Profile>& profile) {
  return cost::CostModel::Create(
      job.model, cluster,
      launcher::WithRules(job.model, launcher::RulesOf(job),
                          cost::ColocatedWorkload(std::max(job.plan.throughput_limit, 1.0), 1e9)),
      profile ? &*profile : nullptr);
}

absl::StatusOr<std::string> WriteCalibratedProfile(const worker::JobSpec& job,
                                                   const config::ClusterSpec& cluster,
                                                   const std::optional<cost::Profile>& profile,
                                                   const launcher::JobResult& r,
                                                   const std::string& job_dir) {
  HETERPS_ASSIGN_OR_RETURN(cost::CostModel model, JobCostModel(job, cluster, profile));
  const double overhead = std::max(0.0, r.step_seconds - Busiest(r));
  std::vector<cost::MeasuredStage> measured;
  for (size_t s = 0; s < job.plan.stages.size() && s < r.stages.size(); ++s) {
    const sched::RunStage& st = job.plan.stages[s];
    measured.push_back({st.first, st.last, cluster.FindType(st.type), st.units,
                        r.stages[s].measured_seconds + overhead});
  }
  const cost::Profile calibrated = cost::Calibrate(model, measured, base::HostDescription());
  const std::string path = job_dir + "/calibrated_profile.json";
  HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(path, cost::ProfileToJson(calibrated)));
  return path;
}

}  // namespace heterps::tools
