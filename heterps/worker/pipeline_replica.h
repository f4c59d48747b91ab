// One replica of one stage of a pipelined job: the engine, apart from any transport
// (docs/runtime.md, "Pipeline"). worker/rpc/stage_worker.h serves it over gRPC; tests wire
// replicas together in one process.
//
//   auto replica = PipelineReplica::Create(job, /*stage=*/0, /*replica=*/1, client, &next);
//   HETERPS_ASSIGN_OR_RETURN(StepOutcome out, (*replica)->RunStep({step, epoch, offset, n, s}));
//
// A replica computes on one thread (one unit of its type): a queue of tasks, gradients and
// answers before new forward passes, so that micro-batches in flight finish and free their
// memory first. Stage 0 reads its share of every mini-batch (RunStep: in a synchronous job,
// consecutive whole blocks of the step, JobSpec::ShareBlocks), cuts it into micro-batches (whole
// blocks) and sends each forward; a later stage receives micro-batches from the replicas of
// the stage before it (Receive), runs them and passes them on to replica `order mod replicas` of
// the next stage (Downstream), or, at the last stage, runs the loss and answers with the
// gradients (Upstream). The answers come back the same way (OnAnswer), and each stage runs its
// backward on the way. What happens to the gradients is the job's consistency mode
// (gradient_policy.h).
//
// Devices: the stage's dense layers run on the device the plan gives it (dense/backend.h); replica
// r of a stage on device "kind:i" uses "kind:(i + r)" (a GPU per replica). With a GPU tier in the
// job's settings, stage 0's replica puts it in front of the parameter servers (ps/gpu/gpu_tier.h),
// names every step's keys to it before the step runs, and has it write back where the coordinator
// asks (at the end of every round of steps).
//
// Dense parameters: in a synchronous job given the stage's DensePeers, the stage's replicas hold
// the stage's dense parameters (worker/dense_group.h): loaded from the parameter servers at the
// replica's first step, exchanged among the replicas at the end of every step, written back to
// the servers where the coordinator asks (the same points as the GPU tier's). Otherwise (no
// peers, an asynchronous job, the job's dense_on_servers) every step pulls them from the servers.
//
// Thread safety: every method may be called from any thread; Receive, OnAnswer,
// OnDownstreamLost and OnDense only queue work.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "heterps/ps/ps_client.h"
#include "heterps/worker/dense_group.h"
#include "heterps/worker/job.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {

// What travels with a micro-batch's activations.
struct ForwardHeader {
  int64_t step = 0;
  int64_t id = 0;     // the sender's number for it; the answer carries it back
  // Training: its first block in its step (ps/block_tree.h), which places its gradients in the
  // step's sums and picks the next stage's replica; evaluation: its place in the replica's lines.
  int64_t order = 0;
  bool train = true;  // false: evaluation, forward only
  float scale = 0;    // training: 1 / the mini-batch's samples (the loss's gradient)
};

// The answer to a micro-batch, as it arrives from the next stage.
struct Answer {
  int64_t id = 0;
  double loss_sum = 0;               // training: the micro-batch's summed loss
  std::vector<double> block_losses;  // training: summed over each of its blocks
  ActivationGrads grads;             // training: gradients of what was sent
  std::vector<float> probabilities;  // evaluation: one per sample
  std::string error;                 // set when a later stage failed the micro-batch
};

// The answer to a micro-batch, as this replica sends it upstream (views into its buffers, valid
// during the call).
struct AnswerView {
  int64_t id = 0;
  double loss_sum = 0;
  absl::Span<const double> block_losses;
  const ActivationGrads* grads = nullptr;
  absl::Span<const float> probabilities;
  std::string error;
};

// The replica of the previous stage that sent a micro-batch.
class Upstream {
 public:
  virtual ~Upstream() = default;
  // Sends the answer; false when the sender has gone (nobody waits for it any more).
  virtual bool Send(const AnswerView& answer) = 0;
};

// The replicas of the next stage.
class Downstream {
 public:
  virtual ~Downstream() = default;
  virtual int replicas() const = 0;
  // Sends a micro-batch to replica `target`; its answer comes back through OnAnswer(target, ...).
  // Unavailable naming the peer when it cannot be reached.
  virtual absl::Status Send(int target, const ForwardHeader& header,
                            const Activations& activations) = 0;
};

// Stage 0: replica's share of a mini-batch.
struct StepRequest {
  int64_t step = 0;
  int64_t epoch = 0;   // the pass over the data
  int64_t offset = 0;  // where in this replica's lines of the pass the share starts
  int64_t count = 0;   // samples of the share
  float scale = 0;     // 1 / the mini-batch's samples, all replicas together
  // Write what a GPU tier holds back to the parameter servers at the end of the step. The
  // coordinator asks at the end of every round (before a checkpoint or an evaluation, and at the
  // end of the job): in between, the tier's rows are read through the tier alone, so writing
  // them back at every step would only cost time (25,000 rows and 6 MB of PCIe a step on a GPU).
  bool write_back = false;
  // The share of the step that follows in the same round (next_count 0: none). Where a GPU tier
  // holds stage 0's tables, the replica reads it now and names its keys to the tier
  // (Stage::Anticipate), which fetches the rows it will miss while this step runs; the next
  // request for that share then takes what was read.
  int64_t next_epoch = 0, next_offset = 0, next_count = 0;
};
// What the replica writes back at the end of a step: a GPU tier's rows (stage 0) and the dense
// parameters its stage holds.
struct StepOutcome {
  double loss_sum = 0;               // over the share's samples: block_losses added in order
  std::vector<double> block_losses;  // the share's blocks', in block order
  int64_t samples = 0;
  int64_t skipped_lines = 0;   // bad lines this replica skipped in this pass so far
  std::string first_bad_line;  // the pass's first of them
};
struct EvalOutcome {
  std::vector<float> probabilities, labels;  // per held-out sample of this replica
  int64_t skipped_lines = 0;
  std::string first_bad_line;  // the first of them, if any
};

