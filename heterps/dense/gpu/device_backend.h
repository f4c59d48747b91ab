// The dense backend of a GPU (device "cuda:N") and of its host twin ("twin:N"): segments of dense
// layers on a gpu::Device, their GEMMs on its gpu::Blas (device_segment.inl, one source built for
// both). docs/gpu.md.
//
//   HETERPS_ASSIGN_OR_RETURN(auto backend, NewGpuBackend("twin:0", BackendOptions()));
//
// Thread safety: as DenseBackend.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/dense/backend.h"
#include "heterps/gpu/blas.h"
#include "heterps/gpu/device.h"

namespace heterps::dense {

// Opens the device ("twin:N", "cuda:N") under options.memory_budget_bytes and its BLAS.
// InvalidArgument for another name; Unavailable for a GPU this host or build does not have.
absl::StatusOr<std::unique_ptr<DenseBackend>> NewGpuBackend(absl::string_view device,
                                                            const BackendOptions& options);

// The backend on an open device and its BLAS, per target (device_segment.inl).
namespace twin {
std::unique_ptr<DenseBackend> NewBackend(std::unique_ptr<gpu::Device> device,
                                         std::unique_ptr<gpu::Blas> blas);
}  // namespace twin
namespace cuda {
// Unavailable in a build without CUDA.
absl::StatusOr<std::unique_ptr<DenseBackend>> NewCudaBackend(std::unique_ptr<gpu::Device> device,
                                                             std::unique_ptr<gpu::Blas> blas);
}  // namespace cuda

}  // namespace heterps::dense
