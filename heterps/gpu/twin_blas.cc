#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "heterps/gpu/blas.h"

namespace heterps::gpu {
namespace {

using Strided = Eigen::OuterStride<>;
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstView = Eigen::Map<const RowMajor, 0, Strided>;
using View = Eigen::Map<RowMajor, 0, Strided>;

class TwinBlas : public Blas {
 public:
  explicit TwinBlas(Device* device) : device_(device) {}

  absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                    int64_t ldc) override {
    return GemmBatched(trans_a, trans_b, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
  }

  absl::Status GemmBatched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                           const float* a, int64_t lda, int64_t stride_a, const float* b,
                           int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                           int64_t stride_c, int64_t batch) override {
    if (m == 0 || n == 0 || batch == 0) return absl::OkStatus();
    const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
    if (!Mine(a, (batch - 1) * stride_a + (a_rows - 1) * lda + a_cols) ||
        !Mine(b, (batch - 1) * stride_b + (b_rows - 1) * ldb + b_cols) ||
        !Mine(c, (batch - 1) * stride_c + (m - 1) * ldc + n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(device_->info().name, ": GEMM on memory that is not the device's"));
    }
    for (int64_t i = 0; i < batch; ++i) {
      const ConstView A(a + i * stride_a, a_rows, a_cols, Strided(lda));
      const ConstView B(b + i * stride_b, b_rows, b_cols, Strided(ldb));
      View C(c + i * stride_c, m, n, Strided(ldc));
      if (beta == 0) {
        C.setZero();
      } else if (beta != 1) {
        C *= beta;
      }
      if (trans_a && trans_b) {
        C.noalias() += alpha * A.transpose() * B.transpose();
      } else if (trans_a) {
        C.noalias() += alpha * A.transpose() * B;
      } else if (trans_b) {
        C.noalias() += alpha * A * B.transpose();
      } else {
        C.noalias() += alpha * A * B;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Linear(int64_t m, int64_t n, int64_t k, const float* x, const float* w,
                      const float* b, bool relu, float* y) override {
    if (absl::Status s = Gemm(false, true, m, n, k, 1, x, k, w, k, 0, y, n); !s.ok()) return s;
    if (m == 0 || n == 0) return absl::OkStatus();
    if (!Mine(b, n)) {
      return absl::InvalidArgumentError(
          absl::StrCat(device_->info().name, ": the bias is not the device's memory"));
    }
    View Y(y, m, n, Strided(n));
    Y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b, n);
    if (relu) Y = Y.cwiseMax(0.0f);
    return absl::OkStatus();
  }

 private:
  bool Mine(const float* p, int64_t floats) const {
    return device_->IsDeviceMemory(p, static_cast<size_t>(floats) * sizeof(float));
  }

  Device* const device_;
};

}  // namespace

std::unique_ptr<Blas> NewTwinBlas(Device* device) { return std::make_unique<TwinBlas>(device); }

}  // namespace heterps::gpu
