// The coordinator of a distributed training job (docs/runtime.md): it holds the job description,
// tells every process its role, creates the model's tables on the parameter servers, drives the
// steps, checkpoints, watches for failures and restarts the job from its last checkpoint,
// evaluates at the end and reports.
//
//   HETERPS_ASSIGN_OR_RETURN(worker::JobSpec job, worker::MakeJob(model, plan, cluster, files, s));
//   RunOptions options;
//   options.job_dir = "/tmp/job"; options.token = token;
//   LocalLauncher roles(...);                // or nullptr under mpirun: rank 0 runs RunJob
//   options.launcher = &roles;
//   HETERPS_ASSIGN_OR_RETURN(JobResult result, RunJob(job, options));
//
// The parts: coordinator_service.h (roles, registration, heartbeats), launcher/attempt.h (the
// engine of one attempt of the job: the steps, checkpoints, evaluation and the report) with
// grpc_processes.h (its transport), launcher/job_status.h and
// launcher/job_checkpoint.h (the files of the job directory). This file restarts attempts.
//
// Steps. Step j of pass e covers training lines j*B .. (j+1)*B - 1 (the last one of a pass may be
// smaller), cut into blocks, stage-0 replica r reading consecutive whole blocks of it
// (worker::ShareBlocks): the same samples, in the same mini-batches, as single-process training
// reads. Synchronous: every stage-0 replica runs its share (RunStep), every replica then sends its
// nodes of the step's block tree (Flush), and the parameter servers merge and apply them
// (Commit), before the next step begins: the run equals the single-process run, and itself, to
// the bit (docs/runtime.md, "The same run whatever the layout"). Asynchronous: the
// stage-0 replicas run their steps without waiting for each other, their gradients applied as
// they come, and meet only at checkpoints.
//
// Switches. With a re-planner, the coordinator asks it between steps (asynchronous: at the
// rounds' ends) whether another plan should take over; if so, it checkpoints that step, stops
// every process, starts the new layout, loads the checkpoint (re-sharded by key when the number
// of parameter servers changed) and goes on from that step. A role that dies is reported to the
// re-planner (as its stage's type; a parameter server as stage 0's), which may then give up a
// unit of that type and switch instead of restarting the same plan. The JobResult's segments
// account for every plan the job ran on (launcher/segment_ledger.h).
//
// Failures. Every `checkpoint_every` steps, at a step boundary, the parameter servers write their
// tables (both tiers, optimizer state) and then <job_dir>/checkpoint.json names the step, written
// atomically; the data position is the step's. When a process dies (the launcher sees it), or a
// call fails, the coordinator ends every process, starts a fresh set, loads the last checkpoint
// and goes on from its step: updates before it are kept, the data after it is read again. At
// most `max_restarts` times; without a launcher (an external one started the processes), a
// failure ends the job with the error, and a new job with the same job directory resumes from
// the checkpoint (unless `fresh`). A job that completes removes checkpoint.json: the next one
// starts afresh. Every job has an id (kept in checkpoint.json), and its parameter servers keep
// their checkpoints under ps-<i>/checkpoints/<id>/, named with the id, the shard and the number
// of shards: a new job in an old directory neither prunes nor loads the old job's checkpoints.
// A checkpoint.json that exists but cannot be read is an error naming it, never a fresh start.
//
// While it runs, <job_dir>/status.json (rewritten every second) shows the step, the throughput,
// every replica's busy, idle and send time and queues, and the parameter servers' tier counters.
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
