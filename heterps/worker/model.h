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

class Model {
 public:
  // The model's tables must exist on `client` (CreateModelTables), which must outlive the model,
  // as must `backend`, where its dense layers run (null: this host's CPU). InvalidArgument naming
  // the spec's file and line for what cannot be trained.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const config::ModelSpec& spec,
                                                       ps::PsClient* client,
                                                       dense::DenseBackend* backend = nullptr);

  // One training step; returns the batch's mean logloss before the update.
  absl::StatusOr<double> TrainStep(const data::Batch& batch);
  // Click probabilities of a batch's samples, without updating anything.
  absl::Status Predict(const data::Batch& batch, std::vector<float>* probabilities);

  // One training step that also times each layer: forward + backward seconds per spec layer
  // (embedding layers: their pull; the logloss layer: the loss), in spec order, the input
  // layer left out. The pushes come after, untimed.
  absl::StatusOr<std::vector<std::pair<std::string, double>>> ProfileStep(const data::Batch& batch);

  int64_t dense_parameters() const { return stage_->dense_parameters(); }

 private:
  explicit Model(std::unique_ptr<Stage> stage);

  std::unique_ptr<Stage> stage_;
  ParameterGrads grads_;
  Activations input_, output_;
};

}  // namespace heterps::worker
