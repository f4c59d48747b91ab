// The dense layers of a model on this host's cores, forward and backward on a mini-batch at once
// (Eigen matrix products, no per-sample loops in the products), templated on the scalar so that
// training runs in float and the gradient tests in double. The CPU backend (cpu_backend.h) runs
// chains of them, and they are the reference every other backend is checked against.
//
// A batch is a row-major matrix, one sample per row. Parameters are not owned by the layers: they
// arrive as one contiguous block per layer (the layout each layer documents), as the parameter
// server's dense table holds them, and gradients are added into a block of the same layout.
//
//   FcLayer<float> fc(13, 64, config::Activation::kRelu);
//   fc.Forward(params, x, &y);                 // remembers x and y
//   fc.Backward(params, &dy, &dx, grads);      // grads += dLoss/dparams; dx = dLoss/dx
//
// A layer remembers where the last Forward's inputs (and, for FcLayer, output) are, not a copy of
// them: they must stay alive and unchanged until its Backward. Output and gradient matrices are
// resized only when the batch size changes, so a layer that sees batches of one size allocates
// nothing after the first.
//
// Thread safety: a layer object is used by one thread at a time (it keeps the last forward's
// state); the same parameters may be read by several layer objects at once.
#pragma once

#include <cstdint>
#include <vector>

#include "Eigen/Core"
#include "heterps/config/model_spec.h"
#include "heterps/dense/matrix.h"

namespace heterps::dense {

// y = act(x W^T + b). Parameters: W (out x in, row-major), then b (out).
template <typename T>
class FcLayer {
 public:
  FcLayer(int64_t in, int64_t out, config::Activation activation)
      : in_(in), out_(out), activation_(activation) {}

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  int64_t num_params() const { return out_ * in_ + out_; }

  // x: batch x in. Writes y: batch x out. Both kept until Backward (the activation's derivative
  // is read off y).
  void Forward(const T* params, const Matrix<T>& x, Matrix<T>* y);
  // dy: batch x out, for the last Forward; it is consumed (overwritten with the gradient of the
  // pre-activation), which spares a buffer of its size. Writes dx (batch x in) unless it is null;
  // adds the parameters' gradients into `grads` (num_params values).
  void Backward(const T* params, Matrix<T>* dy, Matrix<T>* dx, T* grads);

 private:
  int64_t in_, out_;
  config::Activation activation_;
  const Matrix<T>* x_ = nullptr;  // the last forward's input and output
  const Matrix<T>* y_ = nullptr;
};

// Folds a dense vector d (width D) and V embedding vectors e_1..e_V (dim each) into one dense
// vector per sample. kConcat: [d, e_1, ..., e_V] (D + V dim). kDot (DLRM): with D == dim and
// z = (d, e_1, ..., e_V), [d, <z_i, z_j> for i < j in row-major order] (D + (V+1) V / 2). No
// parameters. A concat of vectors whose dims differ is a concat of one vector of all their floats
// (V = 1, dim = their floats).
template <typename T>
class InteractionLayer {
 public:
  InteractionLayer(config::InteractionOp op, int64_t dense_width, int64_t vectors, int64_t dim)
      : op_(op), width_(dense_width), vectors_(vectors), dim_(dim) {}

  int64_t out() const;

  // dense: batch x D; vectors: batch x (V dim), both kept until Backward. Writes out:
  // batch x out().
  void Forward(const Matrix<T>& dense, const Matrix<T>& vectors, Matrix<T>* out);
  // d_out: batch x out(), for the last Forward. Writes d_dense and d_vectors.
  void Backward(const Matrix<T>& d_out, Matrix<T>* d_dense, Matrix<T>* d_vectors);

 private:
  config::InteractionOp op_;
  int64_t width_, vectors_, dim_;
  const Matrix<T>* dense_ = nullptr;  // the last forward's inputs
  const Matrix<T>* vectors_in_ = nullptr;
  std::vector<T> scratch_;      // per-call buffers (layers.cc)
  std::vector<int32_t> index_;  // where each pair lies in them
};

// Binary cross-entropy of logits (batch x 1) against 0/1 labels, computed stably:
// log(1 + exp(z)) - y z per sample. Returns the sum over the batch; writes
// d_logits = scale * (sigmoid(z) - y), the gradient of scale times that sum. A micro-batch of a
// mini-batch of B samples passes scale = 1 / B, so that its gradients add up to the mini-batch
// mean's.
template <typename T>
T LoglossSum(const Matrix<T>& logits, const T* labels, T scale, Matrix<T>* d_logits);

// The mean over the batch: LoglossSum(logits, labels, 1 / batch, d_logits) / batch.
template <typename T>
T Logloss(const Matrix<T>& logits, const T* labels, Matrix<T>* d_logits);

}  // namespace heterps::dense
