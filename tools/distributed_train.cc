#include "tools/distributed_train.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "heterps/base/env.h"
#include "heterps/base/file.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/token.h"
#include "heterps/launcher/cluster_state.h"
#include "heterps/launcher/job_checkpoint.h"
#include "heterps/launcher/job_metrics.h"
#include "heterps/launcher/job_status.h"
#include "heterps/launcher/layout.h"
#include "heterps/launcher/local_gpus.h"
#include "heterps/launcher/planning.h"
#include "heterps/launcher/replanner.h"
#include "heterps/launcher/role_launcher.h"
#include "heterps/launcher/rpc/coordinator.h"
#include "heterps/rpc/quiet_logs.h"
#include "heterps/sched/run_plan.h"
#include "tools/cli_common.h"
#include "tools/html_report.h"
#include "tools/job_report.h"
#include "tools/plan_links.h"
#include "tools/metrics_http.h"
#include "tools/plan_here.h"
#include "tools/region_job.h"
#include "tools/stop_signals.h"
#include "tools/table.h"
#include "tools/train_common.h"

namespace heterps::tools {
namespace {

// Exit code 1: no feasible plan.
constexpr int kNoPlan = 1;

// The job directory: the given one, or a new one under the system's temporary directory;
// private to this user, as is everything the job writes from now on (checkpoints, logs, the
// report): umask 077 for this process and the roles it starts.
absl::StatusOr<std::string> PrepareJobDir(const TrainFlags& flags) {
  std::string dir = flags.job_dir;
  if (dir.empty()) {
    dir =
        (std::filesystem::temp_directory_path() / absl::StrCat("heterps-job-", getpid())).string();
  }
  umask(077);
  HETERPS_RETURN_IF_ERROR(base::DefaultEnv()->CreateDirs(dir));
  std::error_code error;
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all,
                               std::filesystem::perm_options::replace, error);
  if (error) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir, ": cannot make the job directory private: ", error.message()));
  }
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

// The job's TLS (rpc/job_tls.h): the user's certificate and key (--tls-cert, --tls-key), or with
// --tls a new certificate written into the job directory for the roles this process starts; none
// otherwise. `cert_file` and `key_file`: the files the local roles read.
absl::StatusOr<heterps::rpc::JobTls> JobTlsFor(const TrainFlags& flags, const std::string& job_dir,
                                               const LaunchSettings& launch, std::string* cert_file,
                                               std::string* key_file) {
  heterps::rpc::JobTls tls;
  if (!flags.tls_cert.empty()) {
    *cert_file = flags.tls_cert;
    *key_file = flags.tls_key;
    HETERPS_ASSIGN_OR_RETURN(tls.cert_pem, base::ReadTextFile(flags.tls_cert));
    HETERPS_ASSIGN_OR_RETURN(tls.key_pem, ReadSecret(flags.tls_key, "--tls-key"));
    return tls;
  }
  if (!flags.tls) return tls;
  if (!launch.local) {
    return absl::InvalidArgumentError(
        "--tls makes a certificate for a job whose processes heterps train starts; under an "
        "external launcher give every process the same --tls-cert and --tls-key");
  }
  HETERPS_ASSIGN_OR_RETURN(tls, heterps::rpc::NewJobTls());
  *cert_file = job_dir + "/tls-cert.pem";
  *key_file = job_dir + "/tls-key.pem";
  HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(*cert_file, tls.cert_pem));
  const mode_t old = umask(077);  // the key: readable by this user only
  absl::Status written = base::WriteFileAtomically(*key_file, tls.key_pem);
  umask(old);
  HETERPS_RETURN_IF_ERROR(written);
  return tls;
}

// The /metrics endpoint (--metrics-port), serving the job's status.json as Prometheus text; none
// (nullptr) without the flag. Its address goes to stderr and its port to <job_dir>/metrics.port.
absl::StatusOr<std::unique_ptr<MetricsHttp>> ServeMetrics(const TrainFlags& flags,
                                                          const std::string& job_dir,
                                                          const std::string& token) {
  MetricsHttpOptions options;
  options.host = flags.metrics_host;
  options.port = flags.metrics_port;
  options.token = token;
  return ServeMetricsIfAsked(
      options, job_dir + "/metrics.port", [job_dir]() -> absl::StatusOr<std::string> {
        absl::StatusOr<launcher::JobStatus> status =
            launcher::ReadJobStatus(base::DefaultEnv(), job_dir);
        if (absl::IsNotFound(status.status())) {
          launcher::JobStatus starting;  // before the coordinator's first status
          starting.state = "starting";
          return launcher::JobStatusToPrometheus(starting);
        }
        if (!status.ok()) return status.status();
        return launcher::JobStatusToPrometheus(*status);
      });
}

