#include "heterps/dense/gpu/chain_checks.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "heterps/dense/cpu/cpu_backend.h"

namespace heterps::dense::testing {
namespace {

Matrix<float> Random(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.5f);
  Matrix<float> m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

void ExpectNear(const Matrix<float>& got, const Matrix<float>& want, const std::string& what) {
  ASSERT_EQ(got.rows(), want.rows()) << what;
  ASSERT_EQ(got.cols(), want.cols()) << what;
  for (int64_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got.data()[i], want.data()[i], 1e-4 * (1 + std::abs(want.data()[i])))
        << what << " at " << i;
  }
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::abs(want[i]))) << what << " at " << i;
  }
}

}  // namespace

config::ModelSpec Spec(const std::string& path) {
  auto spec = config::LoadModelSpec(path);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

void ExpectChainsAgree(const config::ModelSpec& spec, int first, int last, DenseBackend* backend) {
  SCOPED_TRACE(spec.layers[first].name + ".." + spec.layers[last].name + " on " +
               backend->device());
  auto cpu = NewCpuChain(spec, first, last);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto dev = backend->NewChain(spec, first, last);
  ASSERT_TRUE(dev.ok()) << dev.status();
  DenseChain& a = **cpu;
  DenseChain& b = **dev;
  std::mt19937 rng(7);
  std::vector<std::vector<float>> params;
  std::vector<const float*> blocks;
  for (int64_t size : a.block_sizes()) {
    std::uniform_real_distribution<float> unit(-0.3f, 0.3f);
    params.emplace_back(size);
    for (float& p : params.back()) p = unit(rng);
  }
  for (const auto& p : params) blocks.push_back(p.data());
  ASSERT_TRUE(a.SetParameters(blocks).ok());
  ASSERT_TRUE(b.SetParameters(blocks).ok());
  const config::LayerSpec& in = spec.layers[first];
  const int64_t vector_cols = a.consumes_vectors() ? in.vector_floats_in : 0;
  // Two micro-batches of odd sizes in flight at once, answered in the reverse order.
  const int64_t sizes[2] = {37, 5};
  Matrix<float> dense[2], vectors[2];
  for (int m = 0; m < 2; ++m) {
    dense[m] = Random(sizes[m], in.dense_width_in, rng);
    vectors[m] = Random(sizes[m], vector_cols, rng);
    auto x = a.Forward(m, dense[m], vectors[m], true);
    auto y = b.Forward(m, dense[m], vectors[m], true);
    ASSERT_TRUE(x.ok()) << x.status();
    ASSERT_TRUE(y.ok()) << y.status();
    ExpectNear(**y, **x, "forward " + std::to_string(m));
  }
  for (int m = 1; m >= 0; --m) {
    std::vector<std::vector<float>> grads_a, grads_b;
    std::vector<float*> ga, gb;
    for (int64_t size : a.block_sizes()) {
      grads_a.emplace_back(size, 0.5f);  // added into, not overwritten
      grads_b.emplace_back(size, 0.5f);
    }
    for (size_t i = 0; i < grads_a.size(); ++i) {
      ga.push_back(grads_a[i].data());
      gb.push_back(grads_b[i].data());
    }
    Matrix<float> d_a, d_b;
    if (a.has_loss()) {
      std::vector<float> labels(sizes[m]);
      for (float& y : labels) y = rng() % 3 == 0 ? 1.0f : 0.0f;
      auto la = a.Loss(m, labels.data(), 1.0f / 64);
      auto lb = b.Loss(m, labels.data(), 1.0f / 64);
      ASSERT_TRUE(la.ok() && lb.ok()) << la.status() << " " << lb.status();
      EXPECT_NEAR(*lb, *la, 1e-4 * std::abs(*la));
    } else {
      d_a = Random(sizes[m], spec.layers[last].dense_width_out, rng);
      d_b = d_a;
    }
    auto ia = a.Backward(m, a.has_loss() ? nullptr : &d_a, true, absl::MakeSpan(ga));
    auto ib = b.Backward(m, b.has_loss() ? nullptr : &d_b, true, absl::MakeSpan(gb));
    ASSERT_TRUE(ia.ok()) << ia.status();
    ASSERT_TRUE(ib.ok()) << ib.status();
    ExpectNear(*ib->dense, *ia->dense, "input gradient " + std::to_string(m));
    ASSERT_EQ(ia->vectors == nullptr, ib->vectors == nullptr);
    if (ia->vectors != nullptr) {
      ExpectNear(*ib->vectors, *ia->vectors, "vector gradient " + std::to_string(m));
    }
    for (size_t i = 0; i < grads_a.size(); ++i) {
      ExpectNear(grads_b[i], grads_a[i], "parameter gradient " + std::to_string(i));
    }
  }
}

}  // namespace heterps::dense::testing
