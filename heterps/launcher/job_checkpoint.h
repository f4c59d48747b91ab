// <job_dir>/checkpoint.json: the job's own record of its last checkpoint, written after every
// parameter-server shard has saved that step (docs/runtime.md, "Failures"): the step the shards'
// checkpoints hold and the losses up to it, so that a restart resumes there.
//
// Thread safety: functions of their arguments.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/base/env.h"

namespace heterps::launcher {

struct JobCheckpoint {
  int64_t step = 0;
  std::vector<double> losses;  // every step's mean loss before `step`
  // The parameter-server shards that wrote it (<job_dir>/ps-<i>); a job laid out on another
  // number loads it re-sharded by key. 0: a record without the field, written by the job's own.
  int ps_shards = 0;
  // The job's id, which names its checkpoints (ps/checkpoint.h). Empty in a record written before
  // jobs had ids.
  std::string job_id;
  // The job's identity (worker::JobIdentity): a resume must match it. Empty in a record written
  // before records had it.
  std::vector<std::string> identity;
};

// A new job's id: 16 random hex digits. Unavailable if the system has no random generator.
absl::StatusOr<std::string> NewJobId();

// Written atomically: a reader finds the previous record or this one, whole.
absl::Status WriteJobCheckpoint(base::Env* env, const std::string& job_dir,
                                const JobCheckpoint& checkpoint);
// nullopt when there is no record. A record that exists but cannot be read (garbage, a wrong
// type, a negative step, fewer losses than steps) is an error naming the file and the field,
// never a silent fresh start.
absl::StatusOr<std::optional<JobCheckpoint>> ReadJobCheckpoint(base::Env* env,
                                                               const std::string& job_dir);
// A failure to write one of the coordinator's own files in the job directory (checkpoint.json,
// processes.json): restarting the job's processes cannot cure it, so it is never retried. OK stays
// OK; any error becomes FailedPrecondition with the same message.
absl::Status JobFileError(const absl::Status& status);

// Removes the record (a completed job leaves nothing to resume). OK when there is none.
absl::Status RemoveJobCheckpoint(base::Env* env, const std::string& job_dir);

}  // namespace heterps::launcher