// A finished job's endpoint stays up until a scraper has read how the job ended (status.json's
// state, "done" or "failed"), for at most --metrics-linger seconds, or until a stop signal.
void ServeFinalMetrics(MetricsHttp* metrics, const TrainFlags& flags,
                       const std::atomic<bool>* stop) {
  if (metrics == nullptr || flags.metrics_linger <= 0) return;
  std::fflush(stdout);
  std::fprintf(stderr, "heterps: serving the final metrics until the next scrape (at most %s)\n",
               HumanSeconds(flags.metrics_linger).c_str());
  metrics->ServeFinal(absl::Seconds(flags.metrics_linger), stop);
}

// A stage planned on a device this host or build cannot run goes to this host's CPU, and the
// user is told.
void PlaceStages(sched::RunPlan& plan, const config::ModelSpec& spec) {
  for (const std::string& note : launcher::PlaceStagesHere(spec, &plan)) {
    std::fprintf(stderr, "heterps: note: %s\n", note.c_str());
  }
}

// The plan: the one given (checked against the model and the cluster), or one made here.
absl::StatusOr<Planned> ChoosePlan(const TrainFlags& flags, const config::ModelSpec& spec,
                                   const config::ClusterSpec& cluster,
                                   const std::string& policy_out,
                                   const std::vector<std::string>& data_files) {
  if (flags.plan_path.empty()) {
    return PlanHere(flags, spec, cluster, flags.rows * flags.job.epochs, policy_out, data_files);
  }
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadTextFile(flags.plan_path));
  Planned out;
  HETERPS_ASSIGN_OR_RETURN(out.plan, sched::ReadRunPlan(text, flags.plan_path, spec, cluster));
  launcher::JobRules rules;
  SetPlanRules(flags, &rules);
  HETERPS_RETURN_IF_ERROR(
      launcher::CheckResidency(out.plan, flags.plan_path, spec, cluster, rules));
  return out;
}

// The block size the job must keep: the one the flags name, else that of the unfinished job in
// `job_dir` this run resumes (its checkpoint's identity names it); 0: none yet (the plan's).
absl::StatusOr<int64_t> KnownBlockSize(const TrainFlags& flags, const std::string& job_dir) {
  if (flags.block_size > 0) return flags.block_size;
  if (flags.fresh) return 0;
  HETERPS_ASSIGN_OR_RETURN(std::optional<launcher::JobCheckpoint> record,
                           launcher::ReadJobCheckpoint(base::DefaultEnv(), job_dir));
  if (!record) return 0;
  for (const std::string& line : record->identity) {
    int64_t block = 0;
    absl::string_view value = line;
    if (absl::ConsumePrefix(&value, "block_size=") && absl::SimpleAtoi(value, &block) &&
        block > 0) {
      return block;
    }
  }
  return 0;
}

// What the flags set for every job of this run, whatever its plan (launcher/planning.h); the
// block size, where the flags name none (nor a resumed job: KnownBlockSize), from the plan the
// job starts with.
absl::StatusOr<launcher::JobRecipe> RecipeFrom(const TrainFlags& flags,
                                               const ModelTextAndSpec& model, const DataFile& data,
                                               const sched::RunPlan& first,
                                               const config::ClusterSpec& cluster) {
  launcher::JobRecipe recipe;
  recipe.model = {model.text, model.spec.source, model.spec.batch_size};
  recipe.data_files = data.paths;
  recipe.settings = flags.job;
  recipe.settings.block_size =
      flags.block_size > 0
          ? flags.block_size
          : worker::PlanBlockSize(first, cluster, model.spec.batch_size, flags.job.micro_batch);
  HETERPS_ASSIGN_OR_RETURN(recipe.settings.tables,
                           ModelOptionsFrom(flags, model.spec, model.spec.batch_size));
  if (flags.gpu_cache_gib > 0) {
    recipe.settings.gpu_tier_device = flags.gpu_cache_device;
    recipe.settings.gpu_tier_bytes = GpuCacheBytes(flags);
    if (recipe.settings.gpu_tier_bytes <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpu-cache-gib ", flags.gpu_cache_gib, " is less than a byte: the tier holds no row"));
    }
  }
  return recipe;
}

