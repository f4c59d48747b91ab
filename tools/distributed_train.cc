#include "tools/distributed_train.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/file.h"
#include "heterps/base/host.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/token.h"
#include "heterps/cost/calibration.h"
#include "heterps/cost/cost_model.h"
#include "heterps/launcher/layout.h"
#include "heterps/launcher/role_launcher.h"
#include "heterps/launcher/rpc/coordinator.h"
#include "heterps/sched/default_schedulers.h"
#include "heterps/sched/run_plan.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"
#include "tools/host_profile.h"
#include "tools/table.h"
#include "tools/train_common.h"

namespace heterps::tools {
namespace {

// Exit code 1: no feasible plan.
constexpr int kNoPlan = 1;

struct Planned {
  sched::RunPlan plan;
  std::string why_not;                   // when no plan is feasible
  std::optional<cost::Profile> profile;  // what the plan was made with
};

// Profiles this host and plans with the chosen scheduler, at `flags.throughput` or, by default,
// at 1.5x what one unit measured (the plan may then use several), then 1x, then 0.5x.
absl::StatusOr<Planned> PlanHere(const TrainFlags& flags, const config::ModelSpec& spec,
                                 const config::ClusterSpec& cluster, int64_t samples) {
  std::string type;
  for (const config::ResourceType& t : cluster.types) {
    if (!t.local_device.empty()) type = t.name;
  }
  if (type.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(cluster.source,
                     ": no type has a local_device, so none can be profiled on this host; "
                     "give --plan, or a cluster with this host's type"));
  }
  HostProfile measured;
  if (!flags.profile_path.empty()) {
    HETERPS_ASSIGN_OR_RETURN(measured.profile, cost::LoadProfile(flags.profile_path));
    for (const cost::ProfileEntry& e : measured.profile.entries) {
      if (e.type == type) measured.total_seconds += e.seconds_per_batch;
    }
  } else {
    ProgressLine progress(true);
    HETERPS_ASSIGN_OR_RETURN(
        measured,
        ProfileHost(spec, static_cast<int>(spec.batch_size), type, 5, [&](int done, int total) {
          progress.Show(absl::StrFormat("profiling this host %s", Bar(done, total)));
        }));
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
        cost::CostModel::Create(spec, cluster, {limit, static_cast<double>(samples)},
                                &measured.profile));
    sched::SchedulerOptions options;
    options.seed = flags.seed;
    options.time_limit_seconds = 10;
    HETERPS_ASSIGN_OR_RETURN(sched::Plan plan, scheduler->Schedule(model, options));
    out.plan = sched::FromPlan(model, plan);
    if (plan.feasible) return out;
    out.why_not = plan.why.message;
  }
  return out;
}

std::string RenderPlan(const config::ModelSpec& spec, const config::ClusterSpec& cluster,
                       const sched::RunPlan& plan) {
  std::string out = absl::StrFormat(
      "plan for %s on %s (scheduler %s, %s samples/s needed):\n\n", spec.name, cluster.name,
      plan.scheduler.empty() ? "?" : plan.scheduler, WithCommas(plan.throughput_limit));
  Table table({"stage", "layers", "type", "device", "units", "time/batch", "samples/s", "$/hour"},
              {true, false, false, false, true, true, true, true});
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const sched::RunStage& st = plan.stages[s];
    const int t = cluster.FindType(st.type);
    const double price = t >= 0 ? cluster.types[t].price_per_hour : 0;
    table.AddRow(
        {std::to_string(s), plan.StageName(spec, static_cast<int>(s)), st.type,
         st.device.empty() ? "-" : st.device, std::to_string(st.units),
         st.seconds_per_batch > 0 ? HumanSeconds(st.seconds_per_batch) : "-",
         st.seconds_per_batch > 0 ? WithCommas(spec.batch_size / st.seconds_per_batch) : "-",
         absl::StrFormat("%.2f", st.units * price)});
  }
  out += table.Render();
  if (plan.throughput > 0) {
    out += absl::StrFormat("\npipeline %s samples/s predicted, $%.2f/hour\n",
                           WithCommas(plan.throughput), plan.cost_per_hour_usd);
  }
  return out;
}

// The job directory and its token file.
absl::StatusOr<std::string> PrepareJobDir(const TrainFlags& flags) {
  std::string dir = flags.job_dir;
  if (dir.empty()) {
    dir =
        (std::filesystem::temp_directory_path() / absl::StrCat("heterps-job-", getpid())).string();
  }
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::UnavailableError(absl::StrCat(dir, ": cannot create: ", error.message()));
  return dir;
}

