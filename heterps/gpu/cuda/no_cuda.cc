// The CUDA device layer of a build without the CUDA toolkit: no GPUs.
#include "heterps/gpu/blas.h"
#include "heterps/gpu/cuda/cuda_device.h"

namespace heterps::gpu {

absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int index, const DeviceOptions&) {
  return absl::UnavailableError(
      "this build has no CUDA (the CUDA toolkit was not found when it was configured)");
}

std::vector<DeviceInfo> CudaDevices() { return {}; }

bool BuiltWithCuda() { return false; }

absl::StatusOr<std::unique_ptr<Blas>> NewCudaBlas(Device*, bool) {
  return absl::UnavailableError("this build has no CUDA (no cuBLASLt)");
}

}  // namespace heterps::gpu
