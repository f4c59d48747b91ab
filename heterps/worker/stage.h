// A stage of a model: the spec's layers first..last (a contiguous slice), run forward and backward
// on micro-batches against a PsClient. The whole model is the one stage that covers every layer;
// the distributed runtime cuts it into several, in several processes (docs/runtime.md).
//
//   HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, &client, ModelOptions()));
//   HETERPS_ASSIGN_OR_RETURN(auto stage, Stage::Create(spec, 0, last, &client));
//   ParameterGrads grads = stage->NewGrads();
//   HETERPS_RETURN_IF_ERROR(stage->PullParameters());
//   Activations in;
//   InputActivations(batch, 0, batch.size, &in);
//   HETERPS_ASSIGN_OR_RETURN(double loss_sum,
//                            stage->ForwardBackward(0, in, 1.0f / batch.size, nullptr, &grads));
//   HETERPS_RETURN_IF_ERROR(stage->Push(grads));
//
// Between two stages flow Activations (forward) and ActivationGrads (backward). A micro-batch in
// flight lives in a context (an integer >= 0 chosen by the caller: a stage keeps each context's
// layer state from its Forward to its Backward, and reuses the context's buffers for the next
// micro-batch, so that a stage that sees micro-batches of one size allocates nothing after the
// first few). The activations handed to Forward must stay alive and unchanged until that
// context's Backward.
//
// Devices: the embedding layers run on this host (their rows come from the PsClient); the dense
// layers run on a dense::DenseBackend (dense/backend.h), in chains of consecutive dense layers,
// on the device the stage is planned on (this host's CPU unless told otherwise). The activations
// between stages are host memory either way. A GPU tier on the stage's device may feed its first
// chain on the device (UseDeviceTier).
//
// Parameters: embedding layer e (counting embedding layers of the whole spec from 0) is sparse
// table e, looking up slots 0 .. slots-1 of the input's keys. A slot holding several keys
// (multi-hot) is pooled into one vector with the layer's pooling: the sum of its rows, or their
// mean; a slot holding none is a zero vector either way. Backward gives each of a slot's keys the
// slot's gradient (sum), or that gradient over the slot's key count (mean); fc layer f (counting fc
// layers of the whole spec) is block f of dense table kDenseTable, [W (out x in) | b (out)].
// Forward passes use the dense parameters of the last PullParameters (which the first dense layer
// waits for, the embedding lookups before it running meanwhile). Gradients are not pushed by
// Backward: they are written into a ParameterGrads (block by block), which the caller pushes when
// the consistency mode says so (Push: applied now; Accumulate: the step's block tree nodes merged
// on the servers until Commit, ps_client.h).
//
// Thread safety: one thread at a time per Stage (several Stages may share one client).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "heterps/base/key_index.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/criteo.h"
#include "heterps/dense/backend.h"
#include "heterps/ps/ps_client.h"

namespace heterps::ps {
class GpuTier;
struct TierTable;
}  // namespace heterps::ps

