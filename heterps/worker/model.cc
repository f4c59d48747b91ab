#include "heterps/worker/model.h"

#include <algorithm>

#include "heterps/base/status_macros.h"

namespace heterps::worker {

std::vector<MicroBatch> MicroBatches(int64_t first_line, int n, const MicroBatching& m) {
  std::vector<MicroBatch> out;
  for (int r = 0; r < m.replicas; ++r) {
    // This replica's rows: the lines of [first_line, first_line + n) that are r mod replicas.
    const int first = static_cast<int>(((r - first_line) % m.replicas + m.replicas) % m.replicas);
    std::vector<int> share;
    for (int i = first; i < n; i += m.replicas) share.push_back(i);
    for (size_t begin = 0; begin < share.size(); begin += m.micro_batch) {
      const size_t end = std::min(share.size(), begin + static_cast<size_t>(m.micro_batch));
      out.push_back({r, std::vector<int>(share.begin() + begin, share.begin() + end)});
    }
  }
  return out;
}

Model::Model(std::unique_ptr<Stage> stage, ps::PsClient* client)
    : stage_(std::move(stage)),
      client_(client),
      grads_(stage_->NewGrads()),
      part_grads_(stage_->NewGrads()),
      step_grads_(stage_->NewStepGrads()) {}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const config::ModelSpec& spec,
                                                     ps::PsClient* client,
                                                     dense::DenseBackend* backend) {
  HETERPS_ASSIGN_OR_RETURN(
      auto stage,
      Stage::Create(spec, 0, static_cast<int>(spec.layers.size()) - 1, client, backend));
  if (!stage->has_loss()) {
    return absl::InvalidArgumentError(absl::StrCat(spec.source, ": the model has no loss layer"));
  }
  return std::unique_ptr<Model>(new Model(std::move(stage), client));
}

absl::StatusOr<double> Model::TrainStep(const data::Batch& batch, int64_t first_line) {
  HETERPS_RETURN_IF_ERROR(stage_->PullParameters());
  const float scale = 1.0f / static_cast<float>(batch.size);
  double sum = 0;
  if (micro_batching_.micro_batch <= 0) {
    InputActivations(batch, 0, batch.size, &input_);
    grads_.Clear();
    HETERPS_ASSIGN_OR_RETURN(sum, stage_->ForwardBackward(0, input_, scale, nullptr, &grads_));
    HETERPS_RETURN_IF_ERROR(stage_->Push(grads_));
    return sum / batch.size;
  }
  const std::vector<MicroBatch> parts = MicroBatches(first_line, batch.size, micro_batching_);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i == 0 || parts[i].replica != parts[i - 1].replica) step_grads_.Clear();
    part_.Clear();
    for (int r : parts[i].rows) part_.Append(batch, r);
    InputActivations(part_, 0, part_.size, &input_);
    part_grads_.Clear();
    HETERPS_ASSIGN_OR_RETURN(const double part,
                             stage_->ForwardBackward(0, input_, scale, nullptr, &part_grads_));
    sum += part;
    step_grads_.Add(part_grads_);
    if (i + 1 == parts.size() || parts[i + 1].replica != parts[i].replica) {
      HETERPS_RETURN_IF_ERROR(stage_->Accumulate(step_grads_, parts[i].replica));
    }
  }
  HETERPS_RETURN_IF_ERROR(client_->Commit());
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
