#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "heterps/gpu/cuda/cuda_device.h"
#include "heterps/gpu/device.h"
#include "heterps/gpu/twin_device.h"

namespace heterps::gpu {

absl::StatusOr<std::unique_ptr<Device>> OpenDevice(absl::string_view name,
                                                   const DeviceOptions& options) {
  const size_t colon = name.find(':');
  int index = -1;
  if (colon == absl::string_view::npos || !absl::SimpleAtoi(name.substr(colon + 1), &index) ||
      index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device '", name, "': expected twin:N or cuda:N"));
  }
  const absl::string_view kind = name.substr(0, colon);
  if (kind == "twin") return NewTwinDevice(index, options);
  if (kind == "cuda") return OpenCudaDevice(index, options);
  return absl::InvalidArgumentError(
      absl::StrCat("device '", name, "': not a GPU (expected twin:N or cuda:N)"));
}

}  // namespace heterps::gpu
