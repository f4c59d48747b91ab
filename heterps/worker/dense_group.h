// The dense parameters of a synchronous stage, held by the stage's replicas instead of pulled
// from the parameter servers every step (docs/runtime.md, "Dense parameters on the replicas").
//
//   DenseGroup group(kDenseTable, stage.dense_blocks(), optimizer, replica, replicas, &peers,
//                    client);
//   HETERPS_RETURN_IF_ERROR(stage.UpdateDense([&](auto& v) { return group.Load(v); }));
//   ... every step: the micro-batches' gradients summed (StepGrads) ...
//   HETERPS_RETURN_IF_ERROR(stage.UpdateDense(
//       [&](auto& v) { return group.Step(step, sums.dense, v, cancelled); }));
//   ... at the end of a round: group.WriteBack(values) ...
//
// Every replica keeps all of the stage's dense values. Laid end to end (the stage's blocks in
// order), they are cut into as many equal ranges as the stage has replicas; replica r owns range
// r and that range's optimizer state. At the end of a step each replica sends every other its
// gradient sums over the receiver's range (in double: the nodes of the step's block tree its
// micro-batches made, StepGrads); each owner merges every replica's nodes up the tree
// (ps/block_tree.h), rounds to float once and applies the optimizer to its range, then sends the
// updated range to every other replica. That is, element by element, what a parameter server's
// Commit does with the same nodes (ps/pending.h), so the values are the same to the bit whether
// the servers or the replicas hold them (runtime_test checks the digests). Each replica sends
// 2 (n - 1) messages a step, (n - 1) / n of the gradients in double (once per node it holds) and
// of the values in float, and runs the optimizer on 1/n of the parameters.
//
// The parameter servers' dense table stays the home of the parameters between the job's
// generations of processes: a group loads the values and its range's state from it (Load, at the
// replica's first step) and writes its range back (WriteBack) where the coordinator asks: at the
// end of every round of steps (before a checkpoint, an evaluation, a switch of plan and the end
// of the job). Between those points the servers' dense table is stale; a failure goes back to
// the last checkpoint, which was written after a write-back.
//
// Errors: a peer that cannot be reached (Unavailable from DensePeers, naming it), a peer that
// sends a part of the wrong size or names a replica that is not another of the stage's
// (InvalidArgument naming it), a step whose parts do not all come
// within `timeout` (DeadlineExceeded naming the replicas that did not send), the caller giving up
// (Cancelled), the servers' errors on Load and WriteBack. A failed step leaves the values
// undefined: the job restarts from its last checkpoint (docs/runtime.md, "Failures").
//
// Thread safety: Deliver may be called from any thread (the transport's); every other method
// from one thread at a time (the replica's compute thread).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "heterps/ps/optimizer.h"
#include "heterps/ps/ps_client.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {

// What one replica of a stage sends another at the end of a step.
struct DenseMessage {
  // kAbort: the sender gave step `step` up (its share failed: a bad line, a later stage's error),
  // so that the others stop waiting for its part.
  enum class Kind { kGradients, kValues, kAbort };
  int64_t step = 0;
  int from = 0;  // the sending replica
  Kind kind = Kind::kGradients;
  // kGradients: the sender's nodes (their parts), and each node's sums over the receiver's range,
  // one after another.
  std::vector<int> parts;
  std::vector<double> grads;
  std::vector<float> values;  // kValues: the sender's own range, updated
  std::string error;          // kAbort: why
};

// The transport between the replicas of one stage.
class DensePeers {
 public:
  virtual ~DensePeers() = default;
  // Hands `message` to replica `target` (not the sender), whose group receives it through
  // Deliver. Returns once it is delivered; Unavailable naming the peer when it cannot be reached.
  virtual absl::Status Send(int target, const DenseMessage& message) = 0;
};

class DenseGroup {
 public:
  using Cancelled = std::function<bool()>;

  // Replica `replica` (0 <= replica < replicas) of a stage whose dense blocks are `blocks` ((block
  // id in dense table `table`, floats), in the stage's order), updated with `optimizer`. `peers`
  // (unused with one replica) and `client` must outlive the group.
  DenseGroup(int table, std::vector<std::pair<int, int64_t>> blocks,
             const ps::OptimizerOptions& optimizer, int replica, int replicas, DensePeers* peers,
             ps::PsClient* client, absl::Duration timeout = absl::Minutes(5));

