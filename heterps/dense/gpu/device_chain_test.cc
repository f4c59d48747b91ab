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
#include "heterps/gpu/device.h"
#include "heterps/ps/optimizer.h"

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

// The device path: vectors a producer wrote into the chain's device memory give the run that the
// same vectors from host memory give (outputs, loss, every gradient, to the bit: the same code on
// the same device), and their gradient stays on the device.
TEST(DeviceChainTest, VectorsPlacedOnTheDeviceRunAsVectorsFromTheHost) {
  const config::ModelSpec spec = testing::Spec("examples/models/dlrm-small.yaml");
  auto backend = Twin();
  gpu::Device* device = backend->gpu_device();
  ASSERT_NE(device, nullptr);
  const int first = spec.FindLayer("bottom.0"), last = static_cast<int>(spec.layers.size()) - 1;
  auto chain = backend->NewChain(spec, first, last);
  ASSERT_TRUE(chain.ok()) << chain.status();
  DenseChain& c = **chain;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  std::vector<std::vector<float>> params, grads_host, grads_device;
  for (int64_t size : c.block_sizes()) {
    params.emplace_back(size);
    for (float& p : params.back()) p = normal(rng);
    grads_host.emplace_back(size, 0.0f);
    grads_device.emplace_back(size, 0.0f);
  }
  std::vector<const float*> blocks;
  for (const auto& p : params) blocks.push_back(p.data());
  ASSERT_TRUE(c.SetParameters(blocks).ok());
  const int64_t n = 37, cols = 26 * 16;
  Matrix<float> dense(n, 13), vectors(n, cols);
  for (float& x : absl::MakeSpan(dense.data(), dense.size())) x = normal(rng);
  for (float& x : absl::MakeSpan(vectors.data(), vectors.size())) x = normal(rng);
  std::vector<float> labels(n);
  for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<float>(i % 2);

  auto host_out = c.Forward(0, dense, vectors, true);
  ASSERT_TRUE(host_out.ok()) << host_out.status();
  auto placed = c.DeviceVectors(1, n, cols);
  ASSERT_TRUE(placed.ok()) << placed.status();
  ASSERT_TRUE(device->CopyToDevice(*placed, vectors.data(), vectors.size() * 4).ok());
  auto device_out = c.ForwardDeviceVectors(1, dense, true);
  ASSERT_TRUE(device_out.ok()) << device_out.status();
  EXPECT_EQ(**device_out, **host_out);
  auto host_loss = c.Loss(0, labels.data(), 0.5f), device_loss = c.Loss(1, labels.data(), 0.5f);
  ASSERT_TRUE(host_loss.ok() && device_loss.ok());
  EXPECT_EQ(*device_loss, *host_loss);

  auto pointers = [](std::vector<std::vector<float>>& g) {
    std::vector<float*> out;
    for (auto& b : g) out.push_back(b.data());
    return out;
  };
  const std::vector<float*> gh = pointers(grads_host), gd = pointers(grads_device);
  auto host_in = c.Backward(0, nullptr, true, gh);
  ASSERT_TRUE(host_in.ok()) << host_in.status();
  auto device_in = c.Backward(1, nullptr, true, gd);
  ASSERT_TRUE(device_in.ok()) << device_in.status();
  ASSERT_NE(host_in->vectors, nullptr);
  EXPECT_EQ(device_in->vectors, nullptr);
  ASSERT_NE(device_in->device_vectors, nullptr);
  EXPECT_TRUE(device->IsDeviceMemory(device_in->device_vectors, n * cols * 4));
  Matrix<float> d_vectors(n, cols);
  ASSERT_TRUE(device->CopyToHost(d_vectors.data(), device_in->device_vectors, n * cols * 4).ok());
  ASSERT_TRUE(device->Synchronize().ok());
  EXPECT_EQ(d_vectors, *host_in->vectors);
  EXPECT_EQ(*device_in->dense, *host_in->dense);
  EXPECT_EQ(grads_device, grads_host);

  // A forward of vectors not placed, or of other rows, is refused; so are device vectors where
  // the chain takes none, or on the host's CPU.
  EXPECT_EQ(c.ForwardDeviceVectors(1, dense, true).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(c.DeviceVectors(1, n + 1, cols).ok());
  EXPECT_THAT(c.ForwardDeviceVectors(1, dense, true).status().message(),
              ::testing::HasSubstr("37 dense rows for device vectors of 38 rows"));
  auto bottom = backend->NewChain(spec, first, spec.FindLayer("bottom.1"));
  ASSERT_TRUE(bottom.ok());
  EXPECT_EQ((*bottom)->DeviceVectors(0, n, cols).status().code(), absl::StatusCode::kUnimplemented);
  std::unique_ptr<DenseBackend> cpu = NewCpuBackend();
  EXPECT_EQ(cpu->gpu_device(), nullptr);
  auto on_cpu = cpu->NewChain(spec, first, last);
  ASSERT_TRUE(on_cpu.ok());
  EXPECT_EQ((*on_cpu)->DeviceVectors(0, n, cols).status().code(), absl::StatusCode::kUnimplemented);
}

// Held parameters: the chain's own updates on the device give what the servers' updates of the
// gradients it would have given back give (ps::ApplyUpdate on 0 + dW), to the bit, for every
// optimizer over several steps; no parameter's gradient crosses to the host.
TEST(DeviceChainTest, HeldParametersUpdateAsTheServersWould) {
  const config::ModelSpec spec = testing::Spec("examples/models/dlrm-small.yaml");
  for (const ps::OptimizerKind kind :
       {ps::OptimizerKind::kSgd, ps::OptimizerKind::kAdagrad, ps::OptimizerKind::kAdam}) {
    SCOPED_TRACE(ps::OptimizerName(kind));
    auto backend = Twin();
    const int first = spec.FindLayer("bottom.0"), last = static_cast<int>(spec.layers.size()) - 1;
    auto held = backend->NewChain(spec, first, last);
    auto given = backend->NewChain(spec, first, last);
    ASSERT_TRUE(held.ok() && given.ok());
    ps::OptimizerOptions o;
    o.kind = kind;
    o.learning_rate = 0.05f;
    o.initial_accumulator = 0.1f;
    const std::vector<int64_t>& sizes = (*held)->block_sizes();
    const size_t blocks = sizes.size();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    std::vector<std::vector<float>> values(blocks), state(blocks);
    for (size_t b = 0; b < blocks; ++b) {
      values[b].resize(sizes[b]);
      for (float& x : values[b]) x = normal(rng);
      state[b].resize(ps::StateFloats(kind) * sizes[b]);
      ps::InitState(o, state[b].data(), static_cast<int>(sizes[b]));
    }
    auto consts = [](const std::vector<std::vector<float>>& v) {
      std::vector<const float*> out;
      for (const auto& b : v) out.push_back(b.data());
      return out;
    };
    auto mutables = [](std::vector<std::vector<float>>& v) {
      std::vector<float*> out;
      for (auto& b : v) out.push_back(b.data());
      return out;
    };
    ASSERT_TRUE((*held)
                    ->Hold({static_cast<int>(kind), o.learning_rate, o.beta1, o.beta2, o.epsilon},
                           consts(values), consts(state))
                    .ok());
    EXPECT_EQ((*held)->SetParameters(consts(values)).code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ((*held)->ApplyHeld(std::vector<int64_t>(blocks, 1)).code(),
              absl::StatusCode::kFailedPrecondition);  // no backward yet
    const int64_t n = 29;
    std::vector<float> labels(n);
    for (int64_t i = 0; i < n; ++i) labels[i] = static_cast<float>(i % 3 == 0);
    for (int64_t step = 1; step <= 4; ++step) {
      Matrix<float> dense(n, 13), vectors(n, 26 * 16);
      for (float& x : absl::MakeSpan(dense.data(), dense.size())) x = normal(rng);
      for (float& x : absl::MakeSpan(vectors.data(), vectors.size())) x = normal(rng);
      // The servers' way: the parameters given, the gradients back into zeroed buffers, updated
      // on the host.
      ASSERT_TRUE((*given)->SetParameters(consts(values)).ok());
      ASSERT_TRUE((*given)->Forward(0, dense, vectors, true).ok());
      auto loss = (*given)->Loss(0, labels.data(), 1.0f / n);
      std::vector<std::vector<float>> grads(blocks);
      for (size_t b = 0; b < blocks; ++b) grads[b].assign(sizes[b], 0.0f);
      ASSERT_TRUE((*given)->Backward(0, nullptr, false, mutables(grads)).ok());
      for (size_t b = 0; b < blocks; ++b) {
        ps::ApplyUpdate(o, values[b].data(), state[b].data(), grads[b].data(),
                        static_cast<int>(sizes[b]), step);
      }
      // The held way.
      ASSERT_TRUE((*held)->Forward(0, dense, vectors, true).ok());
      auto held_loss = (*held)->Loss(0, labels.data(), 1.0f / n);
      ASSERT_TRUE(loss.ok() && held_loss.ok());
      EXPECT_EQ(*held_loss, *loss) << "step " << step;
      const DeviceStats before = backend->stats();
      ASSERT_TRUE((*held)->Backward(0, nullptr, false, {}).ok());
      ASSERT_TRUE((*held)->ApplyHeld(std::vector<int64_t>(blocks, step)).ok());
      // The vectors' gradient comes back (they came from the host); no parameter's does.
      EXPECT_EQ(backend->stats().device_to_host_bytes - before.device_to_host_bytes,
                n * 26 * 16 * 4);
    }
    std::vector<std::vector<float>> got_values(blocks), got_state(blocks);
    for (size_t b = 0; b < blocks; ++b) {
      got_values[b].resize(sizes[b]);
      got_state[b].resize(state[b].size());
    }
    ASSERT_TRUE((*held)->ReadHeld(mutables(got_values), mutables(got_state)).ok());
    EXPECT_EQ(got_values, values);
    EXPECT_EQ(got_state, state);
  }
  // On the host's CPU: refused, the parameters stay with the caller.
  std::unique_ptr<DenseBackend> cpu = NewCpuBackend();
  auto on_cpu = cpu->NewChain(spec, spec.FindLayer("bottom.0"), spec.layers.size() - 1);
  ASSERT_TRUE(on_cpu.ok());
  EXPECT_EQ((*on_cpu)->Hold({}, {}, {}).code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ((*on_cpu)->ApplyHeld({}).code(), absl::StatusCode::kUnimplemented);
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
