#include "heterps/worker/rpc/codec.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"

namespace heterps::worker::rpc {
namespace {

template <typename T>
std::string Bytes(const T* data, size_t n) {
  return std::string(reinterpret_cast<const char*>(data), n * sizeof(T));
}

// `bytes` as exactly `n` values of T into `out`.
template <typename T>
absl::Status Copy(const std::string& bytes, size_t n, const char* what, std::vector<T>* out) {
  // By division: a count from a peer times the size may overflow.
  if (bytes.size() % sizeof(T) != 0 || bytes.size() / sizeof(T) != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bytes.size(), " bytes where ", n,
                                                   " values of ", sizeof(T), " bytes belong"));
  }
  out->resize(n);
  if (n > 0) std::memcpy(out->data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

}  // namespace

void ToTensor(const Matrix<float>& m, wire::Tensor* out) {
  out->set_rows(m.rows());
  out->set_cols(m.cols());
  out->set_data(Bytes(m.data(), static_cast<size_t>(m.size())));
}

absl::Status FromTensor(const wire::Tensor& t, int64_t rows, const char* what, Matrix<float>* out) {
  // rows x cols from a peer: compared with the bytes by division, so that no product overflows.
  const size_t bytes = t.data().size();
  const bool whole = t.rows() == rows && t.cols() >= 0 && bytes % sizeof(float) == 0 &&
                     (t.rows() == 0 || t.cols() == 0
                          ? bytes == 0
                          : bytes / sizeof(float) % static_cast<size_t>(t.rows()) == 0 &&
                                bytes / sizeof(float) / static_cast<size_t>(t.rows()) ==
                                    static_cast<size_t>(t.cols()));
  if (!whole) {
    return absl::InvalidArgumentError(absl::StrCat("micro-batch ", what, ": ", t.rows(), " x ",
                                                   t.cols(), " in ", t.data().size(),
                                                   " bytes, for ", rows, " samples"));
  }
  out->resize(t.rows(), t.cols());
  if (bytes > 0) std::memcpy(out->data(), t.data().data(), bytes);
  return absl::OkStatus();
}

void EncodeForward(const ForwardHeader& header, const Activations& a, wire::Forward* out) {
  out->set_step(header.step);
  out->set_id(header.id);
  out->set_order(header.order);
  out->set_train(header.train);
  out->set_scale(header.scale);
  out->set_size(a.size);
  out->set_labels(Bytes(a.labels.data(), a.labels.size()));
  out->set_keys(Bytes(a.keys.data(), a.keys.size()));
  out->set_offsets(Bytes(a.offsets.data(), a.offsets.size()));
  ToTensor(a.dense, out->mutable_dense());
  ToTensor(a.vectors, out->mutable_vectors());
}

absl::Status DecodeForward(const wire::Forward& in, ForwardHeader* header, Activations* out) {
  *header = {in.step(), in.id(), in.order(), in.train(), in.scale()};
  if (in.size() < 0) return absl::InvalidArgumentError("micro-batch of a negative size");
  out->size = in.size();
  const size_t n = static_cast<size_t>(in.size());
  HETERPS_RETURN_IF_ERROR(
      Copy(in.labels(), in.labels().empty() ? 0 : n, "micro-batch labels", &out->labels));
  // The keys' shape is checked where they are looked up (Stage), against the model's slots.
  HETERPS_RETURN_IF_ERROR(
      Copy(in.keys(), in.keys().size() / sizeof(uint64_t), "micro-batch keys", &out->keys));
  HETERPS_RETURN_IF_ERROR(Copy(in.offsets(), in.offsets().size() / sizeof(int32_t),
                               "micro-batch offsets", &out->offsets));
  HETERPS_RETURN_IF_ERROR(FromTensor(in.dense(), in.size(), "dense activations", &out->dense));
  return FromTensor(in.vectors(), in.size(), "embedding vectors", &out->vectors);
}

void EncodeAnswer(const AnswerView& answer, wire::Backward* out) {
  out->set_id(answer.id);
  if (!answer.error.empty()) {
    out->set_error(answer.error);
    return;
  }
  out->set_loss_sum(answer.loss_sum);
  for (double loss : answer.block_losses) out->add_block_loss(loss);
  if (answer.grads != nullptr) {
    ToTensor(answer.grads->dense, out->mutable_dense());
    ToTensor(answer.grads->vectors, out->mutable_vectors());
  }
  if (!answer.probabilities.empty()) {
    out->set_probabilities(Bytes(answer.probabilities.data(), answer.probabilities.size()));
  }
}

absl::Status DecodeAnswer(const wire::Backward& in, Answer* out) {
  out->id = in.id();
  out->loss_sum = in.loss_sum();
  out->block_losses.assign(in.block_loss().begin(), in.block_loss().end());
  out->error = in.error();
  if (!out->error.empty()) return absl::OkStatus();
  const size_t floats = in.probabilities().size() / sizeof(float);
  HETERPS_RETURN_IF_ERROR(
      Copy(in.probabilities(), floats, "micro-batch probabilities", &out->probabilities));
  if (!in.has_dense()) return absl::OkStatus();
  const int64_t rows = in.dense().rows();
  HETERPS_RETURN_IF_ERROR(FromTensor(in.dense(), rows, "dense gradients", &out->grads.dense));
  if (in.vectors().cols() == 0 && in.vectors().rows() == 0) {
    out->grads.vectors.resize(rows, 0);
    return absl::OkStatus();
  }
  return FromTensor(in.vectors(), rows, "vector gradients", &out->grads.vectors);
}

void EncodeDense(const DenseMessage& message, wire::DenseShare* out) {
  out->set_step(message.step);
  out->set_from(message.from);
  switch (message.kind) {
    case DenseMessage::Kind::kGradients:
      out->set_data(Bytes(message.grads.data(), message.grads.size()));
      for (int part : message.parts) out->add_parts(part);
      break;
    case DenseMessage::Kind::kValues:
      out->set_values(true);
      out->set_data(Bytes(message.values.data(), message.values.size()));
      break;
    case DenseMessage::Kind::kAbort:
      out->set_abort(message.error);
      break;
  }
}

absl::Status DecodeDense(const wire::DenseShare& in, DenseMessage* out) {
  out->step = in.step();
  out->from = in.from();
  if (!in.abort().empty()) {
    out->kind = DenseMessage::Kind::kAbort;
    out->error = in.abort();
    return absl::OkStatus();
  }
  if (in.values()) {
    out->kind = DenseMessage::Kind::kValues;
    return Copy(in.data(), in.data().size() / sizeof(float), "dense exchange values", &out->values);
  }
  out->kind = DenseMessage::Kind::kGradients;
  out->parts.assign(in.parts().begin(), in.parts().end());
  return Copy(in.data(), in.data().size() / sizeof(double), "dense exchange sums", &out->grads);
}

}  // namespace heterps::worker::rpc
