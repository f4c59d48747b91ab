#include "heterps/worker/model.h"

#include "heterps/base/status_macros.h"

namespace heterps::worker {

Model::Model(std::unique_ptr<Stage> stage) : stage_(std::move(stage)), grads_(stage_->NewGrads()) {}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const config::ModelSpec& spec,
                                                     ps::PsClient* client,
                                                     dense::DenseBackend* backend) {
  HETERPS_ASSIGN_OR_RETURN(
      auto stage,
      Stage::Create(spec, 0, static_cast<int>(spec.layers.size()) - 1, client, backend));
  if (!stage->has_loss()) {
    return absl::InvalidArgumentError(absl::StrCat(spec.source, ": the model has no loss layer"));
  }
  return std::unique_ptr<Model>(new Model(std::move(stage)));
}

absl::StatusOr<double> Model::TrainStep(const data::Batch& batch) {
  HETERPS_RETURN_IF_ERROR(stage_->PullParameters());
  InputActivations(batch, 0, batch.size, &input_);
  grads_.Clear();
  HETERPS_ASSIGN_OR_RETURN(const double sum,
                           stage_->ForwardBackward(0, input_, 1.0f / batch.size, nullptr, &grads_));
  HETERPS_RETURN_IF_ERROR(stage_->Push(grads_));
  return sum / batch.size;
}

absl::StatusOr<std::vector<std::pair<std::string, double>>> Model::ProfileStep(
    const data::Batch& batch) {
  stage_->set_timing(true);
  absl::StatusOr<double> loss = TrainStep(batch);
  stage_->set_timing(false);
  HETERPS_RETURN_IF_ERROR(loss.status());
  return stage_->layer_seconds();
}

absl::Status Model::Predict(const data::Batch& batch, std::vector<float>* probabilities) {
  HETERPS_RETURN_IF_ERROR(stage_->PullParameters());
  InputActivations(batch, 0, batch.size, &input_);
  HETERPS_RETURN_IF_ERROR(stage_->Predict(0, input_, &output_));
  probabilities->assign(output_.dense.data(), output_.dense.data() + batch.size);
  return absl::OkStatus();
}

}  // namespace heterps::worker
