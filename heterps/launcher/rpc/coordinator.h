// The coordinator of a distributed training job: it holds the job description, tells every
// process its role, runs attempts of the job (launcher/attempt.h, the engine: tables or the last
// checkpoint, the steps, checkpoints, evaluation, the report), watches for failures and restarts
// the job from its last checkpoint, and switches plans where the re-planner asks.
//
//   HETERPS_ASSIGN_OR_RETURN(worker::JobSpec job, worker::MakeJob(model, plan, cluster, files, s));
//   RunOptions options;
//   options.job_dir = "/tmp/job"; options.token = token;
//   LocalLauncher roles(...);                // or nullptr under mpirun: rank 0 runs RunJob
//   options.launcher = &roles;
//   HETERPS_ASSIGN_OR_RETURN(JobResult result, RunJob(job, options));
//
// The parts: coordinator_service.h (roles, registration, heartbeats), launcher/attempt.h (one
// attempt) with grpc_processes.h (its transport), launcher/job_status.h and
// launcher/job_checkpoint.h (the files of the job directory). This file restarts attempts and
// switches plans.
//
// What it promises, described in docs/runtime.md ("A step", "Failures", "The job directory") and
// docs/elastic.md ("The switch"):
// - A synchronous job is the single-process run, to the bit, whatever its layout; an
//   asynchronous one meets only at checkpoints and evaluations.
// - A failure (a dead process, a failed call) ends every process and restarts the job from its
//   last checkpoint, at most `max_restarts` times with a launcher; without one it ends the job,
//   and the next job in the same directory resumes (unless `fresh`). Nothing before the
//   checkpoint is lost, nothing after it is trained twice.
// - A job owns its checkpoints (by its id); a completed job removes checkpoint.json; one that
//   cannot be read is an error naming it, never a fresh start.
// - <job_dir>/status.json is rewritten every second while the job runs.
//
// Thread safety: RunJob may be called from one thread at a time per job directory.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterps/base/env.h"
#include "heterps/launcher/job_result.h"
#include "heterps/launcher/job_status.h"
#include "heterps/launcher/region_windows.h"
#include "heterps/launcher/replanner.h"
#include "heterps/launcher/role_launcher.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/rpc/job_tls.h"
#include "heterps/worker/job.h"

namespace heterps::launcher::rpc {

// How this run of the job is carried out (the job itself is the JobSpec).
struct RunOptions {
  std::string job_dir;  // required: logs, the parameter servers' data, checkpoints, status
  std::string host = "127.0.0.1";       // the coordinator's address
  int port = 0;                         // 0: a free port
  std::string token;                    // the job's; every process must have it
  heterps::rpc::JobTls tls;             // the job's certificate: TLS between every role
  RoleLauncher* launcher = nullptr;     // null: the processes are started by someone else
  base::Env* env = base::DefaultEnv();  // the job directory's files go through it
  absl::Duration register_timeout = absl::Seconds(60);
  absl::Duration step_timeout = absl::Seconds(300);  // one replica's share of a step
  absl::Duration eval_timeout = absl::Hours(2);      // one replica's whole held-out share
  // Called from the calling thread after every step, and on restarts.
  std::function<void(const JobProgress&)> progress;
  // Called once the coordinator listens, with its host:port.
  std::function<void(const std::string&)> on_listening;
  // Elastic jobs (launcher/replanner.h): asked between steps whether to switch plans; null: the
  // plan is fixed. Under an external launcher, a switch keeps the processes it was given (the
  // same number, new roles) and a plan that needs another number is refused, with a log line.
  Replanner* replanner = nullptr;
  // One region of a run across regions (launcher/region_windows.h; attempt.h, AttemptOptions):
  // null for one region. A failure then ends the job, without restarts.
  RegionWindows* regions = nullptr;
  // Start a new job even where <job_dir>/checkpoint.json records an unfinished one (its
  // checkpoints stay where they are, under their job's id).
  bool fresh = false;
  // Set (by a signal handler: it is only read) to stop the job cleanly: at the next step boundary
  // (asynchronous: the round's end) the job checkpoints that step, stops every process, marks
  // status.json "stopped" and returns Cancelled saying how to resume. Null: never.
  const std::atomic<bool>* stop = nullptr;
};

// Runs the job to its end. Errors: bad options, a missing data file (NotFound naming it), a port
// in use, a process that does not register in time, or a failure after the last restart; every
// process is stopped before it returns, whatever happens.
absl::StatusOr<JobResult> RunJob(const worker::JobSpec& job, const RunOptions& options);

// A shard's figures (its Stats answer) in status.json's terms: what the job's status carries for
// each shard, and what `heterps ps-server --metrics-port` serves for its own.
ShardStatus ToShardStatus(const ps::rpc::ShardStats& stats);

}  // namespace heterps::launcher::rpc
