// The coordinator of a distributed training job (docs/runtime.md): it holds the plan, tells every
// process its role, creates the model's tables on the parameter servers, drives the steps,
// checkpoints, watches for failures and restarts the job from its last checkpoint, evaluates at
// the end and reports.
//
//   JobOptions options;
//   options.spec = spec; options.model_yaml = text; options.plan = plan;
//   options.files = {"train.tsv"}; options.job_dir = "/tmp/job"; options.token = token;
//   LocalLauncher roles(...);                // or nullptr under mpirun: rank 0 runs RunJob
//   options.launcher = &roles;
//   HETERPS_ASSIGN_OR_RETURN(JobResult result, RunJob(options));
//
// Steps. Step j of pass e covers training lines j*B .. (j+1)*B - 1 (the last one of a pass may be
// smaller), where line i belongs to stage-0 replica i mod k: the same samples, in the same
// mini-batches, as single-process training reads. Synchronous: every stage-0 replica runs its
// share (RunStep), every replica then sends its part of the step's gradients (Flush), and the
// parameter servers apply them (Commit), before the next step begins: the run equals the
// single-process run up to float rounding, and equals itself to the bit. Asynchronous: the
// stage-0 replicas run their steps without waiting for each other, their gradients applied as
// they come, and meet only at checkpoints.
//
// Failures. Every `checkpoint_every` steps, at a step boundary, the parameter servers write their
// tables (both tiers, optimizer state) and then <job_dir>/checkpoint.json names the step, written
// atomically; the data position is the step's. When a process dies (the launcher sees it), or a
// call fails, the coordinator ends every process, starts a fresh set, loads the last checkpoint
// and goes on from its step: updates before it are kept, the data after it is read again. At
// most `max_restarts` times; without a launcher (an external one started the processes), a
// failure ends the job with the error, and a new job with the same job directory resumes from
// the checkpoint. A job that completes removes checkpoint.json: the next one starts afresh.
//
// While it runs, <job_dir>/status.json (rewritten every second) shows the step, the throughput,
// every replica's busy, idle and send time and queues, and the parameter servers' tier counters.
//
// Thread safety: RunJob may be called from one thread at a time per job directory.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterps/config/model_spec.h"
#include "heterps/launcher/role_launcher.h"
#include "heterps/sched/run_plan.h"
#include "heterps/worker/stage.h"

namespace heterps::launcher::rpc {

struct JobProgress {
  int64_t step = 0, total_steps = 0;  // steps done, and in all
  int64_t samples = 0;                // trained, this attempt included
  double seconds = 0;                 // since the job started
  double loss = 0;                    // moving average of the steps' losses
  int restarts = 0;
  std::string event;  // "restarting from step 40: rank 3 ...", or empty
};

struct JobOptions {
  config::ModelSpec spec;
  std::string model_yaml;  // the spec's text, sent to every worker
  sched::RunPlan plan;
  int ps_shards = 1;  // parameter-server processes (layout.h, SizeParameterServers)
  std::vector<std::string> files;
  int epochs = 1;
  // Samples per micro-batch; 0: a stage-0 replica's whole share of a step when the plan has one
  // stage, else a part of it: 2 micro-batches per stage.
  int64_t micro_batch = 0;
  bool sync = true;
  double eval_fraction = 0.1;  // every round(1 / F)-th line held out; 0: none
  bool skip_bad_lines = false;
  worker::ModelOptions model;    // the tables' optimizers, seed, memory budget
  int64_t checkpoint_every = 0;  // steps between checkpoints; 0: none
  int max_restarts = 3;
  std::string job_dir;  // required: logs, the parameter servers' data, checkpoints, status
  std::string host = "127.0.0.1";    // the coordinator's address
  int port = 0;                      // 0: a free port
  std::string token;                 // the job's; every process must have it
  RoleLauncher* launcher = nullptr;  // null: the processes are started by someone else
  absl::Duration register_timeout = absl::Seconds(60);
  absl::Duration step_timeout = absl::Seconds(300);  // one replica's share of a step
  absl::Duration eval_timeout = absl::Hours(2);      // one replica's whole held-out share
  // Called from the calling thread after every step, and on restarts.
  std::function<void(const JobProgress&)> progress;
  // Called once the coordinator listens, with its host:port.
  std::function<void(const std::string&)> on_listening;
};

// What each stage did, against the plan's prediction.
struct StageReport {
  std::string name, type;
  int64_t units = 0;
  double predicted_seconds = 0;  // the plan's seconds per batch for the stage
  double measured_seconds = 0;   // per step: the busiest replica's busy time / steps
  double ps_seconds = 0;         // of which waiting for the parameter servers
  double send_seconds = 0;       // per step: its time writing to other stages
  double idle_fraction = 0;      // of the busiest replica's time, waiting for work
};

struct JobResult {
  int64_t steps = 0, train_samples = 0;  // of the whole job (a resumed one included)
  std::vector<double> losses;            // every step's mean loss, in order
  double train_loss = 0;                 // mean over the last pass's steps
  int64_t eval_samples = 0;
  double eval_loss = 0, eval_auc = 0;
  int64_t skipped_lines = 0;      // bad lines skipped (skip_bad_lines), every pass counted
  std::string first_bad_line;     // the first of them
  double seconds = 0;             // the last attempt's training, not evaluation
  double samples_per_second = 0;  // the samples of that attempt's steps / seconds
  double step_seconds = 0;        // seconds per step of that attempt, barriers included
  int restarts = 0;
  std::vector<std::string> failures;  // what each restart recovered from
  uint64_t parameter_digest = 0;      // ps::DigestTables over every shard at the end
  int ps_shards = 0;
  std::vector<StageReport> stages;
};

// Runs the job to its end. Errors: bad options, a missing data file (NotFound naming it), a port
// in use, a process that does not register in time, or a failure after the last restart; every
// process is stopped before it returns, whatever happens.
absl::StatusOr<JobResult> RunJob(const JobOptions& options);

}  // namespace heterps::launcher::rpc
