// The job's account, segment by segment (job_result.h, JobSegment): what each plan trained, how
// long it ran and what it cost at the prices in force, what the switches cost, and what the first
// plan alone would have cost. The coordinator tells it every step, checkpoint and switch; it also
// gives the re-planner the measured figures a decision needs (the rate, a switch's seconds).
//
// Costs integrate the plan's USD per hour over wall-clock time, the rate read again at every
// step (spot prices change under a running plan): start-ups, restarts and evaluation are paid
// for like training.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "heterps/launcher/job_result.h"
#include "heterps/launcher/replanner.h"
#include "heterps/worker/job.h"

namespace heterps::launcher {

class SegmentLedger {
 public:
  // `replanner` (may be null: the plans' own prices) gives the prices of now.
  explicit SegmentLedger(const Replanner* replanner) : replanner_(replanner) {}

  // A segment begins at `now` on `job`, at step `first_step`, decided at `trigger` (the job's
  // start, for the first). The previous one must have ended.
  void Begin(const worker::JobSpec& job, const std::string& reason, int64_t first_step,
             absl::Time trigger, absl::Time now);
  // The running segment is to give way (a switch was decided at `now`): what it costs from now
  // on is the switch's.
  void Trigger(absl::Time now);
  // Step `step` (of the whole job) of `samples` samples ended at `now`.
  void Step(int64_t step, int64_t samples, absl::Time now);
  // The checkpoint of step `step` took `seconds` to write (a switch reads as much back).
  void Checkpointed(int64_t step, double seconds);
  // The job goes on from the checkpoint of step `step` (a restart): the steps from `step` on
  // that the running segment had counted leave its steps and samples, and the first plan's
  // account, since they are trained again (their time stays paid).
  void RolledBack(int64_t step);
  // The running segment's processes loaded a checkpoint in `seconds`.
  void Loaded(double seconds);
  // The current segment ends at `now`.
  void End(absl::Time now);

  // The current segment's measured samples/s (0 before its second step), and what a switch
  // would take: the last start-up (processes, registration, tables, the first step) and the
  // last checkpoint written and read back.
  double samples_per_second() const;
  double switch_seconds() const;
  // USD per hour of the running plan now.
  double rate() const;

  // Where `job` stands for its re-planner after `step` steps over `train_lines` training lines a
  // pass: the steps and samples left, and this ledger's measured rate and switch cost.
  JobPosition Position(const worker::JobSpec& job, int64_t step, int64_t train_lines) const;

  // Fills result->segments, cost_usd, switch_cost_usd and first_plan_cost_usd.
  void Fill(JobResult* result) const;

 private:
  void Accrue(absl::Time now);

  // A step of the running segment since its last checkpoint, for RolledBack.
  struct Counted {
    int64_t step = 0, samples = 0;
    double first_sample_usd_per_hour = 0;  // its share of first_sample_usd_per_hour_
  };

  const Replanner* replanner_;
  double plan_rate_ = 0;  // the plan's own USD per hour (no re-planner)
  std::vector<JobSegment> segments_;
  bool open_ = false;
  absl::Time start_, trigger_, mark_, first_step_at_, last_step_at_;
  bool stepped_ = false;
  double usd_at_trigger_ = -1;            // the running segment's cost when a switch was decided
  double switch_tail_usd_ = 0;            // the last segment's cost after its trigger
  double switch_checkpoint_seconds_ = 0;  // the checkpoint written after the trigger
  int64_t samples_after_first_ = 0;
  double startup_seconds_ = 0, checkpoint_seconds_ = 0;
  // The first plan alone: sum over steps of samples x its USD per hour then; false once it could
  // not have run.
  double first_sample_usd_per_hour_ = 0;
  bool first_possible_ = true;
  std::vector<Counted> since_checkpoint_;
};

}  // namespace heterps::launcher
