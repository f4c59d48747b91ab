#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/dense/gpu/device_backend.h"

namespace heterps::dense {

absl::StatusOr<std::unique_ptr<DenseBackend>> NewGpuBackend(absl::string_view name,
                                                            const BackendOptions& options) {
  gpu::DeviceOptions device_options;
  device_options.memory_budget_bytes = options.memory_budget_bytes;
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Device> device,
                           gpu::OpenDevice(name, device_options));
  if (device->info().emulated) {
    std::unique_ptr<gpu::Blas> blas = gpu::NewTwinBlas(device.get());
    return twin::NewBackend(std::move(device), std::move(blas));
  }
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Blas> blas,
                           gpu::NewCudaBlas(device.get(), options.tf32));
  return cuda::NewCudaBackend(std::move(device), std::move(blas));
}

}  // namespace heterps::dense
