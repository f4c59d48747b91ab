// The GPU tier's engine built for CUDA GPUs: nvcc, Thrust's CUDA backend.
#include "heterps/ps/gpu/tier_engine.inl"

namespace heterps::ps::cuda {

absl::StatusOr<std::unique_ptr<TierEngine>> NewCudaTierEngine(gpu::Device* device) {
  return std::unique_ptr<TierEngine>(std::make_unique<Engine>(device));
}

absl::StatusOr<double> RawGather(gpu::Device* device, int64_t rows, int64_t dim, int64_t n,
                                 int repeats) {
  return RawGatherImpl(device, rows, dim, n, repeats);
}

}  // namespace heterps::ps::cuda
