// One attempt of a distributed job, from registration to the end or the first failure: it
// connects to the processes of the attempt, creates the tables (or loads the last checkpoint),
// drives the steps (synchronous or asynchronous), checkpoints, evaluates, writes the job's
// status and fills the JobResult. Not part of the public API (coordinator.h is).
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "heterps/launcher/job_result.h"
#include "heterps/launcher/layout.h"
#include "heterps/launcher/rpc/coordinator.h"
#include "heterps/launcher/rpc/coordinator_service.h"

namespace heterps::launcher::rpc {

class Attempt {
 public:
  // Everything must outlive the attempt; `result` accumulates over attempts.
  Attempt(const worker::JobSpec& job, const RunOptions& options, const JobLayout& layout,
          CoordinatorService& service, JobResult& result, int64_t generation, absl::Time job_start);
  ~Attempt();

  // Runs the job over `train_lines` training lines from its last checkpoint to its end.
  // `coordinator`: where the processes find the coordinator (host:port).
  absl::Status Run(const std::string& coordinator, int64_t train_lines);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::launcher::rpc
