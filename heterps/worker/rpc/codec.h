// Activations and their gradients to and from their wire form (runtime.proto). Not part of the
// public API.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "heterps/worker/rpc/runtime.pb.h"
#include "heterps/worker/stage.h"

namespace heterps::worker::rpc {

void ToTensor(const Matrix<float>& m, runtime::Tensor* out);
// InvalidArgument naming `what` unless the tensor has `rows` rows and whole float data.
absl::Status FromTensor(const runtime::Tensor& t, int64_t rows, const char* what,
                        Matrix<float>* out);

// The activations into a Forward's payload (size, labels, keys, dense, vectors).
void EncodeActivations(const Activations& a, runtime::Forward* out);
// Back, with every array's size checked against the sample count.
absl::Status DecodeActivations(const runtime::Forward& in, Activations* out);

void EncodeGrads(const ActivationGrads& g, runtime::Backward* out);
absl::Status DecodeGrads(const runtime::Backward& in, int64_t rows, ActivationGrads* out);

}  // namespace heterps::worker::rpc
