#include "heterps/dense/backend.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/dense/cpu/cpu_backend.h"
#include "heterps/dense/cpu/layers.h"
#include "heterps/dense/default_backends.h"

namespace heterps::dense {
namespace {

using ::testing::HasSubstr;

config::ModelSpec DlrmSmall() {
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(BackendTest, DevicesByName) {
  const BackendRegistry backends = DefaultBackends();
  auto cpu = backends.Create("cpu", BackendOptions());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_EQ((*cpu)->device(), "cpu");
  auto unknown = backends.Create("tpu:0", BackendOptions());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("no backend for it in this build (it has: cpu"));
  EXPECT_THAT(backends.Create("cpu:x", BackendOptions()).status().message(),
              HasSubstr("expected <kind>:<index>"));
}

TEST(BackendTest, ChainsHoldDenseLayersOnly) {
  const config::ModelSpec spec = DlrmSmall();
  std::unique_ptr<DenseBackend> cpu = NewCpuBackend();
  const int emb = spec.FindLayer("emb");
  auto bad = cpu->NewChain(spec, emb, emb + 1);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("layer emb: a embedding layer is not a dense"));
  auto top = cpu->NewChain(spec, spec.FindLayer("interact"), spec.layers.size() - 1);
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_TRUE((*top)->consumes_vectors());
  EXPECT_TRUE((*top)->has_loss());
  EXPECT_EQ((*top)->block_sizes().size(), 3u);
}

// A chain of one fc layer does what the layer does, and keeps micro-batches apart.
TEST(BackendTest, CpuChainIsTheLayers) {
  const config::ModelSpec spec = DlrmSmall();
  const int first = spec.FindLayer("bottom.0");
  auto chain = NewCpuChain(spec, first, first);
  ASSERT_TRUE(chain.ok());
  const config::LayerSpec& s = spec.layers[first];
  std::vector<float> params((*chain)->block_sizes()[0]);
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.01f * ((i * 7) % 13) - 0.05f;
  const float* blocks[] = {params.data()};
  ASSERT_TRUE((*chain)->SetParameters(blocks).ok());
  Matrix<float> x0 = Matrix<float>::Random(5, s.in), x1 = Matrix<float>::Random(3, s.in);
  Matrix<float> none(5, 0);
  auto y0 = (*chain)->Forward(0, x0, none, true);
  auto y1 = (*chain)->Forward(1, x1, Matrix<float>(3, 0), true);
  ASSERT_TRUE(y0.ok() && y1.ok());
  FcLayer<float> fc(s.in, s.out, s.activation);
  Matrix<float> expected;
  fc.Forward(params.data(), x0, &expected);
  EXPECT_TRUE((*y0)->isApprox(expected));
  Matrix<float> dy = Matrix<float>::Ones(5, s.out), dy_copy = dy;
  std::vector<float> grads(params.size(), 0.0f), want(params.size(), 0.0f);
  float* out_blocks[] = {grads.data()};
  auto d = (*chain)->Backward(0, &dy, true, out_blocks);
  ASSERT_TRUE(d.ok()) << d.status();
  Matrix<float> dx;
  fc.Backward(params.data(), &dy_copy, &dx, want.data());
  EXPECT_TRUE(d->dense->isApprox(dx));
  EXPECT_EQ(grads, want);
  EXPECT_EQ(d->vectors, nullptr);
  // A context's backward comes once, after its forward.
  EXPECT_EQ((*chain)->Backward(0, &dy, true, out_blocks).status().code(),
            absl::StatusCode::kFailedPrecondition);
  Matrix<float> wrong = Matrix<float>::Ones(4, s.out);
  EXPECT_EQ((*chain)->Backward(1, &wrong, true, out_blocks).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace heterps::dense
