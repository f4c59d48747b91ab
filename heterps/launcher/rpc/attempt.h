// One attempt of a distributed job, from registration to the end or the first failure: it
// connects to the processes of the attempt, creates the tables (or loads the last checkpoint),
// drives the steps (synchronous or asynchronous), checkpoints, evaluates, writes the job's
// status and fills the JobResult. Not part of the public API (coordinator.h is).
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "heterps/launcher/job_result.h"
#include "heterps/launcher/layout.h"
#include "heterps/launcher/replanner.h"
#include "heterps/launcher/rpc/coordinator.h"
#include "heterps/launcher/rpc/coordinator_service.h"
#include "heterps/launcher/segment_ledger.h"

namespace heterps::launcher::rpc {

class Attempt {
 public:
  // Everything must outlive the attempt; `result` and `ledger` accumulate over attempts.
  Attempt(const worker::JobSpec& job, const RunOptions& options, const JobLayout& layout,
          CoordinatorService& service, JobResult& result, SegmentLedger& ledger, int64_t generation,
          absl::Time job_start);
  ~Attempt();

  // Runs the job over `train_lines` training lines from its last checkpoint to its end, or to
  // the step boundary where the re-planner (options.replanner) asked for another plan: then the
  // step is checkpointed and switch_to() says what to run next.
  // `coordinator`: where the processes find the coordinator (host:port).
  absl::Status Run(const std::string& coordinator, int64_t train_lines);

  // After an OK Run: the plan to go on with, the step it starts at (checkpointed) and when the
  // switch was decided; nullopt when the job has ended.
  const std::optional<PlanSwitch>& switch_to() const;
  int64_t switch_step() const;
  absl::Time switch_trigger() const;
  // After an OK Run: whether it ended early on a stop request (RunOptions::stop), at which step
  // (checkpointed).
  bool stopped() const;
  int64_t stop_step() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::launcher::rpc