void ShowProgress(ProgressLine& progress, const launcher::JobProgress& p) {
  if (!p.event.empty()) {
    progress.Clear();
    std::fprintf(stderr, "heterps: %s\n", p.event.c_str());
    return;
  }
  const double rate = p.samples_per_second;
  progress.Show(absl::StrFormat("step %d/%d %s %s samples, %s samples/s, loss %.4f%s", p.step,
                                p.total_steps, Bar(p.step, p.total_steps), WithCommas(p.samples),
                                WithCommas(rate), p.loss,
                                p.restarts > 0 ? absl::StrCat(", ", p.restarts, " restarts") : ""));
}

// A re-planner that also draws each plan the job runs into its report.
class ReportingReplanner final : public launcher::Replanner {
 public:
  ReportingReplanner(std::unique_ptr<launcher::Replanner> inner, JobReport* report,
                     config::ClusterSpec cluster)
      : inner_(std::move(inner)), report_(report), cluster_(std::move(cluster)) {}
  void Running(const worker::JobSpec& job) override {
    report_->Running(PlanJson(job, cluster_));
    inner_->Running(job);
  }
  std::optional<launcher::PlanSwitch> Check(const launcher::JobPosition& position) override {
    return inner_->Check(position);
  }
  void RoleLost(const std::string& type) override { inner_->RoleLost(type); }
  double CostPerHour() const override { return inner_->CostPerHour(); }
  std::optional<double> FirstPlanCostPerHour() const override {
    return inner_->FirstPlanCostPerHour();
  }

 private:
  std::unique_ptr<launcher::Replanner> inner_;
  JobReport* report_;
  const config::ClusterSpec cluster_;
};

// The job's re-planner (launcher/replanner.h): the catalog, profile and scheduler the job was
// planned with, the files that change them, and the user's settings for every new plan. Its
// decisions go to stderr and to <job_dir>/replan.log.
// `as_specified`: the catalog as the spec (and the local devices) say, before the state file:
// the re-planner applies the state file itself, every version of it to the spec's figures.
std::unique_ptr<launcher::Replanner> NewReplanner(
    const TrainFlags& flags, const config::ClusterSpec& as_specified, const Planned& planned,
    const launcher::JobRecipe& recipe, const worker::JobSpec& job, const std::string& job_dir,
    const std::string& policy, ProgressLine& progress) {
  launcher::ElasticOptions o;
  o.model = job.model;
  o.cluster = as_specified;
  o.cluster_watch = flags.cluster_watch;
  o.cluster_state = flags.cluster_state;
  o.control = launcher::JobControlPath(job_dir);
  o.gpu_emulate = flags.gpu_emulate;
  o.profile = planned.profile;
  o.scheduler = flags.scheduler;
  o.seed = flags.job.tables.seed;
  o.policy = policy;
  o.throughput_limit = job.plan.throughput_limit > 0 ? job.plan.throughput_limit : flags.throughput;
  o.threshold = flags.replan_threshold;
  o.max_losses = std::max(1, flags.job.max_restarts);
  o.rules.gpu_tier = flags.gpu_cache_gib > 0;
  o.rules.tier_holds_dense = launcher::RulesOf(job).tier_holds_dense;
  o.rules.block_size = recipe.settings.block_size;
  SetPlanRules(flags, &o.rules);
  o.recipe = recipe;
  o.place_here = true;
  const std::string log_path = job_dir + "/replan.log";
  o.log = [&progress, log_path](const std::string& line) {
    progress.Clear();
    std::fprintf(stderr, "heterps: %s\n", line.c_str());
    if (std::FILE* f = std::fopen(log_path.c_str(), "a")) {
      std::fprintf(f, "%s %s\n", absl::FormatTime(absl::Now()).c_str(), line.c_str());
      std::fclose(f);
    }
  };
  return launcher::NewElasticReplanner(std::move(o));
}

}  // namespace

