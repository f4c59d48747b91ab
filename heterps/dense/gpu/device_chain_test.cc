// The GPU chain, through the device layer, against the CPU chain: every dense layer's forward
// and backward (fc with each activation, concat and dot interactions, the logloss) to 1e-4
// relative. On the host twin here (label gpu-host); dense_cuda_test runs the same on a GPU.
#include <Eigen/Core>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/dense/cpu/cpu_backend.h"
#include "heterps/dense/gpu/chain_checks.h"
#include "heterps/dense/gpu/device_backend.h"

namespace heterps::dense {
namespace {

std::unique_ptr<DenseBackend> Twin(int64_t budget = 0) {
  BackendOptions options;
  options.memory_budget_bytes = budget;
  auto backend = NewGpuBackend("twin:0", options);
  EXPECT_TRUE(backend.ok()) << backend.status();
  return *std::move(backend);
}

// Eigen allocates alike in every target's units and in this (g++) one: where they differed, a
// matrix allocated by g++'s code and freed by nvcc's corrupted the heap on a GPU.
TEST(DeviceChainTest, EveryTargetAllocatesMatricesAlike) {
  const EigenLayout here{EIGEN_DEFAULT_ALIGN_BYTES, EIGEN_MAX_STATIC_ALIGN_BYTES};
  EXPECT_TRUE(twin::EigenLayoutOfTarget() == here);
  // A build without CUDA has no nvcc units to compare (and the twin's were compared above).
  const EigenLayout nvcc = cuda::EigenLayoutOfTarget();
  if (nvcc.heap_align != 0) {
    EXPECT_EQ(nvcc.heap_align, here.heap_align);
    EXPECT_EQ(nvcc.static_align, here.static_align);
  }
}

TEST(DeviceChainTest, DlrmTowerMatchesTheCpu) {
  const config::ModelSpec spec = testing::Spec("examples/models/dlrm-small.yaml");
  auto backend = Twin();
  // The bottom MLP (its input the raw features), and the dot interaction to the loss.
  testing::ExpectChainsAgree(spec, spec.FindLayer("bottom.0"), spec.FindLayer("bottom.1"),
                             backend.get());
  testing::ExpectChainsAgree(spec, spec.FindLayer("interact"),
                             static_cast<int>(spec.layers.size()) - 1, backend.get());
  testing::ExpectChainsAgree(spec, spec.FindLayer("bottom.0"),
                             static_cast<int>(spec.layers.size()) - 1, backend.get());
  const DeviceStats stats = backend->stats();
  EXPECT_GT(stats.host_to_device_bytes, 0);
  EXPECT_GT(stats.device_to_host_bytes, 0);
  EXPECT_GT(stats.peak_bytes, 0);
}

TEST(DeviceChainTest, ConcatAndEveryActivationMatchTheCpu) {
  const config::ModelSpec spec = testing::Spec("tests/specs/every-dense-layer.yaml");
  auto backend = Twin();
  testing::ExpectChainsAgree(spec, spec.FindLayer("concat"),
                             static_cast<int>(spec.layers.size()) - 1, backend.get());
}

TEST(DeviceChainTest, TheBudgetIsEnforcedWithAClearError) {
  const config::ModelSpec spec = testing::Spec("examples/models/dlrm-small.yaml");
  auto backend = Twin(64 << 10);  // 64 KiB: not even the top MLP's parameters
  auto chain = backend->NewChain(spec, spec.FindLayer("interact"), spec.layers.size() - 1);
  EXPECT_EQ(chain.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(chain.status().message(), ::testing::HasSubstr("twin:0"));
}

}  // namespace
}  // namespace heterps::dense
