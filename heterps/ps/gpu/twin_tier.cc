// The GPU tier's engine built for the host twin: g++, Thrust's OpenMP backend.
#include "heterps/ps/gpu/tier_engine.inl"

namespace heterps::ps::twin {

std::unique_ptr<TierEngine> NewTierEngine(gpu::Device* device) {
  return std::make_unique<Engine>(device);
}

absl::StatusOr<double> RawGather(gpu::Device* device, int64_t rows, int64_t dim, int64_t n,
                                 int repeats) {
  return RawGatherImpl(device, rows, dim, n, repeats);
}

}  // namespace heterps::ps::twin
