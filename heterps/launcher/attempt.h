// One attempt of a distributed job, from registration to the end or the first failure: the
// coordinator's engine, apart from any transport (docs/runtime.md). It waits for the attempt's
// processes to register, creates the tables (or loads the last checkpoint), drives the steps
// (synchronous or asynchronous), checkpoints, evaluates, writes the job's status and fills the
// JobResult. It reaches the processes through AttemptProcesses: launcher/rpc/grpc_processes.h
// over gRPC; attempt_test.cc wires replicas and servers in one process.
//
//   GrpcProcesses processes(service, run_options, layout);  // or any AttemptProcesses
//   Attempt attempt(job, attempt_options, layout, processes, result, ledger, generation, start);
//   HETERPS_RETURN_IF_ERROR(attempt.Run(coordinator_address, train_lines));
//   if (attempt.switch_to()) ...                          // the re-planner's next plan
//
// Thread safety: Attempt, one thread at a time. AttemptProcesses' calls come from several
// threads at once (the replicas of a step run in parallel), and CancelAll from a watcher.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterps/base/call_stats.h"
#include "heterps/base/env.h"
#include "heterps/launcher/job_result.h"
#include "heterps/launcher/job_status.h"
#include "heterps/launcher/layout.h"
#include "heterps/launcher/region_windows.h"
#include "heterps/launcher/replanner.h"
#include "heterps/launcher/role_launcher.h"
#include "heterps/launcher/segment_ledger.h"
#include "heterps/ps/ps_client.h"
#include "heterps/worker/job.h"
#include "heterps/worker/pipeline_replica.h"

namespace heterps::launcher {

// A replica's counters as its process reports them.
struct ReplicaFigures {
  worker::ReplicaStats stats;
  int64_t bytes_sent = 0;  // to other stages and the stage's other replicas (serialized bytes)
  // Of which: the activations to the next stage, the answers (their gradients) to the previous.
  int64_t forward_bytes = 0, back_bytes = 0;
  std::vector<base::MethodStats> ps_rpcs;  // its calls to the parameter servers
};

// The processes of one attempt, as the engine drives them. Replicas are named by (stage,
// replica) of the attempt's layout; a call's error names the replica, its address where it has
// one, and the call ("stage 1 replica 0 (10.0.0.2:4000): Flush 12: ..."). Missing and StopAsked
// may be called at any time; Connect once, from one thread, before the rest, which may then be
// called from any thread.
class AttemptProcesses {
 public:
  virtual ~AttemptProcesses() = default;

  // Ranks (JobLayout's) that have not registered yet.
  virtual std::vector<int> Missing() = 0;
  // Whether the job was asked to stop (a signal, or a process's heartbeat).
  virtual bool StopAsked() = 0;
  // Once every rank registered: connects to them. Before any call below.
  virtual absl::Status Connect() = 0;

  // The parameter servers: the client the engine creates the tables and commits the synchronous
  // steps with, and the job's calls to every server.
  virtual ps::PsClient& servers() = 0;
  // Every server writes its tables as the checkpoint of `step`.
  virtual absl::Status SaveCheckpoint(int64_t step) = 0;
  // Every server loads the checkpoint of `step` (re-sharded from `from_shards` servers' when not
  // 0); the step loaded.
  virtual absl::StatusOr<int64_t> LoadCheckpoint(int64_t step, int from_shards) = 0;
  // ps::DigestTables over every server, summed.
  virtual absl::StatusOr<uint64_t> Digest() = 0;
  // The servers' figures; an error where one does not answer within `timeout`.
  virtual absl::StatusOr<std::vector<ShardStatus>> ServerStats(absl::Duration timeout) = 0;

  // Stage-0 replica `replica`'s share of a step (worker::PipelineReplica::RunStep).
  virtual absl::StatusOr<worker::StepOutcome> RunStep(int replica,
                                                      const worker::StepRequest& request) = 0;
  // A later stage's replica ends step `step` (PipelineReplica::Flush).
  virtual absl::Status Flush(int stage, int replica, int64_t step, bool write_back) = 0;
  // The replica writes what it holds back to the servers (PipelineReplica::WriteBack).
  virtual absl::Status WriteBack(int stage, int replica) = 0;
  // Stage-0 replica `replica`'s held-out lines after `step` steps (PipelineReplica::Evaluate).
  virtual absl::StatusOr<worker::EvalOutcome> Evaluate(int replica, int64_t step) = 0;
  // The replica's counters; an error where it does not answer within `timeout`.
  virtual absl::StatusOr<ReplicaFigures> Stats(int stage, int replica, absl::Duration timeout) = 0;

  // Cancels the calls in flight and any made until Resume (they end Cancelled).
  virtual void CancelAll() = 0;
  virtual void Resume() = 0;
};

// How the engine runs an attempt (the coordinator's RunOptions, less its transport's).
struct AttemptOptions {
  std::string job_dir;  // checkpoint.json and status.json
  base::Env* env = base::DefaultEnv();
  std::string job_id;                // names the job's checkpoints (checkpoint.json)
  RoleLauncher* launcher = nullptr;  // null: the processes are started by someone else
  absl::Duration register_timeout = absl::Seconds(60);
  std::function<void(const JobProgress&)> progress;  // after every step, from Run's thread
  Replanner* replanner = nullptr;                    // null: the plan is fixed
  // One region of a run across regions (region_windows.h): its windows with the other regions
  // after every synchronous step, the flush after the last. Null: one region. The job must be
  // synchronous, with its dense parameters on the servers. A later attempt of the same run
  // rewinds the windows to the checkpoint it resumed from (RegionWindows::Rewind); a run that
  // finds a checkpoint before its first attempt is refused (the other regions' windows since
  // are gone).
  RegionWindows* regions = nullptr;
};

class Attempt {
 public:
  // Everything must outlive the attempt; `result` and `ledger` accumulate over attempts.
  // `generation`: the attempt's number (status.json); `job_start`: when the job began.
  Attempt(const worker::JobSpec& job, const AttemptOptions& options, const JobLayout& layout,
          AttemptProcesses& processes, JobResult& result, SegmentLedger& ledger, int64_t generation,
          absl::Time job_start);
  ~Attempt();

  // Runs the job over `train_lines` training lines from its last checkpoint to its end, or to
  // the step boundary where the re-planner asked for another plan: then the step is checkpointed
  // and switch_to() says what to run next. `coordinator`: where the processes find the
  // coordinator (host:port), for the launcher. The first error of any process, a dead role
  // (the launcher's), or a registration past its deadline ends it.
  absl::Status Run(const std::string& coordinator, int64_t train_lines);

  // After an OK Run: the plan to go on with, the step it starts at (checkpointed) and when the
  // switch was decided; nullopt when the job has ended.
  const std::optional<PlanSwitch>& switch_to() const;
  int64_t switch_step() const;
  absl::Time switch_trigger() const;
  // After an OK Run: whether it ended early on a stop request, at which step (checkpointed).
  bool stopped() const;
  int64_t stop_step() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::launcher