  // Reads every block's values from the servers into `values` (one buffer per block, resized),
  // and this replica's range's optimizer state and update counts.
  absl::Status Load(std::vector<AlignedFloats>& values);
  // Step `step`'s exchange (see above): `sums` are this replica's nodes of the step (their dense
  // sums; a replica that ran none of the step's micro-batches has none); `values` the stage's
  // values, updated in place.
  absl::Status Step(int64_t step, const StepGrads& sums, std::vector<AlignedFloats>& values,
                    const Cancelled& cancelled);
  // Writes this replica's range of `values`, with its optimizer state and update counts, to the
  // servers.
  absl::Status WriteBack(const std::vector<AlignedFloats>& values);

  // The same with the values and their optimizer state held by the stage on its GPU
  // (Stage::HoldDense; docs/gpu.md, "Dense parameters held on the device"), for a group of one
  // replica whose steps train one micro-batch of one block: LoadHeld loads as Load does and hands
  // the values and the state to `stage`; StepHeld counts the step's update and has the stage apply
  // it from its backward's gradients on the device (the servers' arithmetic: the values Step would
  // give, to the bit where the device's float arithmetic is the host's); WriteBackHeld reads
  // them back from the stage and writes them as WriteBack does. FailedPrecondition for a group of
  // several replicas, a second LoadHeld, StepHeld or WriteBackHeld before LoadHeld; the stage's
  // errors.
  absl::Status LoadHeld(Stage& stage);
  absl::Status StepHeld(Stage& stage);
  absl::Status WriteBackHeld(Stage& stage);
  bool held() const { return held_; }

  // From the transport: a message of another replica of the stage. Messages of a step this
  // replica has finished are dropped. An abort makes this replica's Step of that step return
  // Aborted with the sender's reason.
  void Deliver(DenseMessage message);
  // Tells the other replicas that this one gives step `step` up because of `why` (best effort:
  // a peer that cannot be reached is skipped). Any thread.
  void Abort(int64_t step, const absl::Status& why);

  bool loaded() const { return loaded_; }
  // Floats of the stage's dense values in replica r's range.
  int64_t RangeSize(int r) const { return RangeEnd(r) - RangeBegin(r); }

 private:
  // A piece of a range inside one block.
  struct Piece {
    int block = 0;       // index into blocks_
    int64_t offset = 0;  // in the block
    int64_t count = 0;
    int64_t at = 0;  // in the range
  };
  int64_t RangeBegin(int r) const { return total_ * r / replicas_; }
  int64_t RangeEnd(int r) const { return total_ * (r + 1) / replicas_; }
  std::vector<Piece> Pieces(int r) const;
  // Calls run(piece's floats, block's floats, count) for each state array of each of this
  // replica's pieces: the piece's array (ps::DenseSlice: its m, then its v) against the same
  // range of its block's array in `blocks` (per block, StateFloats floats a parameter).
  template <typename F>
  void ForEachStateRun(std::vector<std::vector<float>>& blocks, F run) {
    for (size_t i = 0; i < mine().size(); ++i) {
      const Piece& p = mine()[i];
      for (int k = 0; k < ps::StateFloats(optimizer_.kind); ++k) {
        run(state_[i].data() + k * p.count,
            blocks[p.block].data() + k * blocks_[p.block].second + p.offset, p.count);
      }
    }
  }
  // Waits until the n - 1 messages of (step, kind) are here; takes them, ordered by sender.
  absl::Status Await(int64_t step, DenseMessage::Kind kind, const Cancelled& cancelled,
                     std::vector<DenseMessage>* out);

  const int table_;
  const std::vector<std::pair<int, int64_t>> blocks_;
  const ps::OptimizerOptions optimizer_;
  const int replica_, replicas_;
  DensePeers* const peers_;
  ps::PsClient* const client_;
  const absl::Duration timeout_;
  int64_t total_ = 0;                       // floats of all blocks
  std::vector<std::vector<Piece>> pieces_;  // per replica: its range's pieces
  const std::vector<Piece>& mine() const { return pieces_[replica_]; }
  std::vector<std::vector<float>> state_;  // per piece of mine(): its DenseSlice state
  std::vector<int64_t> steps_;             // per piece of mine(): its block's update count
  bool loaded_ = false;
  bool held_ = false;  // the values and state are the stage's (LoadHeld)

  absl::Mutex mu_;
  // Messages by (step, kind), in arrival order; those of steps before `done_` are dropped.
  std::map<std::pair<int64_t, int>, std::vector<DenseMessage>> inbox_ ABSL_GUARDED_BY(mu_);
  std::map<int64_t, std::string> aborted_ ABSL_GUARDED_BY(mu_);  // step -> a peer's reason
  int64_t done_ ABSL_GUARDED_BY(mu_) = -1;  // the last step this replica finished
};

}  // namespace heterps::worker
