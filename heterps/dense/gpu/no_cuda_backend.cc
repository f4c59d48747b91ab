// The CUDA dense backend of a build without the CUDA toolkit.
#include "heterps/dense/gpu/device_backend.h"

namespace heterps::dense::cuda {

absl::StatusOr<std::unique_ptr<DenseBackend>> NewCudaBackend(std::unique_ptr<gpu::Device>,
                                                             std::unique_ptr<gpu::Blas>) {
  return absl::UnavailableError("this build has no CUDA");
}

EigenLayout EigenLayoutOfTarget() { return {}; }

}  // namespace heterps::dense::cuda