absl::StatusOr<std::string> JobToken(const std::string& job_dir, const LaunchSettings& launch,
                                     std::string* token_file) {
  if (!launch.token_file.empty()) {
    *token_file = launch.token_file;
    return ReadSecret(launch.token_file, "--token-file");
  }
  HETERPS_ASSIGN_OR_RETURN(std::string token, base::NewToken());
  *token_file = job_dir + "/token";
  const mode_t old = umask(077);  // readable by this user only
  absl::Status written = base::WriteFileAtomically(*token_file, token + "\n");
  umask(old);
  HETERPS_RETURN_IF_ERROR(written);
  return token;
}

std::string Summary(const config::ModelSpec& spec, const sched::RunPlan& plan,
                    const launcher::rpc::JobResult& r, const DataFile& data, const TrainFlags& f,
                    const std::string& job_dir) {
  std::string out = absl::StrFormat(
      "%s: %s training samples (%d epoch%s, %d steps, %s), %s held out; %d stage%s, %d "
      "parameter server%s\n"
      "  train logloss   %.4f\n"
      "  eval logloss    %.4f\n"
      "  eval AUC        %.4f%s\n",
      spec.name, WithCommas(r.train_samples), f.epochs, f.epochs == 1 ? "" : "s", r.steps, f.mode,
      WithCommas(r.eval_samples), plan.stages.size(), plan.stages.size() == 1 ? "" : "s",
      r.ps_shards, r.ps_shards == 1 ? "" : "s", r.train_loss, r.eval_loss, r.eval_auc,
      data.teacher_auc >= 0 ? absl::StrFormat("   (the teacher's: %.4f)", data.teacher_auc) : "");
  absl::StrAppendFormat(&out, "  samples/s       %s measured", WithCommas(r.samples_per_second));
  if (plan.throughput > 0) {
    absl::StrAppendFormat(&out, ", %s predicted by the plan (%.2fx)", WithCommas(plan.throughput),
                          r.samples_per_second / plan.throughput);
  }
  absl::StrAppendFormat(&out, "\n  restarts        %d\n", r.restarts);
  if (r.skipped_lines > 0) {
    absl::StrAppend(&out, "  skipped lines   ", r.skipped_lines, " (first: ", r.first_bad_line,
                    ")\n");
  }
  for (const std::string& failure : r.failures) absl::StrAppend(&out, "    after: ", failure, "\n");
  if (plan.cost_per_hour_usd > 0) {
    absl::StrAppendFormat(&out, "  plan cost       $%.2f/hour; $%.4f for this run's %s\n",
                          plan.cost_per_hour_usd, plan.cost_per_hour_usd * r.seconds / 3600,
                          HumanSeconds(r.seconds));
  }
  Table table({"stage", "layers", "type", "units", "predicted/batch", "measured/batch", "error",
               "ps wait", "send", "idle"},
              {true, false, false, true, true, true, true, true, true, true});
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const launcher::rpc::StageReport& st = r.stages[s];
    const bool both = st.predicted_seconds > 0 && st.measured_seconds > 0;
    table.AddRow(
        {std::to_string(s), st.name, st.type, std::to_string(st.units),
         st.predicted_seconds > 0 ? HumanSeconds(st.predicted_seconds) : "-",
         HumanSeconds(st.measured_seconds),
         both ? absl::StrFormat("%+.0f%%", 100 * (st.measured_seconds / st.predicted_seconds - 1))
              : "-",
         HumanSeconds(st.ps_seconds), HumanSeconds(st.send_seconds),
         absl::StrFormat("%.0f%%", 100 * st.idle_fraction)});
  }
  double busiest = 0;
  for (const launcher::rpc::StageReport& st : r.stages) {
    busiest = std::max(busiest, st.measured_seconds);
  }
  absl::StrAppend(&out, "\n", table.Render(),
                  absl::StrFormat("\nper step %s measured", HumanSeconds(r.step_seconds)));
  if (plan.throughput > 0) {
    const double predicted = spec.batch_size / plan.throughput;
    absl::StrAppendFormat(&out, " against %s predicted (%+.0f%%)", HumanSeconds(predicted),
                          100 * (r.step_seconds / predicted - 1));
  }
  absl::StrAppendFormat(&out,
                        "; %s of it outside the busiest stage (waiting for the others, "
                        "flushes, the commit)\njob directory: %s (logs, status.json, "
                        "checkpoints)\n",
                        HumanSeconds(std::max(0.0, r.step_seconds - busiest)), job_dir);
  return out;
}

