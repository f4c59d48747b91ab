// cuBLASLt behind gpu::Blas. Row-major products are computed as their column-major transposes:
// C (m x n, row-major) is C^T (n x m, column-major) = op(B)^T op(A)^T, each row-major operand being
// its own transpose when read column-major, so no data moves.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "heterps/gpu/blas.h"

namespace heterps::gpu {
namespace {

constexpr size_t kWorkspaceBytes = 32 << 20;

absl::Status LtError(const Device* device, absl::string_view what, cublasStatus_t status) {
  return absl::InternalError(absl::StrCat(device->info().name, ": cuBLASLt ", what, ": ",
                                          cublasLtGetStatusString(status)));
}

// Owns the cuBLASLt descriptors of one call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  ~Descriptors() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

class CudaBlas : public Blas {
 public:
  CudaBlas(Device* device, bool tf32) : device_(device), tf32_(tf32) {}
  ~CudaBlas() override {
    if (handle_ != nullptr) cublasLtDestroy(handle_);
    if (workspace_ != nullptr) device_->Free(workspace_);
  }

  absl::Status Init() {
    if (cublasStatus_t s = cublasLtCreate(&handle_); s != CUBLAS_STATUS_SUCCESS) {
      return LtError(device_, "create", s);
    }
    absl::StatusOr<void*> workspace = device_->Allocate(kWorkspaceBytes);
    if (!workspace.ok()) return workspace.status();
    workspace_ = *workspace;
    return absl::OkStatus();
  }

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
    // Column-major: D (n x m) = op1(B') op2(A') with B' = B read column-major, and so on.
    Descriptors d;
    const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;  // B as stored, row-major
    const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
    if (absl::Status s = Make(&d, trans_b, trans_a, CUBLASLT_EPILOGUE_DEFAULT, nullptr); !s.ok()) {
      return s;
    }
    if (absl::Status s = Layout(&d.a, b_cols, b_rows, ldb, batch, stride_b); !s.ok()) return s;
    if (absl::Status s = Layout(&d.b, a_cols, a_rows, lda, batch, stride_a); !s.ok()) return s;
    if (absl::Status s = Layout(&d.c, n, m, ldc, batch, stride_c); !s.ok()) return s;
    return Run(d, alpha, b, a, beta, c);
  }

  absl::Status Linear(int64_t m, int64_t n, int64_t k, const float* x, const float* w,
                      const float* bias, bool relu, float* y) override {
    if (m == 0 || n == 0) return absl::OkStatus();
    // y^T (n x m) = W' (k x n, transposed) x' (k x m), bias per row of y^T, ReLU fused.
    Descriptors d;
    if (absl::Status s = Make(&d, true, false,
                              relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS, bias);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = Layout(&d.a, k, n, k, 1, 0); !s.ok()) return s;
    if (absl::Status s = Layout(&d.b, k, m, k, 1, 0); !s.ok()) return s;
    if (absl::Status s = Layout(&d.c, n, m, n, 1, 0); !s.ok()) return s;
    return Run(d, 1.0f, w, x, 0.0f, y);
  }

 private:
  absl::Status Make(Descriptors* d, bool trans_first, bool trans_second,
                    cublasLtEpilogue_t epilogue, const float* bias) {
    const cublasComputeType_t compute = tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasStatus_t s = cublasLtMatmulDescCreate(&d->op, compute, CUDA_R_32F);
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(device_, "descriptor", s);
    const cublasOperation_t first = trans_first ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t second = trans_second ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSA, &first, sizeof(first));
    cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_TRANSB, &second, sizeof(second));
    if (epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
      cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                     sizeof(epilogue));
      cublasLtMatmulDescSetAttribute(d->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    }
    return absl::OkStatus();
  }

  absl::Status Layout(cublasLtMatrixLayout_t* layout, int64_t rows, int64_t cols, int64_t ld,
                      int64_t batch, int64_t stride) {
    cublasStatus_t s = cublasLtMatrixLayoutCreate(layout, CUDA_R_32F, rows, cols, ld);
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(device_, "layout", s);
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                       sizeof(count));
      cublasLtMatrixLayoutSetAttribute(*layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                       &stride, sizeof(stride));
    }
    return absl::OkStatus();
  }

  absl::Status Run(const Descriptors& d, float alpha, const float* first, const float* second,
                   float beta, float* out) {
    cublasStatus_t s = cublasLtMatmul(handle_, d.op, &alpha, first, d.a, second, d.b, &beta, out,
                                      d.c, out, d.c, nullptr, workspace_, kWorkspaceBytes,
                                      static_cast<cudaStream_t>(device_->stream()));
    if (s != CUBLAS_STATUS_SUCCESS) return LtError(device_, "matmul", s);
    return absl::OkStatus();
  }

  Device* const device_;
  const bool tf32_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Blas>> NewCudaBlas(Device* device, bool tf32) {
  auto blas = std::make_unique<CudaBlas>(device, tf32);
  if (absl::Status s = blas->Init(); !s.ok()) return s;
  return std::unique_ptr<Blas>(std::move(blas));
}

}  // namespace heterps::gpu
