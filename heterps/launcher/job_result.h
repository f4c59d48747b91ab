// What a distributed job reports while it runs (JobProgress) and when it ends (JobResult): the
// coordinator fills them, the command line prints them (docs/runtime.md).
//
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "heterps/worker/job.h"

namespace heterps::launcher {

// An evaluation on the held-out lines during training (JobSettings::eval_interval).
struct EvalPoint {
  int64_t step = 0;     // steps trained before it
  int64_t samples = 0;  // samples trained before it
  double logloss = 0, auc = 0;
};

struct JobProgress {
  int64_t step = 0, total_steps = 0;  // steps done, and in all
  int64_t samples = 0;                // trained, this attempt included (a resume's before it too)
  double seconds = 0;                 // since the job started
  double loss = 0;                    // moving average of the steps' losses
  int restarts = 0;
  std::string event;              // "restarting from step 40: rank 3 ...", or empty
  std::optional<EvalPoint> eval;  // set on the progress that reports an evaluation
  double samples_per_second = 0;  // this attempt's samples over its training seconds
};

// What each stage did, against the plan's prediction.
struct StageReport {
  std::string name, type, device;
  int64_t units = 0;
  double predicted_seconds = 0;  // the plan's seconds per batch for the stage
  // Per step: the busiest replica's busy time / steps, its GPU tier's write-back aside.
  double measured_seconds = 0;
  double ps_seconds = 0;         // of which waiting for the parameter servers
  double prefetch_seconds = 0;   // of which naming the step's keys to a GPU tier
  double step_end_seconds = 0;   // of which ending the step (the gradients out)
  // Of which the micro-batches' passes (worker::ReplicaStats): the embedding rows into the
  // vectors, the dense chains, the rows' gradients per key, the gradients handed to the step.
  double lookup_seconds = 0, dense_seconds = 0, rows_seconds = 0, gradients_seconds = 0;
  double send_seconds = 0;       // per step: its time writing to other stages
  // Per step, stage 0, not part of the busy time: waiting for its training lines (the reader
  // parses ahead in a thread of its own), and the step's wall time on the replica (from the
  // coordinator's call to the answer), its GPU tier's write-back aside as in measured_seconds.
  double read_seconds = 0, run_seconds = 0;
  double idle_fraction = 0;      // of the busiest replica's time, waiting for work
  double pcie_bytes = 0;         // per step: the stage's device and GPU tier, both ways
  // The GPU tier (stage 0): the share of the keys pulled that the device served, and the rows
  // it loaded and wrote back per step. -1: no tier.
  double tier_hit_rate = -1;
  double tier_loaded_rows = 0, tier_written_back_rows = 0;
  double tier_ahead_rows = 0;  // of the rows loaded, fetched ahead while the step before ran
  bool tier_feeds_stage = false;  // on their shared device (docs/gpu.md)
  bool dense_held = false;  // the stage's dense parameters and optimizer on its device (gpu.md)
  // The busiest replica's seconds writing its GPU tier back to the servers, in all (at the end of
  // each round of steps: before a checkpoint, a switch and the job's end).
  double write_back_seconds = 0;
  // Per step, the stage's replicas together, while it trained (messages' serialized bytes): the
  // activations sent to the next stage and the answers (their gradients) to the previous one;
  // the calls to the parameter servers, those that carry keys (PullSparse, PushSparse, the rows'
  // exports, imports and windows: the keys and gradients sent, the rows received) and the
  // rest's (the dense blocks, commits, checkpoints).
  double forward_bytes = 0, back_bytes = 0;
  double rows_sent_bytes = 0, rows_received_bytes = 0;
  double dense_sent_bytes = 0, dense_received_bytes = 0;
};

// A stretch of the job on one plan (docs/elastic.md): the first plan's from the start, then one
// per switch.
struct JobSegment {
  std::string plan;                // launcher/replanner.h, DescribePlan
  std::string reason;              // "start", or what made the job switch
  int64_t first_step = 0;          // the step it began at
  int64_t steps = 0, samples = 0;  // trained on it (steps trained again after a restart count)
  double seconds = 0;              // from its start (the job's, or the switch's trigger) to its end
  double switch_seconds = 0;       // from the trigger to its first step trained (start-up included)
  // Of which: the checkpoint written for the switch, and the checkpoint read back (the last
  // load of the segment: a restart loads again).
  double checkpoint_seconds = 0, load_seconds = 0;
  double predicted_samples_per_second = 0;
  double samples_per_second = 0;  // measured, from its first step trained to its end
  double cost_per_hour_usd = 0;   // at the prices when it began
  double cost_usd = 0;            // its seconds at the prices in force
  double switch_cost_usd = 0;     // of which its switch (the seconds before its first step)
};

struct JobResult {
  int64_t steps = 0, train_samples = 0;  // of the whole job (a resumed one included)
  std::vector<double> losses;            // every step's mean loss, in order
  double train_loss = 0;                 // mean over the last pass's steps
  int64_t eval_samples = 0;
  double eval_loss = 0, eval_auc = 0;
  std::vector<EvalPoint> evals;   // during training, in step order (the end's not included)
  int64_t skipped_lines = 0;      // bad lines skipped (skip_bad_lines), every pass counted
  std::string first_bad_line;     // the first of them
  double seconds = 0;             // the last attempt's training, not evaluation
  double samples_per_second = 0;  // the samples of that attempt's steps / seconds
  double step_seconds = 0;        // seconds per step of that attempt, barriers included
  // Of which, synchronous: the coordinator waiting for stage 0's replicas to run the step (their
  // reading, computing and ending it, and the calls' round trips), and for the later stages'
  // flushes and the servers' commit; the mean of the steps that end no round (a round's last step
  // writes back). 0 for an asynchronous job, or one of rounds of one step.
  double run_step_seconds = 0, commit_seconds = 0;
  // The whole run, from RunJob's start to its end: every attempt, restart, switch and evaluation.
  double wall_seconds = 0;
  int restarts = 0;
  std::vector<std::string> failures;  // what each restart recovered from
  uint64_t parameter_digest = 0;      // ps::DigestTables over every shard at the end
  int ps_shards = 0;
  std::vector<StageReport> stages;  // of the last segment
  std::vector<JobSegment> segments;
  worker::JobSpec job;         // the job as it ended: the last segment's plan and settings
  double cost_usd = 0;         // every segment's
  double switch_cost_usd = 0;  // every switch's (the first segment's start-up not counted)
  // What the job would have cost on its first plan alone: its start-up, then every sample at the
  // first segment's measured rate and the prices in force. Negative: the first plan could not
  // have finished (its units were taken away).
  double first_plan_cost_usd = 0;
};

}  // namespace heterps::launcher
