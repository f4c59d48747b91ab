// The dense backend of a GPU (device "cuda:N") and of its host twin ("twin:N"): chains of dense
// layers on a gpu::Device, their GEMMs on its gpu::Blas (device_chain.inl, one source built for
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

// How Eigen allocates in a target's translation units: the alignment of its heap blocks and of its
// fixed-size objects, bytes. Every unit of a program must agree (CMakeLists.txt fixes both), or a
// matrix allocated in one unit and freed in another corrupts the heap.
struct EigenLayout {
  int heap_align = 0, static_align = 0;
  bool operator==(const EigenLayout& o) const {
    return heap_align == o.heap_align && static_align == o.static_align;
  }
};

// The backend on an open device and its BLAS, per target (device_chain.inl).
namespace twin {
std::unique_ptr<DenseBackend> NewBackend(std::unique_ptr<gpu::Device> device,
                                         std::unique_ptr<gpu::Blas> blas);
EigenLayout EigenLayoutOfTarget();
}  // namespace twin
namespace cuda {
// Unavailable in a build without CUDA.
absl::StatusOr<std::unique_ptr<DenseBackend>> NewCudaBackend(std::unique_ptr<gpu::Device> device,
                                                             std::unique_ptr<gpu::Blas> blas);
// All zeros in a build without CUDA.
EigenLayout EigenLayoutOfTarget();
}  // namespace cuda

}  // namespace heterps::dense
