// A CUDA GPU as a Device (device.h): cudaMalloc under the budget, pinned host memory, one stream,
// asynchronous copies. Built where the CUDA toolkit is found (HETERPS_CUDA); without it,
// no_cuda.cc answers that this build has none.
//
// Thread safety: as Device.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/gpu/device.h"

namespace heterps::gpu {

// GPU `index` of this host. Unavailable naming the reason (no driver, no such GPU, a build
// without CUDA).
absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int index, const DeviceOptions& options);

// Whether this build can run CUDA code at all.
bool BuiltWithCuda();

}  // namespace heterps::gpu
