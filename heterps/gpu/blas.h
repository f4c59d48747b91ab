// Matrix products on a device's memory: cuBLASLt on a GPU (gpu/cuda/cuda_blas.cc), the CPU's dense
// math (Eigen) on the host twin (twin_blas.cc). Row-major matrices, one sample per row, as the
// dense layers hold them.
//
//   // y (n x out) = x (n x in) W^T + b, ReLU: an fc layer's forward, fused where the device can.
//   HETERPS_RETURN_IF_ERROR(blas->Linear(n, out, in, x, w, b, /*relu=*/true, y));
//
// Pointers are device memory of the Blas's device; the work runs on its stream. Errors name the
// device and the call.
//
// Thread safety: as the device's stream: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "heterps/gpu/device.h"

namespace heterps::gpu {

class Blas {
 public:
  virtual ~Blas() = default;
  // C (m x n) = alpha op(A) op(B) + beta C, where op(A) is m x k and op(B) k x n; A, B and C
  // row-major with leading dimensions lda, ldb and ldc.
  virtual absl::Status Gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                            float alpha, const float* a, int64_t lda, const float* b, int64_t ldb,
                            float beta, float* c, int64_t ldc) = 0;
  // `batch` such products, the i-th on A + i stride_a, B + i stride_b, C + i stride_c.
  virtual absl::Status GemmBatched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                   float alpha, const float* a, int64_t lda, int64_t stride_a,
                                   const float* b, int64_t ldb, int64_t stride_b, float beta,
                                   float* c, int64_t ldc, int64_t stride_c, int64_t batch) = 0;
  // y (m x n) = x (m x k) W^T + b, W n x k and b n floats, then max(0, .) with `relu`.
  virtual absl::Status Linear(int64_t m, int64_t n, int64_t k, const float* x, const float* w,
                              const float* b, bool relu, float* y) = 0;
};

// Eigen on the twin's memory (which is host memory the twin keeps apart). InvalidArgument for a
// pointer that is not the device's memory.
std::unique_ptr<Blas> NewTwinBlas(Device* device);

// cuBLASLt on a GPU's stream; `tf32`: TensorFloat-32 products (faster, less precise).
// Unavailable in a build without CUDA.
absl::StatusOr<std::unique_ptr<Blas>> NewCudaBlas(Device* device, bool tf32);

}  // namespace heterps::gpu