struct ReplicaStats {
  int64_t micro_batches = 0;  // forward passes run (training and evaluation)
  double busy_seconds = 0;    // computing (forward, backward, parameter pulls and pushes)
  double idle_seconds = 0;    // waiting for work
  double send_seconds = 0;    // handing activations and answers to the transport
  double ps_seconds = 0;      // of busy_seconds: waiting for the parameter servers
  // Of busy_seconds: naming each step's keys to a GPU tier (which loads the rows it lacks),
  // ending the steps (the gradients to the servers or the tier, the dense exchange among the
  // stage's replicas), and the write-back of the tier's rows and the dense parameters to the
  // servers (at the end of each round of steps, not every step). The rest is the micro-batches'
  // forward and backward passes. ps_seconds overlaps all four.
  double prefetch_seconds = 0, step_end_seconds = 0, write_back_seconds = 0;
  // Of busy_seconds, the micro-batches' passes (Stage::PassSeconds): the embedding rows into the
  // vectors, the dense chains, the rows' gradients laid out per key; and the gradients handed
  // to the step (added into its block tree, or pushed).
  double lookup_seconds = 0, dense_seconds = 0, rows_seconds = 0, gradients_seconds = 0;
  // Not of busy_seconds, stage 0: waiting for the step's training lines from its reader; and
  // the wall time of its steps, from the call's arrival to its answer (the reading, the passes,
  // waiting for the later stages and ending the step).
  double read_seconds = 0, run_seconds = 0;
  int queue_depth = 0;  // tasks waiting now
  int in_flight = 0;    // micro-batches between their forward and backward now
  // The stage's device and its GPU tier, if any: bytes over PCIe (both ways), the tier's keys
  // served from the device and passed through, rows it loaded and wrote back.
  int64_t pcie_bytes = 0;
  int64_t tier_hits = 0, tier_misses = 0, tier_loaded_rows = 0, tier_written_back_rows = 0;
  // Of the rows loaded, those fetched ahead while the step before ran (GpuTier::Anticipate).
  int64_t tier_ahead_rows = 0;
  // The tier feeds the stage on their shared device (Stage::UseDeviceTier): the rows and their
  // gradients never come to the host.
  bool tier_feeds_stage = false;
  // The stage's dense parameters and their optimizer are held on its device (docs/gpu.md).
  bool dense_held = false;
};

class PipelineReplica {
 public:
  // Replica `replica` of stage `stage` of `job` (which, with `client` and `downstream`, must
  // outlive it). `downstream` is null for the last stage. `peers` (which must outlive it too)
  // reaches the other replicas of the stage, whose dense parameters they then hold with this one
  // (above); null: the dense parameters through the servers. InvalidArgument when the stage or
  // the replica is not the job's, or the stage cannot be built (an untrainable layer, a device
  // this build cannot run).
  static absl::StatusOr<std::unique_ptr<PipelineReplica>> Create(const JobSpec& job, int stage,
                                                                 int replica, ps::PsClient* client,
                                                                 Downstream* downstream,
                                                                 DensePeers* peers = nullptr);
  ~PipelineReplica();  // Stop()

  // A caller's way to give up waiting: true when it has gone (a cancelled call).
  using Cancelled = std::function<bool()>;

  // Stage 0: runs this replica's share of a mini-batch through the pipeline and returns when every
  // micro-batch has come back; then ends the step here (the policy's EndStep).
  absl::StatusOr<StepOutcome> RunStep(const StepRequest& request, const Cancelled& cancelled);
  // Stage 0: the click probabilities of this replica's held-out lines, after `step` steps.
  absl::StatusOr<EvalOutcome> Evaluate(int64_t step, const Cancelled& cancelled);
  // The later stages: ends step `step` here (synchronous training: sends this replica's part);
  // with `write_back`, then writes back the dense parameters the stage holds.
  absl::Status Flush(int64_t step, bool write_back, const Cancelled& cancelled);
  // Writes what the replica holds back to the parameter servers (a GPU tier's rows, the dense
  // parameters its stage holds; nothing without either), between steps.
  absl::Status WriteBack(const Cancelled& cancelled);

  // From the transport: a micro-batch from the previous stage, to answer through `from`.
  void Receive(const ForwardHeader& header, std::unique_ptr<Activations> activations,
               std::shared_ptr<Upstream> from);
  // From the transport: the answer of next-stage replica `target` to a micro-batch.
  void OnAnswer(int target, std::shared_ptr<Answer> answer);
  // From the transport: next-stage replica `target` has gone; what it held fails with `why`.
  void OnDownstreamLost(int target, absl::Status why);
  // From the transport: a message of another replica of this stage's dense exchange (dropped,
  // with a log line, by a replica whose stage holds no dense parameters).
  void OnDense(DenseMessage message);

  ReplicaStats stats() const;
  // "stage 1 replica 0", for messages.
  const std::string& name() const;
  // Stops the compute thread; waiting calls return Cancelled. Micro-batches in flight are dropped.
  void Stop();

 private:
  class Impl;
  explicit PipelineReplica(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::worker