namespace heterps::worker {

using dense::Matrix;

// Floats aligned to Eigen's packets: vectorised sums peel their first elements by the address, so
// a varying alignment would vary the rounding from run to run.
using AlignedFloats = std::vector<float, Eigen::aligned_allocator<float>>;

struct ModelOptions {
  ps::OptimizerOptions sparse_optimizer{ps::OptimizerKind::kAdagrad, 0.05f};
  ps::OptimizerOptions dense_optimizer{ps::OptimizerKind::kAdam, 0.001f};
  uint64_t seed = 1;
  int64_t sparse_memory_budget_bytes = 0;  // per table and server; 0: all rows in memory
};

// Samples per block of a synchronous step unless a job says otherwise (ps/block_tree.h).
inline constexpr int64_t kDefaultBlockSize = 64;

// The dense table that holds every fc layer's parameters.
inline constexpr int kDenseTable = 1 << 20;

// Creates the model's tables on `client`: a sparse table per embedding layer (rows initialised
// uniform in +-sqrt(1 / rows)), and the dense table with a block per fc layer (Glorot-uniform,
// +-sqrt(6 / (in + out))). InvalidArgument naming the spec's file and line for what cannot be
// trained: a `custom` layer, an input that does not fit the spec's data layout (its dense and
// sparse counts; Criteo's 13 and 26 when the spec declares no `data` section).
absl::Status CreateModelTables(const config::ModelSpec& spec, ps::PsClient* client,
                               const ModelOptions& options);

// The options the model's sparse table of embedding layer `layer` (of `spec`) is created with: its
// dim, the optimizer, the seed of table `table`, the initial range and the memory budget.
ps::SparseTableOptions EmbeddingTableOptions(const config::LayerSpec& layer, int table,
                                             const ModelOptions& options);

// The tables a GPU tier in front of stage layers first..last holds (ps/gpu/gpu_tier.h): one per
// embedding layer among them, numbered and optioned as CreateModelTables made them, able to hold
// the layer's `rows` per slot (a table holds each of its slots' ids apart).
std::vector<ps::TierTable> StageTierTables(const config::ModelSpec& spec, int first, int last,
                                           const ModelOptions& options);

// What crosses a stage boundary: the activations of a micro-batch of `size` samples.
struct Activations {
  int64_t size = 0;
  std::vector<float> labels;  // size; carried up to the stage with the loss
  // The input's keys while an embedding layer is ahead, ragged as in data::Batch: sample r's slot s
  // holds keys [offsets[r * slots + s], offsets[r * slots + s + 1]), or, while `offsets` is empty,
  // the one key keys[r * slots + s] (slots: the input layer's sparse slots).
  std::vector<uint64_t> keys;
  std::vector<int32_t> offsets;
  Matrix<float> dense;    // size x dense width; before the first layer, the dense features
  Matrix<float> vectors;  // size x (embedding vectors x dim); no columns when there are none
};

// The loss's gradients with respect to an Activations' dense and vectors.
struct ActivationGrads {
  Matrix<float> dense, vectors;
};

// Samples [begin, begin + n) of a reader's batch as the activations entering the first layer.
void InputActivations(const data::Batch& batch, int64_t begin, int64_t n, Activations* out);

// The device path's embedding gradients (Stage::UseDeviceTier): left on the device by a
// micro-batch's backward, pushed from there by Stage::Push or Stage::Accumulate. Callers carry
// them along with the rest (a step's leave with it when it is cleared) and look no further.
struct DeviceGrads {
  int ctx = 0;                   // the micro-batch's context (its keys)
  size_t part = 0;               // the stage's embedding part
  int64_t column = 0;            // its bags' first column, in rows of the chain's vector floats
  const float* grads = nullptr;  // device memory of the chain's context
};

// The gradients of a stage's parameters over one micro-batch, block by block: with a block size
// (Stage::set_block_rows), the micro-batch's samples are cut into blocks of that many (the last
// may be shorter) and each block's gradients are kept apart, so that a step's sums can be formed
// in an order the samples alone fix (ps/block_tree.h).
struct ParameterGrads {
  int64_t blocks = 1;
  // Per fc layer of the stage: `blocks` gradients of its block's floats, one after another.
  std::vector<AlignedFloats> dense;
  struct Rows {
    std::vector<uint64_t> keys;  // may repeat: pushes sum a repeated key's gradients
    std::vector<float> grads;    // keys.size() * dim
    std::vector<size_t> ends;    // per block: the rows of the blocks up to its end
  };
  std::vector<Rows> sparse;         // per embedding layer of the stage
  std::vector<int64_t> floats;      // per fc layer: one block's gradient floats
  std::vector<DeviceGrads> device;  // the device path's layers, instead of their rows
  // The stage holds its dense parameters on the device (Stage::HoldDense): their gradients
  // stayed there, `dense` holds none (its sums are neither zeroed nor read).
  bool dense_held = false;

  // Zeroes the dense sums and empties the rows for `blocks` blocks, keeping the memory.
  void Reset(int64_t blocks);
  void Clear() { Reset(blocks); }
  // The dense gradient of fc layer `fc` in block `block`.
  const float* dense_block(size_t fc, int64_t block) const {
    return dense[fc].data() + block * floats[fc];
  }
};

// A synchronous step's gradients, as the nodes of its block tree (ps/block_tree.h) that this
// holder's blocks make: block b of a micro-batch whose first block is f is leaf f + b; two
// sibling nodes both here merge at once. A node holds, per fc layer, the dense sums in double
// (rounded to float once, by whoever adds the last node: ps::PendingUpdates, DenseGroup), and per
// embedding layer, each key's float sum. A leaf's sums run over the block's samples in order
// (a key's occurrences in sample and slot order, from 0).
struct StepGrads {
  struct Sparse {
    std::vector<uint64_t> keys;  // distinct
    std::vector<float> sums;     // keys.size() * dim
  };
  struct Node {
    std::vector<std::vector<double>> dense;  // per fc layer of the stage
    std::vector<Sparse> sparse;              // per embedding layer of the stage
  };
  std::vector<std::pair<int, Node>> nodes;  // (part, node), merged as far as they go, by part
  std::vector<int64_t> dims;                // per embedding layer: its dim
  std::vector<DeviceGrads> device;          // the micro-batches' (ParameterGrads::device)

