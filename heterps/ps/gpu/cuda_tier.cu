// The GPU tier's engine built for CUDA GPUs: nvcc, Thrust's CUDA backend.
#include "heterps/ps/gpu/tier_engine.inl"

namespace heterps::ps::cuda {

absl::StatusOr<std::unique_ptr<TierEngine>> NewCudaTierEngine(gpu::Device* device) {
  return std::unique_ptr<TierEngine>(std::make_unique<Engine>(device));
}

}  // namespace heterps::ps::cuda
