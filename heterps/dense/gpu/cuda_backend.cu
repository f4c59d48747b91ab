// The device chain built for CUDA GPUs: nvcc, Thrust's CUDA backend, cuBLASLt.
#include "heterps/dense/gpu/device_chain.inl"

namespace heterps::dense::cuda {

absl::StatusOr<std::unique_ptr<DenseBackend>> NewCudaBackend(std::unique_ptr<gpu::Device> device,
                                                             std::unique_ptr<gpu::Blas> blas) {
  return NewBackend(std::move(device), std::move(blas));
}

EigenLayout EigenLayoutOfTarget() {
  return {EIGEN_DEFAULT_ALIGN_BYTES, EIGEN_MAX_STATIC_ALIGN_BYTES};
}

}  // namespace heterps::dense::cuda
