// A whole model trained one mini-batch at a time in this process: the one Stage (stage.h) that
// covers every layer of its spec, with its parameters on the parameter server behind a PsClient,
// exactly as the distributed runtime holds them.
//
//   HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, &client, ModelOptions()));
//   HETERPS_ASSIGN_OR_RETURN(auto model, Model::Create(spec, &client));
//   HETERPS_ASSIGN_OR_RETURN(double loss, model->TrainStep(batch));
//
// A training step pulls the dense parameters, runs forward, the logloss and backward on the whole
// batch, pushes the embedding and dense gradients (the servers apply their optimizers: one update
// per key and per block) and returns once they are applied, so the next step sees them.
//
// With a MicroBatching, a step forms and applies its gradients the way a synchronous job of that
// layout does: one forward and backward per micro-batch (the same rows, in the same order, as the
// job's), each stage-0 replica's micro-batches summed as that replica's part (StepGrads: the dense
// sums in double), the parts accumulated on the servers and committed. When the job's embedding
// layers are in its first stage (so that its parts are the stage-0 replicas'), every float
// operation is the job's and the two runs are equal to the bit, step after step, over any number
// of epochs. docs/runtime.md, "Synchronous mode".
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

// How a synchronous job splits a mini-batch: `replicas` stage-0 replicas, replica r taking the
// pass's lines r, r + replicas, r + 2 replicas, ... in order, each splitting its share of a step
// into micro-batches of `micro_batch` samples (the last one shorter).
struct MicroBatching {
  int replicas = 1;
  int64_t micro_batch = 0;  // 0: none, the whole batch at once
};

// The micro-batches of the mini-batch of a pass's lines [first_line, first_line + n), replica by
// replica, in each replica's order: the replica and the rows' indices into the mini-batch
// (0..n-1, increasing). Needs replicas >= 1 and micro_batch >= 1.
struct MicroBatch {
  int replica = 0;
  std::vector<int> rows;
};
std::vector<MicroBatch> MicroBatches(int64_t first_line, int n, const MicroBatching& m);

class Model {
 public:
  // The model's tables must exist on `client` (CreateModelTables), which must outlive the model,
  // as must `backend`, where its dense layers run (null: this host's CPU). InvalidArgument naming
  // the spec's file and line for what cannot be trained.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const config::ModelSpec& spec,
                                                       ps::PsClient* client,
                                                       dense::DenseBackend* backend = nullptr);

  // Forms the gradients of the steps that follow in the micro-batches of `m` (see above).
  void set_micro_batching(const MicroBatching& m) { micro_batching_ = m; }

  // One training step on the batch of a pass's lines [first_line, first_line + batch.size)
  // (first_line matters only with a MicroBatching); returns the batch's mean logloss before the
  // update.
  absl::StatusOr<double> TrainStep(const data::Batch& batch, int64_t first_line = 0);
  // Click probabilities of a batch's samples, without updating anything.
  absl::Status Predict(const data::Batch& batch, std::vector<float>* probabilities);

  // One training step that also times each layer: forward + backward seconds per spec layer
  // (embedding layers: their pull; the logloss layer: the loss), in spec order, the input
  // layer left out. The pushes come after, untimed.
  absl::StatusOr<std::vector<std::pair<std::string, double>>> ProfileStep(const data::Batch& batch);

  int64_t dense_parameters() const { return stage_->dense_parameters(); }

 private:
  Model(std::unique_ptr<Stage> stage, ps::PsClient* client);

  std::unique_ptr<Stage> stage_;
  ps::PsClient* client_;
  ParameterGrads grads_;
  Activations input_, output_;
  MicroBatching micro_batching_;
  // With micro_batching_: one micro-batch's rows and gradients, the step's sums.
  data::Batch part_;
  ParameterGrads part_grads_;
  StepGrads step_grads_;
};

}  // namespace heterps::worker