  void Clear();  // keeps the nodes' memory for the next step's
  // Adds one micro-batch's gradients (of the same stage), its first block being `first_block`
  // of the step.
  void Add(int64_t first_block, const ParameterGrads& micro_batch);
  // Merges every node into one: the holder has all of the step's blocks.
  void MergeAll();

 private:
  // Block j's sums of embedding layer e: each key's, in order from 0.
  void LeafSparse(const ParameterGrads& micro_batch, int64_t j, size_t e, Sparse* out);

  std::vector<Node> spare_;  // memory of nodes merged or cleared
  Node leaf_;                // a block's sparse sums, before they join a node
  base::KeyIndex index_;     // a block's keys
};

class Stage {
 public:
  // The stage of spec layers first..last (0 <= first <= last < layers), its dense layers on
  // `backend` (null: this host's CPU). `spec`, `client` and `backend` must outlive the stage. The
  // model's tables must exist (CreateModelTables, by this or another process). InvalidArgument
  // for a bad range or an untrainable layer (naming the spec's file and line).
  static absl::StatusOr<std::unique_ptr<Stage>> Create(const config::ModelSpec& spec, int first,
                                                       int last, ps::PsClient* client,
                                                       dense::DenseBackend* backend = nullptr);
  ~Stage();

  int first() const;
  int last() const;
  bool has_loss() const;  // holds the logloss layer: the last stage
  // Whether the activations leaving this stage carry the keys and the labels.
  bool passes_keys() const;
  bool passes_labels() const;
  // Dense parameters of this stage's fc layers (floats).
  int64_t dense_parameters() const;
  // The stage's dense blocks in dense table kDenseTable, in order: (block id, floats).
  std::vector<std::pair<int, int64_t>> dense_blocks() const;

  // Starts pulling this stage's dense parameters; the forward passes that follow use them. The
  // pull completes in the next call that needs them (the first dense layer of the next Forward,
  // ForwardBackward or Predict, or Backward), so that it overlaps that micro-batch's embedding
  // lookups; its errors (a server down) are that call's. Errors here: those of an earlier pull
  // that no call had waited for.
  absl::Status PullParameters();
  // The dense parameters the forward passes use now (those of the last completed pull or
  // UpdateDense), one buffer per block of dense_blocks().
  const std::vector<AlignedFloats>& dense_values() const;
  // Runs `update` on the stage's dense parameters (one buffer per block of dense_blocks(), in
  // order; a pull in flight completed first), then hands them to the dense layers: the way a
  // caller that holds the parameters itself (worker/dense_group.h) loads and updates them
  // instead of PullParameters. `update`'s error is returned and the layers keep what they had.
  absl::Status UpdateDense(
      const std::function<absl::Status(std::vector<AlignedFloats>& values)>& update);
  // Names the keys the coming micro-batches (`in`, a whole share of a step) will look up, per
  // embedding table, to the client (PsClient::Prefetch: a tier loads them ahead).
  absl::Status Prefetch(const Activations& in);
  // After Prefetch: names the keys of the share after it (`next`, the next step's), per
  // embedding table, to the client (PsClient::Anticipate: a tier fetches the rows it will miss
  // while this share runs).
  absl::Status Anticipate(const Activations& next);

  // Runs micro-batch `in` through the stage in context `ctx` (>= 0) and writes what leaves it.
  // Not for the stage with the loss. Errors: the client's (a server down).
  absl::Status Forward(int ctx, const Activations& in, Activations* out);
  // The stage with the loss: forward, the loss and backward in one. Returns the loss summed over
  // the micro-batch (its blocks' sums added in block order; each block's in `block_losses` unless
  // null); the gradients are those of `scale` times that sum (scale: 1 / the mini-batch's size).
  // Writes d_in (unless null: the first stage) and `grads` (reset to the micro-batch's blocks).
  absl::StatusOr<double> ForwardBackward(int ctx, const Activations& in, float scale,
                                         ActivationGrads* d_in, ParameterGrads* grads,
                                         std::vector<double>* block_losses = nullptr);
  // Backward of context `ctx`'s micro-batch, from the gradients of what left the stage. Writes
  // d_in (unless null) and `grads` (reset to the micro-batch's blocks).
  absl::Status Backward(int ctx, const ActivationGrads& d_out, ActivationGrads* d_in,
                        ParameterGrads* grads);
  // Forward without training (evaluation): the context keeps nothing for a Backward. The stage
  // with the loss writes the click probabilities into out->dense (size x 1).
  absl::Status Predict(int ctx, const Activations& in, Activations* out);

