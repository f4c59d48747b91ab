// A model built from its spec (config::ModelSpec) and trained one mini-batch at a time, with its
// parameters on the parameter server behind a PsClient, exactly as the distributed runtime will
// hold them.
//
//   HETERPS_ASSIGN_OR_RETURN(auto model, Model::Create(spec, &client, ModelOptions()));
//   HETERPS_ASSIGN_OR_RETURN(double loss, model->TrainStep(batch));
//
// Tables: embedding layer e (counting embedding layers in spec order from 0) is sparse table e,
// looking up slots 0 .. slots-1 of the reader's keys (data::SlotKey), rows initialised uniform in
// +-sqrt(1 / rows); the parameters of fc layer f are block f of dense table kDenseTable, laid out
// [W (out x in) | b (out)] and initialised uniform in +-sqrt(6 / (in + out)) (Glorot).
//
// A training step pulls every dense block and the batch's rows (concurrently), runs forward,
// the logloss and backward, pushes the embedding and dense gradients (the servers apply their
// optimizers) and returns once the pushes are acknowledged: the next step sees this step's
// updates.
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

namespace heterps::worker {

struct ModelOptions {
  ps::OptimizerOptions sparse_optimizer{ps::OptimizerKind::kAdagrad, 0.05f};
  ps::OptimizerOptions dense_optimizer{ps::OptimizerKind::kAdam, 0.001f};
  uint64_t seed = 1;
  bool create_tables = true;  // false: another Model on the same client created them
};

class Model {
 public:
  static constexpr int kDenseTable = 1 << 20;

  // Creates the model's tables on `client` (which must outlive the model). InvalidArgument naming
  // the spec's file and line for what cannot be trained: a `custom` layer, an input that is not
  // Criteo-shaped (13 dense features, 26 slots), more embedding slots than the input has.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const config::ModelSpec& spec,
                                                       ps::PsClient* client,
                                                       const ModelOptions& options);
  ~Model();

  // One training step; returns the batch's mean logloss before the update.
  absl::StatusOr<double> TrainStep(const data::Batch& batch);
  // Click probabilities of a batch's samples, without updating anything.
  absl::Status Predict(const data::Batch& batch, std::vector<float>* probabilities);

  // One training step that also times each layer: forward + backward seconds per spec layer
  // (embedding layers: their pull and push; the logloss layer: the loss), in spec order.
  absl::StatusOr<std::vector<std::pair<std::string, double>>> ProfileStep(const data::Batch& batch);

  // Parameters: dense floats (all fc layers) and embedding dims, for summaries.
  int64_t dense_parameters() const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::worker
