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
  if (bytes.size() != n * sizeof(T)) {
    return absl::InvalidArgumentError(absl::StrCat("micro-batch ", what, ": ", bytes.size(),
                                                   " bytes where ", n * sizeof(T), " belong"));
  }
  out->resize(n);
  if (n > 0) std::memcpy(out->data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

}  // namespace

void ToTensor(const Matrix<float>& m, runtime::Tensor* out) {
  out->set_rows(m.rows());
  out->set_cols(m.cols());
  out->set_data(Bytes(m.data(), static_cast<size_t>(m.size())));
}

absl::Status FromTensor(const runtime::Tensor& t, int64_t rows, const char* what,
                        Matrix<float>* out) {
  const size_t floats = static_cast<size_t>(t.rows() * t.cols());
  if (t.rows() != rows || t.cols() < 0 || t.data().size() != floats * sizeof(float)) {
    return absl::InvalidArgumentError(absl::StrCat("micro-batch ", what, ": ", t.rows(), " x ",
                                                   t.cols(), " in ", t.data().size(),
                                                   " bytes, for ", rows, " samples"));
  }
  out->resize(t.rows(), t.cols());
  if (floats > 0) std::memcpy(out->data(), t.data().data(), t.data().size());
  return absl::OkStatus();
}

void EncodeActivations(const Activations& a, runtime::Forward* out) {
  out->set_size(a.size);
  out->set_labels(Bytes(a.labels.data(), a.labels.size()));
  out->set_keys(Bytes(a.keys.data(), a.keys.size()));
  ToTensor(a.dense, out->mutable_dense());
  ToTensor(a.vectors, out->mutable_vectors());
}

absl::Status DecodeActivations(const runtime::Forward& in, Activations* out) {
  out->size = in.size();
  const size_t n = static_cast<size_t>(in.size());
  HETERPS_RETURN_IF_ERROR(Copy(in.labels(), in.labels().empty() ? 0 : n, "labels", &out->labels));
  HETERPS_RETURN_IF_ERROR(
      Copy(in.keys(), in.keys().empty() ? 0 : n * data::kSparseSlots, "keys", &out->keys));
  HETERPS_RETURN_IF_ERROR(FromTensor(in.dense(), in.size(), "dense activations", &out->dense));
  return FromTensor(in.vectors(), in.size(), "embedding vectors", &out->vectors);
}

void EncodeGrads(const ActivationGrads& g, runtime::Backward* out) {
  ToTensor(g.dense, out->mutable_dense());
  ToTensor(g.vectors, out->mutable_vectors());
}

absl::Status DecodeGrads(const runtime::Backward& in, int64_t rows, ActivationGrads* out) {
  HETERPS_RETURN_IF_ERROR(FromTensor(in.dense(), rows, "dense gradients", &out->dense));
  return FromTensor(in.vectors(), rows, "vector gradients", &out->vectors);
}

}  // namespace heterps::worker::rpc
