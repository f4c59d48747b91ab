// A whole model trained one mini-batch at a time in this process: the one Stage (stage.h) that
// covers every layer of its spec, with its parameters on the parameter server behind a PsClient,
// exactly as the distributed runtime holds them.
//
//   HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, &client, ModelOptions()));
//   HETERPS_ASSIGN_OR_RETURN(auto model, Model::Create(spec, &client));
//   HETERPS_ASSIGN_OR_RETURN(double loss, model->TrainStep(batch));
//
// A training step pulls the dense parameters, runs forward, the logloss and backward on the whole
// batch, sends the embedding and dense gradients (the servers apply their optimizers: one update
// per key and per block) and returns once they are applied, so the next step sees them.
//
// With a block size (set_block_size), a step forms its gradients the way a synchronous job does:
// block by block, the blocks combined in the step's fixed tree (ps/block_tree.h), accumulated on
// the servers and committed. Every float operation is then the job's, whatever the job's layout
// (its replicas, stages, micro-batches): the two runs are equal to the bit, step after step, over
// any number of epochs (docs/runtime.md, "Synchronous mode"). A MicroBatching cuts the step the
// way a job of that layout does, to show that it makes no difference. Without a block size, the
// step's gradients are pushed (the servers sum a key's repeats in arrival order): what several
// threads training at once (Hogwild) need.
//
// Thread safety: one thread at a time per Model (several Models may share one client).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/criteo.h"
#include "heterps/ps/ps_client.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {

// How a synchronous job splits a mini-batch: `replicas` stage-0 replicas, each taking its
// consecutive blocks of the step (ShareBlocks, job.h) and cutting them into micro-batches of
// `micro_batch` samples (whole blocks; the step's last may be shorter).
struct MicroBatching {
  int replicas = 1;
  int64_t micro_batch = 0;  // 0: each replica's share at once
};

// The micro-batches of a step of n samples in blocks of `block_size`, replica by replica, in
// block order: the replica, the rows [begin, begin + size) of the step, and the first block.
// Needs replicas >= 1, block_size >= 1 and micro_batch a multiple of block_size.
struct MicroBatch {
  int replica = 0;
  int64_t begin = 0, size = 0;
  int64_t first_block = 0;
};
std::vector<MicroBatch> MicroBatches(int64_t n, int64_t block_size, const MicroBatching& m);

class Model {
 public:
  // The model's tables must exist on `client` (CreateModelTables), which must outlive the model,
  // as must `backend`, where its dense layers run (null: this host's CPU). InvalidArgument naming
  // the spec's file and line for what cannot be trained.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const config::ModelSpec& spec,
                                                       ps::PsClient* client,
                                                       dense::DenseBackend* backend = nullptr);

  // Forms the steps' gradients block by block, in blocks of `rows` samples (0: pushes them).
  void set_block_size(int64_t rows);
  // Runs the steps in the micro-batches of `m` (with a block size; see above).
  void set_micro_batching(const MicroBatching& m) { micro_batching_ = m; }

  // One training step on `batch`; returns the batch's mean logloss before the update (with a
  // block size, its blocks' sums added in block order).
  absl::StatusOr<double> TrainStep(const data::Batch& batch);
  // A synchronous step shared by several Models (one per thread, each with the same block size
  // and micro-batching, whose replicas are as many as the Models): ComputeShare pulls the dense
  // parameters and runs replica `replica`'s micro-batches of `batch`, keeping their gradients
  // and block losses (share_losses, in block order); once every share is computed, one thread
  // calls AccumulateShare on each Model in replica order and then the client's Commit. The step
  // is then TrainStep's on one Model with that micro-batching: equal to the bit. Needs a block
  // size.
  absl::Status ComputeShare(const data::Batch& batch, int replica);
  absl::Status AccumulateShare();
  const std::vector<double>& share_losses() const { return step_losses_; }
  // Click probabilities of a batch's samples, without updating anything.
  absl::Status Predict(const data::Batch& batch, std::vector<float>* probabilities);

  // One training step that also times each layer: forward + backward seconds per spec layer
  // (embedding layers: their pull; the logloss layer: the loss), in spec order, the input
  // layer left out. The pushes come after, untimed.
  absl::StatusOr<std::vector<std::pair<std::string, double>>> ProfileStep(const data::Batch& batch);

  int64_t dense_parameters() const { return stage_->dense_parameters(); }

 private:
  Model(std::unique_ptr<Stage> stage, ps::PsClient* client);
  // Runs replica r's micro-batches of the step into step_grads_[slot], their block losses
  // appended to step_losses_.
  absl::Status RunShare(const data::Batch& batch, int replica, size_t slot);

  std::unique_ptr<Stage> stage_;
  ps::PsClient* client_;
  ParameterGrads grads_;
  Activations input_, output_;
  int64_t block_size_ = 0;
  MicroBatching micro_batching_;
  // With a block size: each replica's nodes of the step, the step's blocks' losses.
  std::vector<StepGrads> step_grads_;
  std::vector<double> block_losses_, step_losses_;
};

}  // namespace heterps::worker