absl::Status WriteMetrics(const std::string& path, const config::ModelSpec& spec,
                          const sched::RunPlan& plan, const launcher::rpc::JobResult& r,
                          const DataFile& data, const TrainFlags& f) {
  nlohmann::ordered_json stages = nlohmann::ordered_json::array();
  for (const launcher::rpc::StageReport& s : r.stages) {
    stages.push_back({{"layers", s.name},
                      {"type", s.type},
                      {"units", s.units},
                      {"predicted_seconds_per_batch", s.predicted_seconds},
                      {"measured_seconds_per_batch", s.measured_seconds},
                      {"ps_seconds_per_batch", s.ps_seconds},
                      {"send_seconds_per_batch", s.send_seconds},
                      {"idle_fraction", s.idle_fraction}});
  }
  nlohmann::ordered_json metrics = {
      {"model", spec.name},
      {"data", data.path},
      {"mode", f.mode},
      {"epochs", f.epochs},
      {"steps", r.steps},
      {"train_samples", r.train_samples},
      {"eval_samples", r.eval_samples},
      {"train_logloss", r.train_loss},
      {"eval_logloss", r.eval_loss},
      {"eval_auc", r.eval_auc},
      {"teacher_auc", data.teacher_auc >= 0 ? nlohmann::ordered_json(data.teacher_auc)
                                            : nlohmann::ordered_json(nullptr)},
      {"samples_per_second", r.samples_per_second},
      {"predicted_samples_per_second", plan.throughput},
      {"seconds", r.seconds},
      {"step_seconds", r.step_seconds},
      {"restarts", r.restarts},
      {"skipped_lines", r.skipped_lines},
      {"failures", r.failures},
      {"parameter_digest", absl::StrFormat("%016x", r.parameter_digest)},
      {"ps_shards", r.ps_shards},
      {"stages", stages},
      {"losses", r.losses}};
  return base::WriteFileAtomically(path, metrics.dump(2) + "\n");
}

// Writes <job_dir>/calibrated_profile.json: the profile that makes the cost model predict each
// stage's measured time per step, the time outside the busiest stage (barriers, the commit)
// counted against every stage (heterps/cost/calibration.h). Its path.
absl::StatusOr<std::string> WriteCalibratedProfile(const config::ModelSpec& spec,
                                                   const config::ClusterSpec& cluster,
                                                   const sched::RunPlan& plan,
                                                   const std::optional<cost::Profile>& profile,
                                                   const launcher::rpc::JobResult& r,
                                                   const std::string& job_dir) {
  HETERPS_ASSIGN_OR_RETURN(
      cost::CostModel model,
      cost::CostModel::Create(spec, cluster, {std::max(plan.throughput_limit, 1.0), 1e9},
                              profile ? &*profile : nullptr));
  double busiest = 0;
  for (const launcher::rpc::StageReport& s : r.stages) {
    busiest = std::max(busiest, s.measured_seconds);
  }
  const double overhead = std::max(0.0, r.step_seconds - busiest);
  std::vector<cost::MeasuredStage> measured;
  for (size_t s = 0; s < plan.stages.size() && s < r.stages.size(); ++s) {
    const sched::RunStage& st = plan.stages[s];
    measured.push_back({st.first, st.last, cluster.FindType(st.type), st.units,
                        r.stages[s].measured_seconds + overhead});
  }
  const cost::Profile calibrated = cost::Calibrate(model, measured, base::HostDescription());
  const std::string path = job_dir + "/calibrated_profile.json";
  HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(path, cost::ProfileToJson(calibrated)));
  return path;
}

}  // namespace

