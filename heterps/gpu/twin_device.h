// The host twin of a GPU: device memory is host memory it allocates and keeps apart (every copy
// and every kernel launch checks that its device side is memory of this device), under a byte
// budget; the stream's work runs as it is enqueued, in order; every copy is counted as the PCIe
// bytes a GPU would move. Device "twin:N" (docs/gpu.md). For tests and for `--gpu-emulate`:
// it is as fast as the host's cores, not as a GPU.
//
// Thread safety: as Device.
#pragma once

#include <memory>

#include "heterps/gpu/device.h"

namespace heterps::gpu {

// The twin with index `index`; its memory budget is options.memory_budget_bytes or 16 GiB.
std::unique_ptr<Device> NewTwinDevice(int index, const DeviceOptions& options);

}  // namespace heterps::gpu