int RunDistributedTrain(const TrainFlags& given, const LaunchSettings& launch) {
  TrainFlags flags = given;
  absl::StatusOr<std::unique_ptr<RegionJob>> prepared = RegionJob::Prepare(&flags);
  if (!prepared.ok()) return Fail(prepared.status());
  const std::unique_ptr<RegionJob> region = *std::move(prepared);  // null: one region
  // The first SIGTERM or SIGINT stops the job at its next step with a checkpoint (before the job
  // starts, it ends when the job would start); a second one ends the process at once (the roles
  // with it), saying so in status.json. Blocked here, before any thread starts (profiling's and
  // OpenMP's included), so that no thread takes them with their default action.
  absl::Mutex stop_mu;
  std::string stop_dir;  // the job directory, once known; guarded by stop_mu
  StopSignals signals([&](int signal) {
    std::string dir;
    {
      absl::MutexLock lock(&stop_mu);
      dir = stop_dir;
    }
    if (dir.empty()) return;
    launcher::MarkJobEnded(base::DefaultEnv(), dir, "stopped",
                           absl::StrCat("ended at once by a second ", strsignal(signal)))
        .IgnoreError();
  });
  rpc::QuietLogs();
  absl::StatusOr<ModelTextAndSpec> model = LoadModelText(flags.model_path, flags.batch);
  if (!model.ok()) return Fail(model.status());
  absl::StatusOr<config::ClusterSpec> cluster = LoadClusterOrLocal(flags.cluster_path);
  if (!cluster.ok()) return Fail(cluster.status());
  if (flags.cluster_path.empty() || flags.gpu_emulate > 0) {
    for (const std::string& line : launcher::AddLocalGpus(&*cluster, flags.gpu_emulate)) {
      std::printf("device %s\n", line.c_str());
    }
  }
  const config::ClusterSpec as_specified = *cluster;
  if (!flags.cluster_state.empty() && !base::DefaultEnv()->FileExists(flags.cluster_state)) {
    // A controller may write the file later; a directory that is not there is a mistyped path.
    const std::filesystem::path parent = std::filesystem::path(flags.cluster_state).parent_path();
    if (!parent.empty() && !std::filesystem::is_directory(parent)) {
      return Fail(absl::NotFoundError(absl::StrCat("--cluster-state ", flags.cluster_state,
                                                   ": no directory ", parent.string())));
    }
    std::fprintf(stderr,
                 "heterps: --cluster-state %s does not exist yet: the job starts on the spec's "
                 "figures and reads it when it appears\n",
                 flags.cluster_state.c_str());
  } else if (!flags.cluster_state.empty()) {
    // The catalog of now: what the state file says when the job starts is what it plans with.
    absl::StatusOr<std::string> text =
        base::ReadFile(base::DefaultEnv(), flags.cluster_state, launcher::kMaxClusterStateBytes);
    if (!text.ok()) return Fail(text.status());
    absl::StatusOr<launcher::ClusterState> state =
        launcher::ParseClusterState(*text, flags.cluster_state, *cluster);
    if (!state.ok()) return Fail(state.status());
    *cluster = launcher::ApplyClusterState(*std::move(cluster), *state);
  }
  absl::StatusOr<DataFile> data = PrepareData(flags, model->spec);
  if (!data.ok()) return Fail(data.status());
  // Multi-hot slots are planned with what the data holds, not with the spec's guess.
  config::ModelSpec planning = model->spec;
  if (flags.plan_path.empty()) {
    absl::StatusOr<std::vector<std::string>> notes = UseIdsOfData(data->paths, &planning);
    if (!notes.ok()) return Fail(notes.status());
    for (const std::string& note : *notes) std::printf("%s\n", note.c_str());
  }
  absl::StatusOr<std::string> job_dir = PrepareJobDir(flags);
  if (!job_dir.ok()) return Fail(job_dir.status());
  // A learned scheduler's policy stays with the job: its re-plans start from it.
  const std::string policy =
      flags.scheduler == "rl" || flags.scheduler == "auto" ? *job_dir + "/policy.bin" : "";
  // A block size named or resumed holds for the plan made here too (whole blocks per replica).
  absl::StatusOr<int64_t> block_size = KnownBlockSize(flags, *job_dir);
  if (!block_size.ok()) return Fail(block_size.status());
  TrainFlags known = flags;
  known.block_size = *block_size;
  absl::StatusOr<Planned> planned = ChoosePlan(known, planning, *cluster, policy, data->paths);
  if (!planned.ok()) return Fail(planned.status());
  if (!planned->plan.feasible && flags.plan_path.empty()) {
    std::fprintf(stderr, "heterps: no feasible plan on %s: %s\n", cluster->name.c_str(),
                 planned->why_not.c_str());
    return kNoPlan;
  }
  PlaceStages(planned->plan, model->spec);
  absl::StatusOr<launcher::JobRecipe> recipe =
      RecipeFrom(known, *model, *data, planned->plan, *cluster);
  if (!recipe.ok()) return Fail(recipe.status());
  absl::StatusOr<worker::JobSpec> job = launcher::JobOfPlan(*recipe, planned->plan, *cluster);
  if (!job.ok()) return Fail(job.status());
  std::printf("%s", RenderPlan(*job, *cluster).c_str());
  if (!planned->limit_origin.empty()) std::printf("(%s)\n", planned->limit_origin.c_str());
  std::printf("\n");
  std::fflush(stdout);
  if (!launch.local && launch.world > 0) {
    const launcher::JobLayout layout = launcher::MakeLayout(*job);
    if (layout.world() != launch.world) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "the plan needs ", layout.world(), " processes (1 coordinator, ", layout.ps_shards,
          " parameter servers, ", layout.world() - 1 - layout.ps_shards,
          " stage replicas); the launcher started ", launch.world)));
    }
  }

  std::string token_file;
  absl::StatusOr<std::string> token = JobToken(*job_dir, launch, &token_file);
  if (!token.ok()) return Fail(token.status());
  absl::StatusOr<std::unique_ptr<MetricsHttp>> metrics = ServeMetrics(flags, *job_dir, *token);
  if (!metrics.ok()) return Fail(metrics.status());

  std::string tls_cert, tls_key;
  absl::StatusOr<heterps::rpc::JobTls> tls =
      JobTlsFor(flags, *job_dir, launch, &tls_cert, &tls_key);
  if (!tls.ok()) return Fail(tls.status());

  launcher::rpc::RunOptions options;
  options.job_dir = *job_dir;
  options.fresh = flags.fresh;
  options.host = launch.host;
  options.port = launch.port;
  options.token = *token;
  options.tls = *tls;
  launcher::LocalLauncherOptions local_options;
  local_options.binary = "/proc/self/exe";
  local_options.token_file = token_file;
  local_options.job_dir = *job_dir;
  local_options.host = launch.host;
  local_options.tls_cert = tls_cert;
  local_options.tls_key = tls_key;
  launcher::LocalLauncher local(local_options);
  if (launch.local) options.launcher = &local;
  ProgressLine progress(true);
  JobReport report(*job_dir, PlanJson(*job, *cluster));
  options.progress = [&](const launcher::JobProgress& p) {
    ShowProgress(progress, p);
    report.Progress(p);
  };
  {
    absl::MutexLock lock(&stop_mu);
    stop_dir = *job_dir;
  }
  options.stop = signals.flag();
  const auto replanner = std::make_unique<ReportingReplanner>(
      NewReplanner(flags, as_specified, *planned, *recipe, *job, *job_dir, policy, progress),
      &report, *cluster);
  options.replanner = replanner.get();
  if (region != nullptr) {  // listening before the job starts
    if (absl::Status started = region->Start(); !started.ok()) return Fail(started);
    options.regions = region->windows();
  }
  absl::StatusOr<launcher::JobResult> result = launcher::rpc::RunJob(*job, options);
  progress.Clear();
  if (region != nullptr && !result.ok()) region->Failed(result.status());
  if (!result.ok() && signals.received() != 0 && absl::IsCancelled(result.status())) {
    std::fprintf(stderr, "heterps: %s (job directory %s)\n",
                 std::string(result.status().message()).c_str(), job_dir->c_str());
    return 128 + signals.received();
  }
  {
    // The job has ended: a signal from now on stops the wait for a final scrape, and nothing
    // rewrites the state the job ended in.
    absl::MutexLock lock(&stop_mu);
    stop_dir.clear();
  }
  if (!result.ok()) {
    report.Finish(nullptr, "failed", std::string(result.status().message())).IgnoreError();
    const int code =
        Fail(absl::Status(result.status().code(), absl::StrCat(result.status().message(),
                                                               " (job directory ", *job_dir, ")")));
    ServeFinalMetrics(metrics->get(), flags, signals.flag());
    return code;
  }
  std::string summary = Summary(result->job, *result, *data, *job_dir);
  nlohmann::ordered_json metrics_json = MetricsJson(result->job, *result, *data);
  ReportPlanLinks(result->job, *result, *cluster, planned->profile, &summary, &metrics_json);
  if (region != nullptr) region->Report(&summary, &metrics_json);
  std::printf("%s", summary.c_str());
  if (absl::Status s = report.Finish(metrics_json, "done"); s.ok()) {
    std::printf("report: %s\n", report.path().c_str());
  } else {
    std::fprintf(stderr, "heterps: no report: %s\n", std::string(s.message()).c_str());
  }
  absl::StatusOr<std::string> calibrated =
      WriteCalibratedProfile(result->job, *cluster, planned->profile, *result, *job_dir);
  if (calibrated.ok()) {
    std::printf("calibrated profile: %s (plan with it: --profile %s)\n", calibrated->c_str(),
                calibrated->c_str());
  } else {
    std::fprintf(stderr, "heterps: no calibrated profile: %s\n",
                 std::string(calibrated.status().message()).c_str());
  }
  if (!flags.metrics_out.empty()) {
    absl::Status written = WriteMetrics(flags.metrics_out, metrics_json);
    if (!written.ok()) return Fail(written);
  }
  ServeFinalMetrics(metrics->get(), flags, signals.flag());
  return 0;
}

}  // namespace heterps::tools
