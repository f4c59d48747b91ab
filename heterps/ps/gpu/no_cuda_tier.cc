// The GPU tier's CUDA engine in a build without the CUDA toolkit.
#include "heterps/ps/gpu/tier_engine.h"

namespace heterps::ps::cuda {

absl::StatusOr<std::unique_ptr<TierEngine>> NewCudaTierEngine(gpu::Device*) {
  return absl::UnavailableError("this build has no CUDA");
}

absl::StatusOr<double> RawGather(gpu::Device*, int64_t, int64_t, int64_t, int) {
  return absl::UnavailableError("this build has no CUDA");
}

}  // namespace heterps::ps::cuda
