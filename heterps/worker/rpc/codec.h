// Activations and their gradients to and from their wire form (worker.proto). Not part of the
// public API.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "heterps/worker/pipeline_replica.h"
#include "heterps/worker/rpc/worker.pb.h"
#include "heterps/worker/stage.h"

namespace heterps::worker::rpc {

void ToTensor(const Matrix<float>& m, wire::Tensor* out);
// InvalidArgument naming `what` unless the tensor has `rows` rows and whole float data.
absl::Status FromTensor(const wire::Tensor& t, int64_t rows, const char* what, Matrix<float>* out);

// A micro-batch into a Forward (header and payload: size, labels, keys, dense, vectors).
void EncodeForward(const ForwardHeader& header, const Activations& a, wire::Forward* out);
// Back, with every array's size checked against the sample count.
absl::Status DecodeForward(const wire::Forward& in, ForwardHeader* header, Activations* out);

// An answer into a Backward, and back (the gradients' rows checked against each other).
void EncodeAnswer(const AnswerView& answer, wire::Backward* out);
absl::Status DecodeAnswer(const wire::Backward& in, Answer* out);

// A message of the dense exchange among a stage's replicas into a DenseShare, and back (the data
// checked to be whole values).
void EncodeDense(const DenseMessage& message, wire::DenseShare* out);
absl::Status DecodeDense(const wire::DenseShare& in, DenseMessage* out);

}  // namespace heterps::worker::rpc