int RunDistributedTrain(const TrainFlags& flags, const LaunchSettings& launch) {
  QuietGrpcLogs();
  absl::StatusOr<config::ModelSpec> spec = LoadModelOrDefault(flags.model_path);
  if (!spec.ok()) return Fail(spec.status());
  absl::StatusOr<std::string> model_text = ModelTextOrDefault(flags.model_path);
  if (!model_text.ok()) return Fail(model_text.status());
  if (flags.batch > 0) spec->batch_size = flags.batch;
  absl::StatusOr<config::ClusterSpec> cluster = LoadClusterOrLocal(flags.cluster_path);
  if (!cluster.ok()) return Fail(cluster.status());
  absl::StatusOr<worker::ModelOptions> model = ModelOptionsFrom(flags, spec->batch_size);
  if (!model.ok()) return Fail(model.status());
  absl::StatusOr<DataFile> data = PrepareData(flags);
  if (!data.ok()) return Fail(data.status());

  sched::RunPlan plan;
  std::optional<cost::Profile> planning_profile;
  if (!flags.plan_path.empty()) {
    absl::StatusOr<std::string> text = base::ReadTextFile(flags.plan_path);
    if (!text.ok()) return Fail(text.status());
    absl::StatusOr<sched::RunPlan> read =
        sched::ReadRunPlan(*text, flags.plan_path, *spec, *cluster);
    if (!read.ok()) return Fail(read.status());
    plan = *read;
  } else {
    absl::StatusOr<Planned> planned = PlanHere(flags, *spec, *cluster, flags.rows * flags.epochs);
    if (!planned.ok()) return Fail(planned.status());
    if (!planned->plan.feasible) {
      std::fprintf(stderr, "heterps: no feasible plan on %s: %s\n", cluster->name.c_str(),
                   planned->why_not.c_str());
      return kNoPlan;
    }
    plan = planned->plan;
    planning_profile = planned->profile;
  }
  std::printf("%s\n", RenderPlan(*spec, *cluster, plan).c_str());
  std::fflush(stdout);
  if (launch.local) {
    // Every replica runs here, on this host's CPU: say so where the plan meant something else.
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      const sched::RunStage& st = plan.stages[s];
      if (st.device == "cpu") continue;
      std::fprintf(stderr, "heterps: note: stage %zu (%s) is planned on %s, %s; its replicas run on "
                   "this host's CPU\n", s, plan.StageName(*spec, static_cast<int>(s)).c_str(),
                   st.type.c_str(),
                   st.device.empty() ? "a type this host does not have (no local_device)"
                                     : absl::StrCat("which this host maps to ", st.device,
                                                    ", a device this build has no backend for")
                                           .c_str());
    }
  }

  absl::StatusOr<std::string> job_dir = PrepareJobDir(flags);
  if (!job_dir.ok()) return Fail(job_dir.status());
  std::string token_file;
  absl::StatusOr<std::string> token = JobToken(*job_dir, launch, &token_file);
  if (!token.ok()) return Fail(token.status());

  launcher::rpc::JobOptions options;
  options.spec = *spec;
  options.model_yaml = *model_text;
  options.plan = plan;
  options.ps_shards =
      flags.ps_shards > 0 ? flags.ps_shards : launcher::SizeParameterServers(*spec, *cluster, plan);
  options.files = {data->path};
  options.epochs = flags.epochs;
  options.micro_batch = flags.micro_batch;
  options.sync = flags.mode == "sync";
  options.eval_fraction = flags.eval_fraction;
  options.skip_bad_lines = flags.skip_bad_lines;
  options.model = *model;
  options.checkpoint_every = flags.checkpoint_every;
  options.max_restarts = flags.max_restarts;
  options.job_dir = *job_dir;
  options.host = launch.host;
  options.port = launch.port;
  options.token = *token;
  if (!launch.local && launch.world > 0) {
    const launcher::JobLayout layout = launcher::MakeLayout(plan, options.ps_shards);
    if (layout.world() != launch.world) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "the plan needs ", layout.world(), " processes (1 coordinator, ", options.ps_shards,
          " parameter servers, ", layout.world() - 1 - options.ps_shards,
          " stage replicas); the launcher started ", launch.world)));
    }
  }
  launcher::LocalLauncher local({"/proc/self/exe", token_file, *job_dir, launch.host});
  if (launch.local) options.launcher = &local;
  ProgressLine progress(true);
  options.progress = [&](const launcher::rpc::JobProgress& p) {
    if (!p.event.empty()) {
      progress.Clear();
      std::fprintf(stderr, "heterps: %s\n", p.event.c_str());
      return;
    }
    const double rate = p.seconds > 0 ? p.samples / p.seconds : 0;
    progress.Show(absl::StrFormat(
        "step %d/%d %s %s samples, %s samples/s, loss %.4f%s", p.step, p.total_steps,
        Bar(p.step, p.total_steps), WithCommas(p.samples), WithCommas(rate), p.loss,
        p.restarts > 0 ? absl::StrCat(", ", p.restarts, " restarts") : ""));
  };
  absl::StatusOr<launcher::rpc::JobResult> result = launcher::rpc::RunJob(options);
  progress.Clear();
  if (!result.ok()) {
    return Fail(
        absl::Status(result.status().code(),
                     absl::StrCat(result.status().message(), " (job directory ", *job_dir, ")")));
  }
  std::printf("%s", Summary(*spec, plan, *result, *data, flags, *job_dir).c_str());
  absl::StatusOr<std::string> calibrated =
      WriteCalibratedProfile(*spec, *cluster, plan, planning_profile, *result, *job_dir);
  if (calibrated.ok()) {
    std::printf("calibrated profile: %s (plan with it: --profile %s)\n", calibrated->c_str(),
                calibrated->c_str());
  } else {
    std::fprintf(stderr, "heterps: no calibrated profile: %s\n",
                 std::string(calibrated.status().message()).c_str());
  }
  if (!flags.metrics_out.empty()) {
    absl::Status written = WriteMetrics(flags.metrics_out, *spec, plan, *result, *data, flags);
    if (!written.ok()) return Fail(written);
  }
  return 0;
}

}  // namespace heterps::tools