  // Samples per block (ps/block_tree.h): the dense chains run each block of a micro-batch on
  // its own and keep each block's gradients apart. 0 (the default): a micro-batch is one block.
  // A micro-batch of a synchronous job holds whole blocks but for the step's last.
  void set_block_rows(int64_t rows);
  int64_t block_rows() const;

  // The device path (docs/gpu.md, "The tier feeds the stage"). Where `tier` is the stage's
  // client, holds every embedding table of the stage, and the stage's first dense chain folds
  // the vectors right after its embedding layers on the tier's device (the stage starts at the
  // input, its backend's gpu_device is the tier's), a micro-batch of one block pools its bags on
  // the device straight into that chain's input (GpuTier::LookupBags) and leaves the bags'
  // gradients there: `grads` carry them as DeviceGrads instead of rows, and Push and Accumulate
  // push them from the device (PushBags; AccumulateBags, as the step's one node's part). The caller
  // must then accumulate at most one micro-batch a step (a step's micro-batches' rows are merged by
  // its block tree on the host, which the device path skips); asynchronous pushes may come after
  // every micro-batch. Returns whether the path is on (false, and nothing changes, where the
  // stage's layers or devices do not allow it).
  bool UseDeviceTier(ps::GpuTier* tier);

  // Dense parameters held on the device (docs/gpu.md, "Dense parameters held on the device").
  // Where every dense chain of the stage can hold its parameters (can_hold_dense: a GPU backend,
  // DenseChain::Hold), HoldDense hands the chains `values` (one buffer per block of
  // dense_blocks()) and `state` (per block, ps::StateFloats(optimizer.kind) floats a parameter:
  // Adagrad's accumulators; Adam's m, then v), to be updated with `optimizer`. From then on the
  // forward passes use the held values, a backward leaves the parameters' gradients on the device
  // (ParameterGrads::dense_held: Push and Accumulate send no dense gradients), and
  // ApplyHeldDense updates every block once from the last backward's gradients with the parameter
  // servers' arithmetic (ps::ApplyUpdate), `steps` (per block) being the update counts after it
  // (Adam's bias correction). ReadHeldDense copies the values and the state back to the host; they
  // stay held. While held, PullParameters and UpdateDense are refused (FailedPrecondition), and a
  // micro-batch must be one block (FailedPrecondition from its backward otherwise).
  // Errors: FailedPrecondition from HoldDense where the chains cannot hold (nothing changes) or
  // hold already (a device's error part way may leave some chains holding: the stage is then
  // unusable, and the job restarts from its checkpoint), from ApplyHeldDense unless exactly one
  // backward came since the last update (the caller trains one micro-batch a step) and before
  // HoldDense; InvalidArgument for blocks of the wrong count or size; the device's errors.
  bool can_hold_dense() const;
  bool holds_dense() const;
  absl::Status HoldDense(const ps::OptimizerOptions& optimizer,
                         const std::vector<AlignedFloats>& values,
                         const std::vector<std::vector<float>>& state);
  absl::Status ApplyHeldDense(absl::Span<const int64_t> steps);
  absl::Status ReadHeldDense(std::vector<AlignedFloats>* values,
                             std::vector<std::vector<float>>* state);

  // An empty ParameterGrads (StepGrads) shaped for this stage.
  ParameterGrads NewGrads() const;
  StepGrads NewStepGrads() const;
  // Pushes `grads` (its blocks summed in block order): the servers apply them now (one update per
  // key and block).
  absl::Status Push(const ParameterGrads& grads);
  // Sends `grads`, each node as the contribution of its part, to the current step: the servers
  // merge them until Commit.
  // Without `dense`, only the embedding rows' gradients (the caller updates the dense parameters
  // itself: UpdateDense). `meanwhile` (if any) runs while they travel; its error is returned
  // first.
  absl::Status Accumulate(const StepGrads& grads, bool dense = true,
                          const std::function<absl::Status()>& meanwhile = nullptr);

  // Seconds spent waiting for the parameter servers (pulls, pushes), since the stage was made.
  double ps_seconds() const;
  // Where the micro-batches' passes spent their time since the stage was made, seconds: the
  // embedding rows into the vectors (pulls from a GPU tier or the servers included), the dense
  // chains (forward, loss, backward: on a GPU stage, its copies and waits included), and the
  // embedding rows' gradients laid out per key.
  struct PassSeconds {
    double lookup = 0, dense = 0, rows = 0;
  };
  PassSeconds pass_seconds() const;

  // Profiling: while on, every call adds each layer's seconds (forward + backward) to
  // layer_seconds(), in stage order; the loss layer's is the loss computation.
  void set_timing(bool on);
  std::vector<std::pair<std::string, double>> layer_seconds() const;

 private:
  struct Impl;
  explicit Stage(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::worker
