// <job_dir>/status.json: what a running (or ended) job shows of itself, rewritten by the
// coordinator every second and read by `heterps status` (docs/runtime.md, "The job directory").
// One struct, one writer and one reader, so that the two sides cannot disagree on a key.
//
//   JobStatus status;
//   status.state = "running"; status.step = 40; ...
//   HETERPS_RETURN_IF_ERROR(WriteJobStatus(env, job_dir, status));
//   HETERPS_ASSIGN_OR_RETURN(JobStatus read, ReadJobStatus(env, job_dir));
//
// Thread safety: plain values and functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/base/call_stats.h"
#include "heterps/base/env.h"

namespace heterps::launcher {

struct ReplicaStatus {
  int stage = 0, replica = 0;
  int64_t micro_batches = 0;
  double busy_seconds = 0, idle_seconds = 0, send_seconds = 0, ps_seconds = 0;
  int64_t bytes_sent = 0;
  int queue_depth = 0, in_flight = 0;
  int64_t pcie_bytes = 0;                  // the stage's device and GPU tier, both ways
  int64_t tier_hits = 0, tier_misses = 0;  // the GPU tier's keys: on the device, passed through
  std::vector<base::MethodStats> ps_rpcs;  // the replica's calls to the parameter servers
};

struct TableStatus {
  int table = 0;
  int64_t memory_rows = 0, memory_bytes = 0, cold_rows = 0;
  int64_t hits = 0, misses = 0, spills = 0;
};

struct ShardStatus {
  int shard = 0;
  int64_t calls = 0;
  std::vector<TableStatus> tables;
  std::vector<base::MethodStats> rpcs;  // the calls it served, by method
};

struct JobStatus {
  std::string state;  // "running", "done", "failed", "stopped" (by a signal, resumable)
  std::string error;  // failed or stopped: why
  int64_t pid = 0;    // the coordinator's
  int64_t generation = 0;
  int restarts = 0;
  int64_t step = 0, total_steps = 0, samples = 0;
  double samples_per_second = 0, predicted_samples_per_second = 0;
  double loss = 0;
  // How long the step in progress has run, seconds (while running: the status is rewritten every
  // few seconds while a step runs long, so that a hung step shows here).
  double step_seconds = 0;
  // While running: "training", "evaluating" the held-out lines, or "checkpointing" (writing the
  // checkpoint of `step`, step_seconds long so far).
  std::string phase;
  // The latest evaluation on the held-out lines (JobSettings::eval_interval, and the end's): the
  // steps trained before it; -1 for none yet.
  int64_t eval_step = -1;
  double eval_logloss = 0, eval_auc = 0;
  std::vector<ReplicaStatus> replicas;
  std::vector<ShardStatus> parameter_servers;
  std::string updated;  // when it was written (UTC)
};

std::string JobStatusToJson(const JobStatus& status);
// Marks the job's status.json (written by the last attempt, or none) as ended in `state` with
// `error`, so that `heterps status` does not say "running" for a job that is over.
absl::Status MarkJobEnded(base::Env* env, const std::string& job_dir, const std::string& state,
                          const std::string& error);
// InvalidArgument naming `source` and the field for what is not a job status.
absl::StatusOr<JobStatus> ParseJobStatus(absl::string_view text, absl::string_view source);

// <job_dir>/status.json, written atomically.
absl::Status WriteJobStatus(base::Env* env, const std::string& job_dir, const JobStatus& status);
// NotFound when the job has written none.
absl::StatusOr<JobStatus> ReadJobStatus(base::Env* env, const std::string& job_dir);

}  // namespace heterps::launcher
