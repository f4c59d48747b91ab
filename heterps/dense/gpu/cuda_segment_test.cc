// The GPU segment on a real GPU (cuda:0) against the CPU segment: what device_segment_test checks
// on the host twin. Skipped where this build has no CUDA or this host no GPU.
#include "gtest/gtest.h"
#include "heterps/dense/gpu/device_backend.h"
#include "heterps/dense/gpu/segment_checks.h"

namespace heterps::dense {
namespace {

std::unique_ptr<DenseBackend> Gpu() {
  auto backend = NewGpuBackend("cuda:0", BackendOptions());
  if (!backend.ok()) return nullptr;
  return *std::move(backend);
}

TEST(CudaSegmentTest, EveryLayerMatchesTheCpu) {
  std::unique_ptr<DenseBackend> gpu = Gpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU: " << NewGpuBackend("cuda:0", {}).status();
  const config::ModelSpec dlrm = testing::Spec("examples/models/dlrm-small.yaml");
  testing::ExpectSegmentsAgree(dlrm, dlrm.FindLayer("bottom.0"),
                               static_cast<int>(dlrm.layers.size()) - 1, gpu.get());
  const config::ModelSpec every = testing::Spec("tests/specs/every-dense-layer.yaml");
  testing::ExpectSegmentsAgree(every, every.FindLayer("concat"),
                               static_cast<int>(every.layers.size()) - 1, gpu.get());
}

}  // namespace
}  // namespace heterps::dense
