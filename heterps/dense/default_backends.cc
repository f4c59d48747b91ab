#include "heterps/dense/default_backends.h"

#include "absl/strings/str_cat.h"
#include "heterps/dense/cpu/cpu_backend.h"
#include "heterps/dense/gpu/device_backend.h"

namespace heterps::dense {

BackendRegistry DefaultBackends() {
  BackendRegistry registry;
  registry.Register(
      "cpu", [](int index, const BackendOptions&) -> absl::StatusOr<std::unique_ptr<DenseBackend>> {
        if (index != 0) {
          return absl::InvalidArgumentError("device cpu: this host's cores are cpu (or cpu:0)");
        }
        return NewCpuBackend();
      });
  for (const char* kind : {"twin", "cuda"}) {
    registry.Register(kind, [kind](int index, const BackendOptions& options) {
      return NewGpuBackend(absl::StrCat(kind, ":", index), options);
    });
  }
  return registry;
}

}  // namespace heterps::dense
