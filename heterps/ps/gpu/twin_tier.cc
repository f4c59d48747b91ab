// The GPU tier's engine built for the host twin: g++, Thrust's OpenMP backend.
#include "heterps/ps/gpu/tier_engine.inl"

namespace heterps::ps::twin {

std::unique_ptr<TierEngine> NewTierEngine(gpu::Device* device) {
  return std::make_unique<Engine>(device);
}

}  // namespace heterps::ps::twin
