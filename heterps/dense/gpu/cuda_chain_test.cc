// The GPU chain on a real GPU (cuda:0) against the CPU chain: what device_chain_test checks
// on the host twin. Skipped where this build has no CUDA or this host no GPU.
#include "gtest/gtest.h"
#include "heterps/dense/gpu/chain_checks.h"
#include "heterps/dense/gpu/device_backend.h"

namespace heterps::dense {
namespace {

std::unique_ptr<DenseBackend> Gpu() {
  auto backend = NewGpuBackend("cuda:0", BackendOptions());
  if (!backend.ok()) return nullptr;
  return *std::move(backend);
}

TEST(CudaChainTest, EveryLayerMatchesTheCpu) {
  std::unique_ptr<DenseBackend> gpu = Gpu();
  if (gpu == nullptr) GTEST_SKIP() << "no GPU: " << NewGpuBackend("cuda:0", {}).status();
  const config::ModelSpec dlrm = testing::Spec("examples/models/dlrm-small.yaml");
  testing::ExpectChainsAgree(dlrm, dlrm.FindLayer("bottom.0"),
                             static_cast<int>(dlrm.layers.size()) - 1, gpu.get());
  const config::ModelSpec every = testing::Spec("tests/specs/every-dense-layer.yaml");
  testing::ExpectChainsAgree(every, every.FindLayer("concat"),
                             static_cast<int>(every.layers.size()) - 1, gpu.get());
}

}  // namespace
}  // namespace heterps::dense
