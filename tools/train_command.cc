#include "tools/train_command.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "heterps/base/file.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "heterps/data/line_source.h"
#include "heterps/worker/region_exchange.h"
#include "heterps/worker/trainer.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"
#include "tools/distributed_train.h"
#include "tools/table.h"
#include "tools/train_common.h"

namespace heterps::tools {
namespace {

// --data-shares and the --sync flags as the regions of a run in this process.
absl::Status RegionsFrom(const TrainFlags& flags, worker::RegionTraining* out) {
  if (!flags.region_data.empty()) {
    for (const std::string& item : flags.region_data) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--region-data: '", item, "' is not REGION=FILE (for example eu=/data/eu/*.tsv)"));
      }
      const std::string region = item.substr(0, eq);
      HETERPS_ASSIGN_OR_RETURN(std::vector<std::string> paths,
                               data::ExpandDataPaths({item.substr(eq + 1)}));
      const auto at = std::find(out->names.begin(), out->names.end(), region);
      if (at == out->names.end()) {
        out->names.push_back(region);
        out->files.push_back(paths);
      } else {
        auto& files = out->files[at - out->names.begin()];
        files.insert(files.end(), paths.begin(), paths.end());
      }
    }
    if (out->names.size() < 2) {
      return absl::InvalidArgumentError("--region-data: name two regions or more");
    }
  } else {
    HETERPS_ASSIGN_OR_RETURN(std::vector<cost::DataShare> shares,
                             ParseDataShares(flags.data_shares));
    if (shares.size() < 2) {
      return absl::InvalidArgumentError("--data-shares: name two regions or more");
    }
    for (const cost::DataShare& s : shares) {
      if (std::find(out->names.begin(), out->names.end(), s.region) != out->names.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--data-shares: region '", s.region, "' named twice"));
      }
      out->names.push_back(s.region);
      out->shares.push_back(s.share);
    }
  }
  out->sync_steps = flags.sync_steps;
  out->threshold = static_cast<float>(flags.sync_threshold);
  out->eager_threshold = static_cast<float>(flags.sync_eager_threshold);
  out->delay = flags.sync_delay;
  if (!flags.sync_hub.empty()) {
    const auto hub = std::find(out->names.begin(), out->names.end(), flags.sync_hub);
    if (hub == out->names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sync-hub: '", flags.sync_hub, "' is none of the regions"));
    }
    out->topology = cost::SyncTopology::kHub;
    out->hub = static_cast<int>(hub - out->names.begin());
  }
  return absl::OkStatus();
}

int RunSingleProcess(const TrainFlags& flags) {
  absl::StatusOr<config::ModelSpec> spec = LoadModelOrDefault(flags.model_path);
  if (!spec.ok()) return Fail(spec.status());
  worker::TrainOptions options;
  options.epochs = flags.job.epochs;
  options.batch_size = flags.batch;
  options.threads = flags.threads;
  options.sync_threads = flags.sync_threads;
  options.block_size = flags.block_size > 0 ? flags.block_size : worker::kDefaultBlockSize;
  options.micro_batching = {flags.replicas, flags.job.micro_batch};
  options.eval_fraction = flags.job.eval_fraction;
  options.bad_lines = flags.job.bad_lines;
  options.reader_threads = flags.job.reader_threads;
  absl::StatusOr<worker::ModelOptions> model =
      ModelOptionsFrom(flags, *spec, flags.batch > 0 ? flags.batch : spec->batch_size);
  if (!model.ok()) return Fail(model.status());
  options.model = *model;
  if (!flags.data_shares.empty() || !flags.region_data.empty()) {
    absl::Status regions = RegionsFrom(flags, &options.regions);
    if (!regions.ok()) return Fail(regions);
  }
  // With --region-data the regions' own files, else --data (or synthetic rows).
  DataFile own;
  for (const auto& files : options.regions.files) {
    own.paths.insert(own.paths.end(), files.begin(), files.end());
  }
  absl::StatusOr<DataFile> file =
      options.regions.files.empty() ? PrepareData(flags, *spec) : absl::StatusOr<DataFile>(own);
  if (!file.ok()) return Fail(file.status());
  if (options.regions.files.empty()) options.files = file->paths;

  ProgressLine progress(true);
  options.progress = [&](const worker::TrainProgress& p) {
    const double rate = p.seconds > 0 ? p.samples / p.seconds : 0;
    const double eta = rate > 0 ? (p.total_samples - p.samples) / rate : 0;
    progress.Show(
        absl::StrFormat("epoch %d/%d %s %s/%s samples, %s samples/s, loss %.4f, ETA %.0fs", p.epoch,
                        flags.job.epochs, Bar(p.samples, p.total_samples), WithCommas(p.samples),
                        WithCommas(p.total_samples), WithCommas(rate), p.loss, eta));
  };
  absl::StatusOr<worker::TrainResult> result = worker::Train(*spec, options);
  progress.Clear();
  if (!result.ok()) return Fail(result.status());

  std::string summary = absl::StrFormat(
      "%s: %s training samples (%d epoch%s), %s held out, %s dense parameters\n"
      "  train logloss   %.4f\n"
      "  eval logloss    %.4f\n"
      "  eval AUC        %.4f%s\n"
      "  samples/s       %s (%d thread%s)\n"
      "  peak memory     %.0f MB\n"
      "  parameters      digest %016x\n",
      spec->name, WithCommas(result->train_samples), flags.job.epochs,
      flags.job.epochs == 1 ? "" : "s", WithCommas(result->eval_samples),
      WithCommas(result->dense_parameters), result->train_loss, result->eval_loss, result->eval_auc,
      file->teacher_auc >= 0 ? absl::StrFormat("   (the teacher's: %.4f)", file->teacher_auc) : "",
      WithCommas(result->samples_per_second), flags.threads,
      flags.threads == 1 ? "" : (flags.sync_threads ? "s sharing each step" : "s, asynchronous"),
      result->peak_rss_bytes / 1e6, result->parameter_digest);
  if (result->skipped_lines > 0) {
    absl::StrAppend(&summary, "  skipped lines   ", WithCommas(result->skipped_lines));
    if (!result->first_bad_lines.empty()) {
      absl::StrAppend(&summary, " (first: ", result->first_bad_lines.front(), ")");
    }
    absl::StrAppend(&summary, "\n");
  }
  RegionFigures regions;
  if (options.regions.names.size() > 1) {
    regions.names = options.regions.names;
    regions.shares = result->region_shares;
    regions.where = "emulated in this process";
    regions.windows = result->windows;
    regions.sync_steps = options.regions.sync_steps;
    regions.steps = result->steps;
    regions.threshold = options.regions.threshold;
    regions.eager_threshold = options.regions.eager_threshold;
    regions.delay = options.regions.delay;
    regions.hub = flags.sync_hub;
    regions.traffic = result->region_traffic;
    summary += RegionsSummary(regions);
  }
  std::printf("%s", summary.c_str());
  if (!flags.metrics_out.empty()) {
    nlohmann::ordered_json metrics = {
        {"model", spec->name},
        {"data", absl::StrJoin(flags.data, " ")},
        {"data_files", file->paths},
        {"epochs", flags.job.epochs},
        {"train_samples", result->train_samples},
        {"eval_samples", result->eval_samples},
        {"train_logloss", result->train_loss},
        {"eval_logloss", result->eval_loss},
        {"eval_auc", result->eval_auc},
        {"teacher_auc", file->teacher_auc >= 0 ? nlohmann::ordered_json(file->teacher_auc)
                                               : nlohmann::ordered_json(nullptr)},
        {"samples_per_second", result->samples_per_second},
        {"seconds", result->seconds},
        {"threads", flags.threads},
        {"sync_threads", flags.sync_threads},
        {"block_size", options.block_size},
        {"micro_batch", flags.job.micro_batch},
        {"replicas", flags.replicas},
        {"peak_rss_bytes", result->peak_rss_bytes},
        {"skipped_lines", result->skipped_lines},
        {"parameter_digest", absl::StrFormat("%016x", result->parameter_digest)},
        {"losses", result->losses}};
    if (options.regions.names.size() > 1) {
      metrics["regions"] = RegionsJson(regions, options.regions.files);
    }
    absl::Status written = base::WriteFileAtomically(flags.metrics_out, metrics.dump(2) + "\n");
    if (!written.ok()) return Fail(written);
  }
  return 0;
}

}  // namespace

void AddJobOptions(CLI::App* cmd, TrainFlags& flags) {
  cmd->add_option("--model", flags.model_path, "Model spec (default: the embedded dlrm-small)");
  cmd->add_option("--cluster", flags.cluster_path,
                  "Cluster spec (default: the embedded local catalog, this host's CPU)");
  cmd->add_option("--plan", flags.plan_path,
                  "Run this plan (from heterps plan) instead of planning");
  cmd->add_option("--data-region", flags.data_region,
                  "The region the data is kept in (a `region` of the cluster spec): every plan "
                  "made for the job, and --plan, runs on that region's types only");
  cmd->add_flag("--activations-may-cross", flags.activations_may_cross,
                "with --data-region: the stages past the embeddings and the first learned layer of "
                "the dense features may run on other regions' types (pooled activations and the "
                "labels leave the data's region)")
      ->needs("--data-region");
  CLI::Option* tls =
      cmd->add_flag("--tls", flags.tls,
                    "TLS between every process of the job, with a certificate made for the job "
                    "(written to <job-dir>/tls-cert.pem and tls-key.pem)");
  CLI::Option* cert = cmd->add_option(
      "--tls-cert", flags.tls_cert,
      "PEM certificate every process of the job serves with and trusts (with --tls-key)");
  CLI::Option* key = cmd->add_option("--tls-key", flags.tls_key, "PEM private key of --tls-cert");
  cert->needs(key);
  key->needs(cert);
  tls->excludes(cert);
  cmd->add_option("--data", flags.data,
                  "data files or globs (plain, gzip or zstd) of the model's layout (Criteo TSV by "
                  "default) or in the binary form of `heterps convert`, or 'synthetic' (default)");
  cmd->add_option("--rows", flags.rows, "Rows of synthetic data (default 200000)")
      ->check(Positive());
  cmd->add_option("--epochs", flags.job.epochs, "Passes over the training data (default 1)")
      ->check(Positive());
  cmd->add_option("--batch", flags.batch, "Samples per step (default: the spec's batch_size)")
      ->check(NonNegative());
  cmd->add_option("--optimizer", flags.optimizer,
                  "Embedding optimizer: sgd, adagrad, adam (default: the spec's, else adagrad)");
  cmd->add_option("--lr", flags.lr,
                  "Embedding learning rate (default: the spec's, else 0.05; sgd: 0.05 x batch / "
                  "256, 0.4 at the batch of 2048)")
      ->check(Finite())
      ->check(Positive());
  cmd->add_option("--dense-optimizer", flags.dense_optimizer,
                  "Dense optimizer (default: the spec's, else adam)");
  cmd->add_option("--dense-lr", flags.dense_lr,
                  "Dense learning rate (default: the spec's, else 0.001)")
      ->check(Finite())
      ->check(Positive());
  cmd->add_option("--seed", flags.job.tables.seed, "Seed of the parameters and the synthetic data");
  cmd->add_option("--eval-fraction", flags.job.eval_fraction,
                  "Share of the lines held out for evaluation (default 0.1)")
      ->check(Finite())
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_flag_callback(
      "--skip-bad-lines", [&flags] { flags.job.bad_lines = data::BadLinePolicy::kSkip; },
      "Skip malformed lines (counted) instead of stopping at the first");
  cmd->add_option("--reader-threads", flags.job.reader_threads,
                  "Threads parsing text in each data reader, the same batches whatever the "
                  "number (default 1; the binary form of `heterps convert` needs none)")
      ->check(CLI::Range(1, worker::kMaxReaderThreads));
  cmd->add_option("--metrics-out", flags.metrics_out, "Write the metrics here as JSON");
  cmd->add_option("--metrics-port", flags.metrics_port,
                  "Serve Prometheus metrics on http://HOST:PORT/metrics while the job runs (0: "
                  "any free port, written to <job-dir>/metrics.port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-host", flags.metrics_host,
                  "Address of --metrics-port (default 127.0.0.1; elsewhere a scrape sends the "
                  "job's token as a bearer token)");
  cmd->add_option("--metrics-linger", flags.metrics_linger,
                  "After the job, keep --metrics-port up until one scrape has read its end state, "
                  "for at most this many seconds (default 30; 0: stop at once)")
      ->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--mode", flags.job.mode,
                  "sync: every step's updates applied before the next (default); async: "
                  "parameter-server style")
      ->transform(CLI::CheckedTransformer(std::map<std::string, worker::Consistency>{
          {"sync", worker::Consistency::kSync}, {"async", worker::Consistency::kAsync}}));
  cmd->add_option("--block-size", flags.block_size,
                  "Samples per block: a synchronous step's gradients are summed block by block "
                  "in a fixed order, so that the run is the same whatever the plan's layout "
                  "(default 64; where a stage runs on a GPU, stage 0's micro-batch rounded down "
                  "to a power of two, chosen once from the first plan)")
      ->check(Positive());
  cmd->add_option(
         "--micro-batch", flags.job.micro_batch,
         "Samples per micro-batch, whole blocks (default: a stage-0 replica's share, over "
         "2 per stage in a pipeline); --single-process: cut the steps as a job's replicas would "
         "(with --replicas; the result is the same)")
      ->check(NonNegative());
  cmd->add_option("--ps-shards", flags.job.ps_shards,
                  "Parameter-server processes, at most 64 (default: the plan's servers where it "
                  "names them, else sized from the plan)")
      ->check(CLI::Range(int64_t{0}, cost::kMaxPsShards));
  cmd->add_option("--checkpoint-every", flags.job.checkpoint_every,
                  "Steps between checkpoints; 0: none (default 100)")
      ->check(NonNegative());
  cmd->add_option("--eval-interval", flags.job.eval_interval,
                  "Steps between evaluations on the held-out lines while the job trains, for the "
                  "eval curves of report.html and /metrics; 0: at the end only (default 0)")
      ->check(NonNegative());
  cmd->add_option("--max-restarts", flags.job.max_restarts,
                  "Restarts from the last checkpoint after a failure (default 3)")
      ->check(NonNegative());
  cmd->add_option("--job-dir", flags.job_dir,
                  "Logs, status, parameter-server data and checkpoints (default: a new "
                  "directory under the system's temporary directory)");
  cmd->add_option("--throughput", flags.throughput,
                  "Samples/s the plan must reach (default: from this host's profile)")
      ->check(Finite())
      ->check(NonNegative());
  cmd->add_option("--scheduler", flags.scheduler,
                  "Scheduler that plans the job (default auto: rl, then exact from its plan)");
  cmd->add_option("--gpu-emulate", flags.gpu_emulate,
                  "For testing: N emulated GPUs (the host twin, running GPU code on this host's "
                  "cores) in the local catalog")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--gpu-cache-gib", flags.gpu_cache_gib,
                  "GPU memory for hot embedding rows in front of the parameter servers, GiB (0: "
                  "no GPU tier; it needs stage 0 on one replica)")
      ->check(Finite())
      ->check(CLI::Range(0.0, 1024.0));
  cmd->add_flag("--gpu-tf32", flags.job.gpu_tf32,
                "GPU stages' matrix products in TensorFloat-32: faster, less precise (off by "
                "default; the eval AUC says what it costs)");
  cmd->add_flag("--dense-on-servers", flags.job.dense_on_servers,
                "Synchronous jobs: the dense parameters through the parameter servers every step "
                "instead of held by each stage's replicas (the same values; slower)");
  cmd->add_flag("!--no-gpu-cache-lookahead", flags.job.tier_lookahead,
                "The GPU tier loads each step's missing rows when the step starts, instead of "
                "fetching them while the step before runs (the same run; for comparison)");
  cmd->add_option("--gpu-cache-device", flags.gpu_cache_device,
                  "The GPU of the tier (default: the plan's first GPU, else this host's)");
  cmd->add_option("--cluster-watch", flags.cluster_watch,
                  "Re-plan when this cluster spec changes (units, prices, types); it replaces "
                  "--cluster from then on");
  cmd->add_option("--cluster-state", flags.cluster_state,
                  "Re-plan when this file of units and prices per type changes (docs/elastic.md)");
  cmd->add_option("--replan-threshold", flags.replan_threshold,
                  "Switch plans only when the new one saves more than this share of the "
                  "remaining cost, net of the switch's own cost (default 0.05)")
      ->check(Finite())
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--ps-memory-mib", flags.ps_memory_mib,
                  "Memory for each embedding table's rows on each parameter server, MiB: the rows "
                  "beyond it go to the SSD tier (RocksDB under the job directory); default: the "
                  "budget of the plan's servers where they keep rows on SSD, else all in memory")
      ->check(Finite())
      ->check(CLI::Range(0.0, 1048576.0));
  cmd->add_flag("--fresh", flags.fresh,
                "Start a new job even where --job-dir holds an unfinished one (which is resumed "
                "otherwise); the old job's checkpoints stay, under its id");
  cmd->add_option("--profile", flags.profile_path,
                  "Plan with this profile (heterps profile, or a run's calibrated_profile.json) "
                  "instead of profiling this host");
}

CLI::App* AddTrainCommand(CLI::App& app, TrainFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a model: plan it, start every role on this host and run the plan");
  AddJobOptions(cmd, flags);
  CLI::Option* single =
      cmd->add_flag("--single-process", flags.single_process,
                    "Train in this process, with no parameter-server or worker processes");
  CLI::Option* threads =
      cmd->add_option("--threads", flags.threads,
                      "--single-process: training threads; more than 1 trains asynchronously "
                      "unless --sync-threads (default 1)")
          ->check(Positive());
  threads->needs(single);
  cmd->add_flag("--sync-threads", flags.sync_threads,
                "--single-process with --threads > 1: the threads share each step as a synchronous "
                "job's replicas do (the one-thread run, to the bit, on several cores) instead of "
                "training asynchronously")
      ->needs(threads);
  CLI::Option* shares =
      cmd->add_option("--data-shares", flags.data_shares,
                      "--single-process: regions emulated in this process, REGION=SHARE each (for "
                      "example us=0.6,eu=0.4): each trains its share of every batch on tables of "
                      "its own, and the regions exchange parameter deltas every --sync-steps "
                      "(docs/regions.md)")
          ->delimiter(',')
          ->needs(single);
  cmd->add_option("--region-data", flags.region_data,
                      "--single-process: regions emulated in this process, each reading data of "
                      "its own, REGION=FILE or REGION=GLOB, repeated (a region named again reads "
                      "more files); a region's share of every step is its share of the lines")
          ->needs(single)
          ->excludes(shares)
          ->excludes(cmd->get_option("--data"))
          ->excludes(cmd->get_option("--rows"));
  cmd->add_option("--sync-steps", flags.sync_steps,
                  "with --data-shares, --region-data or --region: steps between two windows of "
                  "deltas (default 100)")
      ->check(Positive())
      ->each([&flags](const std::string&) { flags.sync_given = true; });
  cmd->add_option("--sync-threshold", flags.sync_threshold,
                  "across regions: a row is sent once its largest change passes this fraction "
                  "of its largest value (Gaia's significance; default 0: every changed row)")
      ->check(Finite())
      ->check(NonNegative())
      ->each([&flags](const std::string&) { flags.sync_given = true; });
  cmd->add_option("--sync-eager-threshold", flags.sync_eager_threshold,
                  "across regions: also after every step between two windows, send the rows whose "
                  "largest change passes this fraction of their largest value (above "
                  "--sync-threshold; default 0: none)")
      ->check(Finite())
      ->check(NonNegative())
      ->each([&flags](const std::string&) { flags.sync_given = true; });
  cmd->add_option("--sync-delay", flags.sync_delay,
                  "across regions: windows a window's merge waits before it is applied, the "
                  "steps between training on (0 or 1, default 1)")
      ->check(CLI::Range(0, 1))
      ->each([&flags](const std::string&) { flags.sync_given = true; });
  cmd->add_option("--sync-hub", flags.sync_hub,
                  "with --data-shares, --region-data or --region: the region every other sends "
                  "its deltas to and receives the merge from (default: peer to peer; the same "
                  "in every region's job)")
      ->each([&flags](const std::string&) { flags.sync_given = true; });
  CLI::Option* region =
      cmd->add_option("--region", flags.region,
                      "this job is one region of a run across regions (docs/regions.md): it "
                      "trains its own --data on servers of its own and exchanges windows of "
                      "deltas every --sync-steps with the other regions' jobs, through the "
                      "gateways of --region-gateways");
  CLI::Option* gateways =
      cmd->add_option("--region-gateways", flags.region_gateways,
                      "with --region: every region's gateway, REGION=HOST:PORT each, the same list "
                      "in every region (this region's entry is where its gateway listens)")
          ->delimiter(',');
  region->needs(gateways);
  gateways->needs(region);
  cmd->add_option("--sync-timeout", flags.sync_timeout,
                  "with --region: seconds to wait for the other regions' first message, and for "
                  "a window from its taking (default 600)")
      ->check(Positive())
      ->needs(region);
  cmd->add_option("--region-token-file", flags.region_token_file,
                  "with --region: a file holding a secret every region's gateway shares; a "
                  "gateway refuses messages without it (default: none)")
      ->needs(region);
  CLI::Option* region_ca = cmd->add_option(
      "--region-ca", flags.region_ca,
      "with --region: the run's CA (PEM), which every region's gateway certificate chains to: "
      "mutual TLS between the gateways (heterps certs makes a set)");
  CLI::Option* region_cert = cmd->add_option(
      "--region-cert", flags.region_cert,
      "with --region-ca: this region's gateway certificate (PEM, naming gateway.REGION.heterps)");
  CLI::Option* region_key =
      cmd->add_option("--region-key", flags.region_key, "with --region-ca: the key of --region-cert");
  for (CLI::Option* o : {region_ca, region_cert, region_key}) {
    o->needs(region);
    for (CLI::Option* other : {region_ca, region_cert, region_key}) {
      if (other != o) o->needs(other);
    }
  }
  cmd->add_flag("--region-plaintext", flags.region_plaintext,
                "with --region: send the windows between gateways in the clear where a gateway "
                "is not on this host's loopback (default: such a run needs --region-ca)")
      ->needs(region)
      ->excludes(region_ca);
  cmd->add_option("--replicas", flags.replicas,
                  "--single-process with --micro-batch: the stage-0 replicas of the job whose "
                  "cut of the steps to follow (default 1; the result is the same)")
      ->check(Positive())
      ->needs(single)
      ->needs(cmd->get_option("--micro-batch"));
  // What only a distributed job uses is an error with --single-process, not silently ignored.
  for (const char* name :
       {"--cluster",          "--plan",         "--mode",          "--ps-shards",
        "--checkpoint-every", "--max-restarts", "--job-dir",       "--throughput",
        "--scheduler",        "--profile",      "--gpu-emulate",   "--gpu-cache-gib",
        "--gpu-cache-device", "--gpu-tf32",     "--cluster-watch", "--cluster-state",
        "--replan-threshold", "--fresh",        "--ps-memory-mib", "--tls",
        "--tls-cert",         "--tls-key",      "--eval-interval", "--data-region",
        "--region"}) {
    single->excludes(cmd->get_option(name));
  }
  return cmd;
}

int RunTrain(const TrainFlags& flags) {
  if (flags.sync_given && flags.data_shares.empty() && flags.region_data.empty() &&
      flags.region.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--sync-steps, --sync-threshold, --sync-eager-threshold, --sync-delay and --sync-hub "
        "need --data-shares, --region-data or --region"));
  }
  if (!worker::EagerThresholdValid(static_cast<float>(flags.sync_threshold),
                                   static_cast<float>(flags.sync_eager_threshold))) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--sync-eager-threshold ", flags.sync_eager_threshold, " must be above --sync-threshold ",
        flags.sync_threshold, ": the windows between the K-th steps' send only the rows whose "
        "change is larger")));
  }
  if (flags.single_process) return RunSingleProcess(flags);
  return RunDistributedTrain(flags, LaunchSettings());
}

}  // namespace heterps::tools
