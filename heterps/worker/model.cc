#include "heterps/worker/model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/worker/job.h"

namespace heterps::worker {

std::vector<MicroBatch> MicroBatches(int64_t n, int64_t block_size, const MicroBatching& m) {
  std::vector<MicroBatch> out;
  for (int r = 0; r < m.replicas; ++r) {
    const auto [begin, stop] = ShareLines(n, block_size, r, m.replicas);
    const int64_t size = m.micro_batch > 0 ? m.micro_batch : std::max<int64_t>(stop - begin, 1);
    for (int64_t at = begin; at < stop; at += size) {
      out.push_back({r, at, std::min(size, stop - at), at / block_size});
    }
  }
  return out;
}

Model::Model(std::unique_ptr<Stage> stage, ps::PsClient* client)
    : stage_(std::move(stage)), client_(client), grads_(stage_->NewGrads()) {}

void Model::set_block_size(int64_t rows) {
  block_size_ = rows;
  stage_->set_block_rows(rows);
}

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

absl::StatusOr<double> Model::TrainStep(const data::Batch& batch) {
  HETERPS_RETURN_IF_ERROR(stage_->PullParameters());
  const float scale = 1.0f / static_cast<float>(batch.size);
  if (block_size_ <= 0) {
    InputActivations(batch, 0, batch.size, &input_);
    HETERPS_ASSIGN_OR_RETURN(const double sum,
                             stage_->ForwardBackward(0, input_, scale, nullptr, &grads_));
    HETERPS_RETURN_IF_ERROR(stage_->Push(grads_));
    return sum / batch.size;
  }
  step_grads_.resize(micro_batching_.replicas, stage_->NewStepGrads());
  for (StepGrads& g : step_grads_) g.Clear();
  step_losses_.clear();
  for (int r = 0; r < micro_batching_.replicas; ++r) {
    HETERPS_RETURN_IF_ERROR(RunShare(batch, r, static_cast<size_t>(r)));
  }
  if (step_grads_.size() == 1) step_grads_[0].MergeAll();
  for (const StepGrads& g : step_grads_) HETERPS_RETURN_IF_ERROR(stage_->Accumulate(g));
  HETERPS_RETURN_IF_ERROR(client_->Commit());
  double sum = 0;
  for (double loss : step_losses_) sum += loss;  // in block order
  return sum / batch.size;
}

absl::Status Model::RunShare(const data::Batch& batch, int replica, size_t slot) {
  const float scale = 1.0f / static_cast<float>(batch.size);
  // MicroBatches lists them replica by replica, in block order.
  for (const MicroBatch& part : MicroBatches(batch.size, block_size_, micro_batching_)) {
    if (part.replica != replica) continue;
    InputActivations(batch, part.begin, part.size, &input_);
    HETERPS_RETURN_IF_ERROR(
        stage_->ForwardBackward(0, input_, scale, nullptr, &grads_, &block_losses_).status());
    step_losses_.insert(step_losses_.end(), block_losses_.begin(), block_losses_.end());
    step_grads_[slot].Add(part.first_block, grads_);
  }
  return absl::OkStatus();
}

absl::Status Model::ComputeShare(const data::Batch& batch, int replica) {
  if (block_size_ <= 0 || replica < 0 || replica >= micro_batching_.replicas) {
    return absl::InvalidArgumentError(absl::StrCat("a step's share ", replica, " of ",
                                                   micro_batching_.replicas,
                                                   " needs a block size and a replica in range"));
  }
  HETERPS_RETURN_IF_ERROR(stage_->PullParameters());
  step_grads_.resize(1, stage_->NewStepGrads());
  step_grads_[0].Clear();
  step_losses_.clear();
  HETERPS_RETURN_IF_ERROR(RunShare(batch, replica, 0));
  if (micro_batching_.replicas == 1) step_grads_[0].MergeAll();
  return absl::OkStatus();
}

absl::Status Model::AccumulateShare() {
  if (step_grads_.empty()) return absl::FailedPreconditionError("no share computed");
  return stage_->Accumulate(step_grads_[0]);
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
