#include "heterps/dense/cpu/layers.h"

#include <cmath>

namespace heterps::dense {
namespace {

template <typename T>
using ConstMap = Eigen::Map<const Matrix<T>>;
template <typename T>
using Map = Eigen::Map<Matrix<T>>;
template <typename T>
using RowVector = Eigen::Matrix<T, 1, Eigen::Dynamic>;

}  // namespace

template <typename T>
void FcLayer<T>::Forward(const T* params, const Matrix<T>& x, Matrix<T>* y) {
  const ConstMap<T> w(params, out_, in_);
  const Eigen::Map<const RowVector<T>> b(params + out_ * in_, out_);
  x_ = &x;
  y_ = y;
  y->noalias() = x * w.transpose();
  y->rowwise() += b;
  switch (activation_) {
    case config::Activation::kNone:
      break;
    case config::Activation::kRelu:
      *y = y->cwiseMax(T(0));
      break;
    case config::Activation::kSigmoid:
      *y = (T(1) / (T(1) + (-y->array()).exp())).matrix();
      break;
  }
}

template <typename T>
void FcLayer<T>::Backward(const T* params, Matrix<T>* dy, Matrix<T>* dx, T* grads) {
  const ConstMap<T> w(params, out_, in_);
  // dy becomes dz, the gradient of the pre-activation (coefficient-wise: no aliasing).
  switch (activation_) {
    case config::Activation::kNone:
      break;
    case config::Activation::kRelu:  // y > 0 exactly where z > 0
      dy->array() = (y_->array() > T(0)).select(dy->array(), T(0));
      break;
    case config::Activation::kSigmoid:  // y = s(z), s' = s (1 - s)
      dy->array() *= y_->array() * (T(1) - y_->array());
      break;
  }
  const Matrix<T>& dz = *dy;
  Map<T> dw(grads, out_, in_);
  Eigen::Map<RowVector<T>> db(grads + out_ * in_, out_);
  dw.noalias() += dz.transpose() * *x_;
  db += dz.colwise().sum();
  if (dx != nullptr) dx->noalias() = dz * w;
}

template <typename T>
int64_t InteractionLayer<T>::out() const {
  if (op_ == config::InteractionOp::kConcat) return width_ + vectors_ * dim_;
  const int64_t n = vectors_ + 1;
  return width_ + n * (n - 1) / 2;
}

template <typename T>
void InteractionLayer<T>::Gather(int64_t r) {
  z_.resize(vectors_ + 1, dim_);
  z_.row(0) = dense_->row(r);
  z_.bottomRows(vectors_) = ConstMap<T>(vectors_in_->row(r).data(), vectors_, dim_);
}

template <typename T>
void InteractionLayer<T>::Forward(const Matrix<T>& dense, const Matrix<T>& vectors,
                                  Matrix<T>* out) {
  const int64_t batch = dense.rows();
  out->resize(batch, this->out());
  out->leftCols(width_) = dense;
  if (op_ == config::InteractionOp::kConcat) {
    out->rightCols(vectors_ * dim_) = vectors;
    return;
  }
  dense_ = &dense;
  vectors_in_ = &vectors;
  const int64_t n = vectors_ + 1;
  // Per sample, the Gram matrix of its n vectors; its strict upper triangle, row by row.
  gram_.resize(n, n);
  for (int64_t r = 0; r < batch; ++r) {
    Gather(r);
    gram_.noalias() = z_ * z_.transpose();
    int64_t k = width_;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < n; ++j) (*out)(r, k++) = gram_(i, j);
    }
  }
}

template <typename T>
void InteractionLayer<T>::Backward(const Matrix<T>& d_out, Matrix<T>* d_dense,
                                   Matrix<T>* d_vectors) {
  const int64_t batch = d_out.rows();
  *d_dense = d_out.leftCols(width_);
  if (op_ == config::InteractionOp::kConcat) {
    *d_vectors = d_out.rightCols(vectors_ * dim_);
    return;
  }
  d_vectors->resize(batch, vectors_ * dim_);
  const int64_t n = vectors_ + 1;
  gram_.resize(n, n);
  for (int64_t r = 0; r < batch; ++r) {
    Gather(r);
    // d<z_i, z_j> = g_ij: dz = (G + G^T) z with G the upper-triangular gradients; gram_ holds
    // the symmetric G + G^T.
    int64_t k = width_;
    for (int64_t i = 0; i < n; ++i) {
      gram_(i, i) = 0;
      for (int64_t j = i + 1; j < n; ++j) gram_(i, j) = gram_(j, i) = d_out(r, k++);
    }
    dz_.noalias() = gram_ * z_;
    d_dense->row(r) += dz_.row(0);
    Map<T>(d_vectors->row(r).data(), vectors_, dim_) = dz_.bottomRows(vectors_);
  }
}

template <typename T>
T LoglossSum(const Matrix<T>& logits, const T* labels, T scale, Matrix<T>* d_logits) {
  const int64_t batch = logits.rows();
  d_logits->resize(batch, 1);
  T total = 0;
  for (int64_t r = 0; r < batch; ++r) {
    const T z = logits(r, 0), y = labels[r];
    // log(1 + exp(z)) without overflow.
    const T softplus = z > T(0) ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
    total += softplus - y * z;
    const T p = T(1) / (T(1) + std::exp(-z));
    (*d_logits)(r, 0) = (p - y) * scale;
  }
  return total;
}

template <typename T>
T Logloss(const Matrix<T>& logits, const T* labels, Matrix<T>* d_logits) {
  const T batch = static_cast<T>(logits.rows());
  return LoglossSum(logits, labels, T(1) / batch, d_logits) / batch;
}

template class FcLayer<float>;
template class FcLayer<double>;
template class InteractionLayer<float>;
template class InteractionLayer<double>;
template float LoglossSum<float>(const Matrix<float>&, const float*, float, Matrix<float>*);
template double LoglossSum<double>(const Matrix<double>&, const double*, double, Matrix<double>*);
template float Logloss<float>(const Matrix<float>&, const float*, Matrix<float>*);
template double Logloss<double>(const Matrix<double>&, const double*, Matrix<double>*);

}  // namespace heterps::dense
