#include "heterps/dense/cpu/layers.h"

#include <algorithm>
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

namespace {

// The dot interaction's two products, per sample, in register blocks: kRows rows of the result
// by kCols columns, each block's kRows x kCols sums held in the vector registers (8 of AVX2's for
// float) while the shared dimension streams through. Operands are copied into zero-padded buffers
// first, so that every block is whole.
constexpr int64_t kRows = 4, kCols = 16;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

// c (rows x cols, stride ldc) = a (rows x depth, stride lda) b (depth x cols, stride ldb), for
// rows and cols multiples of the block; blocks whose every column lies at or left of their first
// row (`upper`: the strict upper triangle is all that is wanted) are skipped. Each sum runs over
// the depth in order.
template <typename T>
void BlockProduct(const T* a, int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t rows,
                  int64_t cols, int64_t depth, bool upper) {
  for (int64_t i0 = 0; i0 < rows; i0 += kRows) {
    for (int64_t j0 = upper ? (i0 + 1) / kCols * kCols : 0; j0 < cols; j0 += kCols) {
      using Block = Eigen::Array<T, kCols, 1>;
      Block acc[kRows];
      for (Block& block : acc) block.setZero();
      for (int64_t d = 0; d < depth; ++d) {
        const Block brow = Eigen::Map<const Block>(b + d * ldb + j0);
        for (int64_t q = 0; q < kRows; ++q) acc[q] += a[(i0 + q) * lda + d] * brow;
      }
      for (int64_t q = 0; q < kRows; ++q) Eigen::Map<Block>(c + (i0 + q) * ldc + j0) = acc[q];
    }
  }
}

}  // namespace

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
  // Per sample, the Gram matrix of its n vectors (z times z transposed, its rows and columns
  // padded with zeros to whole blocks); its strict upper triangle, row by row.
  const int64_t n = vectors_ + 1, rows = RoundUp(n, kRows), cols = RoundUp(n, kCols);
  const int64_t pairs = n * (n - 1) / 2;
  scratch_.assign(static_cast<size_t>(rows * dim_ + dim_ * cols + rows * cols), T(0));
  T* z = scratch_.data();      // rows x dim
  T* zt = z + rows * dim_;     // dim x cols
  T* gram = zt + dim_ * cols;  // rows x cols
  index_.clear();              // [pair]: its place in gram
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) index_.push_back(static_cast<int32_t>(i * cols + j));
  }
  for (int64_t r = 0; r < batch; ++r) {
    std::copy_n(dense.row(r).data(), dim_, z);
    std::copy_n(vectors.row(r).data(), vectors_ * dim_, z + dim_);
    for (int64_t c = 0; c < dim_; ++c) {
      for (int64_t j = 0; j < n; ++j) zt[c * cols + j] = z[j * dim_ + c];
    }
    BlockProduct(z, dim_, zt, cols, gram, cols, rows, cols, dim_, /*upper=*/true);
    T* o = out->row(r).data() + width_;
    for (int64_t k = 0; k < pairs; ++k) o[k] = gram[index_[k]];
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
  // d<z_i, z_j> = g_ij: dz = s z with s the symmetric G + G^T of the upper-triangular gradients
  // G (zero diagonal), each dz_i summed over j in order. Padded as Forward pads.
  const int64_t n = vectors_ + 1, rows = RoundUp(n, kRows), dims = RoundUp(dim_, kCols);
  const int64_t pairs = n * (n - 1) / 2;
  scratch_.assign(static_cast<size_t>(pairs + 1 + rows * n + n * dims + rows * dims), T(0));
  T* g = scratch_.data();  // the sample's pair gradients, then a zero
  T* s = g + pairs + 1;    // rows x n
  T* z = s + rows * n;     // n x dims
  T* dz = z + n * dims;    // rows x dims
  index_.assign(static_cast<size_t>(n * n), static_cast<int32_t>(pairs));  // [i * n + j]: in g
  for (int64_t i = 0, k = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j, ++k) index_[i * n + j] = index_[j * n + i] = k;
  }
  for (int64_t r = 0; r < batch; ++r) {
    std::copy_n(d_out.row(r).data() + width_, pairs, g);
    for (int64_t k = 0; k < n * n; ++k) s[k] = g[index_[k]];
    std::copy_n(dense_->row(r).data(), dim_, z);
    const T* e = vectors_in_->row(r).data();
    if (dims == dim_) {
      std::copy_n(e, vectors_ * dim_, z + dims);
    } else {
      for (int64_t j = 1; j < n; ++j) std::copy_n(e + (j - 1) * dim_, dim_, z + j * dims);
    }
    BlockProduct(s, n, z, dims, dz, dims, rows, dims, n, /*upper=*/false);
    T* d = d_dense->row(r).data();
    for (int64_t c = 0; c < dim_; ++c) d[c] += dz[c];
    T* v = d_vectors->row(r).data();
    if (dims == dim_) {
      std::copy_n(dz + dims, vectors_ * dim_, v);
    } else {
      for (int64_t i = 1; i < n; ++i) v = std::copy_n(dz + i * dims, dim_, v);
    }
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
