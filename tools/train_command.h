// `heterps train`: train a model, by default as a distributed job on this host
// (docs/runtime.md), or in this process (--single-process; heterps/worker/trainer.h).
//
//   heterps train [--model M.yaml] [--cluster C.yaml] [--plan plan.json]
//                 [--data FILE|GLOB... | synthetic] [--rows N] [--epochs E] [--batch B]
//                 [--mode sync|async] [--micro-batch B] [--ps-shards N]
//                 [--checkpoint-every STEPS] [--max-restarts N] [--job-dir DIR]
//                 [--throughput SAMPLES_PER_S] [--scheduler NAME] [--profile P.json]
//                 [--optimizer NAME] [--lr X] [--dense-optimizer NAME] [--dense-lr X]
//                 [--seed S] [--eval-fraction F] [--skip-bad-lines] [--metrics-out F.json]
//                 [--cluster-watch C.yaml] [--cluster-state S.json] [--replan-threshold F]
//   heterps train --single-process [--threads T [--sync-threads]] ...
//
// With no --model, the embedded dlrm-small; with no --cluster, the embedded local catalog (this
// host's CPU); --data takes files and globs ("day_*.gz"; plain, gzip or zstd, read in order as one
// stream); with no --data (or "synthetic"), --rows rows of `heterps gen-data` output for
// --seed, written once to the system's temporary directory and reused. With no --plan, it
// profiles this host, plans with the `rl` scheduler, shows the plan, starts every role as a
// process, trains with a progress bar and ends with a summary (eval AUC, samples/s against the
// plan's prediction, each stage's time against the plan's, the plan's cost) and the metrics as
// JSON. Exit codes: 0 trained, 1 no feasible plan, 2 bad input or a failure (one line on stderr).
#pragma once

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "heterps/worker/job.h"

namespace heterps::tools {

struct TrainFlags {
  std::string model_path;
  std::string cluster_path;
  std::string plan_path;
  // --data-region: the region the data is kept in; the plans made (and re-made) for the job, and
  // a --plan, keep every stage and the servers on its types (launcher::JobRules::data_region).
  std::string data_region;
  // --activations-may-cross (launcher::JobRules::activations_may_cross).
  bool activations_may_cross = false;
  std::vector<std::string> data = {"synthetic"};  // files or globs, plain, gzip or zstd
  int64_t rows = 200000;
  int batch = 0;  // 0: the spec's
  // Empty or 0: the spec's `optimizer` section, else the defaults (adagrad at 0.05, sgd at
  // 0.05 x batch / 256, as the mean loss's gradients shrink with the batch; adam at 0.001).
  std::string optimizer;
  double lr = 0;
  std::string dense_optimizer;
  double dense_lr = 0;
  std::string metrics_out;
  int metrics_port = -1;                   // -1: no /metrics endpoint; 0: any free port
  std::string metrics_host = "127.0.0.1";  // beyond loopback, scrapes carry the job's token
  double metrics_linger = 30;  // seconds the endpoint waits, after the job, for a final scrape
  // The job's settings, bound straight from the flags (--mode, --micro-batch, --ps-shards,
  // --epochs, --eval-fraction, --skip-bad-lines, --seed, --checkpoint-every, --max-restarts); the
  // tables' optimizers are filled from the flags above (ModelOptionsFrom).
  worker::JobSettings job;
  // Samples per block (--block-size); 0: the plan's (worker::PlanBlockSize), or
  // worker::kDefaultBlockSize in this process. Resolved into job.block_size once, at the start.
  int64_t block_size = 0;
  // In this process.
  bool single_process = false;
  int threads = 1;
  bool sync_threads = false;  // the threads share each step (worker::TrainOptions::sync_threads)
  int replicas = 1;  // with --micro-batch: the stage-0 replicas whose micro-batches to form
  // Regions emulated in this process (worker::RegionTraining): --data-shares REGION=SHARE each
  // (of --data) or --region-data (each region's own files),
  // a window every --sync-steps, rows passing --sync-threshold (and, after each step between,
  // rows passing --sync-eager-threshold), applied --sync-delay windows
  // later, peer to peer or through --sync-hub.
  std::vector<std::string> data_shares;
  std::vector<std::string> region_data;  // --region-data REGION=FILE|GLOB, repeated
  int64_t sync_steps = 100;
  double sync_threshold = 0;
  double sync_eager_threshold = 0;  // --sync-eager-threshold: windows between the K-th steps'
  int sync_delay = 1;
  std::string sync_hub;
  bool sync_given = false;  // any of the --sync flags given
  // One region of a run across regions, as a distributed job of its own (docs/regions.md, "GEO
  // across processes"): --region NAME, and every region's gateway (its coordinator's) in
  // --region-gateways REGION=HOST:PORT,... (the same list, in the same order, in every region);
  // the windows as above, peer to peer, each waited for at most --sync-timeout seconds.
  std::string region;
  std::vector<std::string> region_gateways;
  double sync_timeout = 600;
  std::string region_token_file;  // a secret every region's gateway holds; empty: none
  // Mutual TLS between the gateways (all three or none): the run's CA and this region's
  // certificate and key (`heterps certs`). Without them the gateways speak plaintext, which
  // only `region_plaintext` allows where a gateway is not on this host's loopback.
  std::string region_ca, region_cert, region_key;
  bool region_plaintext = false;
  // Distributed.
  std::string job_dir;
  double throughput = 0;
  std::string scheduler = "auto";
  std::string profile_path;  // plan with these measurements instead of profiling this host
  bool fresh = false;        // a new job even where the job directory holds an unfinished one
  // TLS between every role: `tls` makes a certificate for the job (in its directory); or the
  // user's certificate and key (the same files on every host of an externally launched job).
  bool tls = false;
  std::string tls_cert, tls_key;
  double ps_memory_mib = 0;  // per embedding table and shard; rows beyond it on the SSD tier
  // GPUs: emulated ones (the host twin, for testing), and the GPU tier of the embeddings.
  int gpu_emulate = 0;
  double gpu_cache_gib = 0;
  std::string gpu_cache_device;
  // Elastic (docs/elastic.md): the files that change the plan while the job runs, and how much
  // a switch must save.
  std::string cluster_watch;
  std::string cluster_state;
  double replan_threshold = 0.05;
};

// Adds the options shared by `train` and `node` (rank 0 coordinates the job).
void AddJobOptions(CLI::App* cmd, TrainFlags& flags);
CLI::App* AddTrainCommand(CLI::App& app, TrainFlags& flags);
int RunTrain(const TrainFlags& flags);

}  // namespace heterps::tools
