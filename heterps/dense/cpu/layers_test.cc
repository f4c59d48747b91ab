// Every layer's gradients against central finite differences, in double precision.
#include "heterps/dense/cpu/layers.h"

#include <functional>
#include <random>

#include "gtest/gtest.h"

namespace heterps::dense {
namespace {

using config::Activation;
using config::InteractionOp;
using M = Matrix<double>;

M Random(int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  M m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = normal(rng);
  return m;
}

// Checks `analytic` (the gradient of f at `x`) against central differences of f.
void ExpectGradient(const std::function<double()>& f, double* x, int64_t n, const double* analytic,
                    const std::string& what) {
  const double h = 1e-6;
  for (int64_t i = 0; i < n; ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = f();
    x[i] = saved - h;
    const double down = f();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    ASSERT_NEAR(analytic[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric)))
        << what << " [" << i << "]";
  }
}

// A scalar loss of a layer output: a fixed random weighting, so that every output matters.
double Weighted(const M& out, const M& weights) { return (out.array() * weights.array()).sum(); }

TEST(LayersTest, FcGradientsForEveryActivation) {
  std::mt19937 rng(1);
  for (Activation act : {Activation::kNone, Activation::kRelu, Activation::kSigmoid}) {
    FcLayer<double> fc(5, 4, act);
    std::vector<double> params(fc.num_params());
    for (double& p : params) p = std::normal_distribution<double>()(rng);
    M x = Random(6, 5, rng), weights = Random(6, 4, rng), y;
    auto loss = [&] {
      M out;
      FcLayer<double> probe(5, 4, act);
      probe.Forward(params.data(), x, &out);
      return Weighted(out, weights);
    };
    fc.Forward(params.data(), x, &y);
    std::vector<double> grads(fc.num_params(), 0.0);
    M dx;
    M dy = weights;  // consumed
    fc.Backward(params.data(), &dy, &dx, grads.data());
    ExpectGradient(loss, params.data(), fc.num_params(), grads.data(), "fc params");
    ExpectGradient(loss, x.data(), x.size(), dx.data(), "fc input");
    // Gradients accumulate.
    std::vector<double> twice(grads);
    dy = weights;
    fc.Backward(params.data(), &dy, nullptr, twice.data());
    for (size_t i = 0; i < grads.size(); ++i) EXPECT_NEAR(twice[i], 2 * grads[i], 1e-12);
  }
}

TEST(LayersTest, InteractionGradientsDotAndConcat) {
  std::mt19937 rng(2);
  for (InteractionOp op : {InteractionOp::kDot, InteractionOp::kConcat}) {
    const int64_t width = 3, vectors = 4, dim = 3;
    InteractionLayer<double> layer(op, width, vectors, dim);
    EXPECT_EQ(layer.out(), op == InteractionOp::kDot ? 3 + 10 : 3 + 12);
    M dense = Random(5, width, rng), vecs = Random(5, vectors * dim, rng);
    M weights = Random(5, layer.out(), rng), out, d_dense, d_vectors;
    auto loss = [&] {
      InteractionLayer<double> probe(op, width, vectors, dim);
      M o;
      probe.Forward(dense, vecs, &o);
      return Weighted(o, weights);
    };
    layer.Forward(dense, vecs, &out);
    if (op == InteractionOp::kDot) {
      // Sample 0: the first dot is <d, e_1>, the last <e_3, e_4>.
      EXPECT_NEAR(out(0, 3), dense.row(0).dot(vecs.row(0).segment(0, 3)), 1e-12);
      EXPECT_NEAR(out(0, 12), vecs.row(0).segment(6, 3).dot(vecs.row(0).segment(9, 3)), 1e-12);
    }
    layer.Backward(weights, &d_dense, &d_vectors);
    ExpectGradient(loss, dense.data(), dense.size(), d_dense.data(), "interaction dense");
    ExpectGradient(loss, vecs.data(), vecs.size(), d_vectors.data(), "interaction vectors");
  }
}

// The dot interaction at DLRM's shape (26 vectors of dim 16, more than one column block of the
// transposed vectors) in float, against its definition summed in long double.
TEST(LayersTest, DotInteractionMatchesItsDefinitionAtDlrmShape) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int64_t batch = 7, vectors = 26, dim = 16, n = vectors + 1;
  Matrix<float> dense(batch, dim), vecs(batch, vectors * dim), d_out;
  for (int64_t i = 0; i < dense.size(); ++i) dense.data()[i] = normal(rng);
  for (int64_t i = 0; i < vecs.size(); ++i) vecs.data()[i] = normal(rng);
  InteractionLayer<float> layer(InteractionOp::kDot, dim, vectors, dim);
  ASSERT_EQ(layer.out(), dim + n * (n - 1) / 2);
  d_out.resize(batch, layer.out());
  for (int64_t i = 0; i < d_out.size(); ++i) d_out.data()[i] = normal(rng);
  Matrix<float> out, d_dense, d_vectors;
  layer.Forward(dense, vecs, &out);
  layer.Backward(d_out, &d_dense, &d_vectors);
  auto z = [&](int64_t r, int64_t i, int64_t c) -> long double {
    return i == 0 ? dense(r, c) : vecs(r, (i - 1) * dim + c);
  };
  for (int64_t r = 0; r < batch; ++r) {
    for (int64_t c = 0; c < dim; ++c) EXPECT_EQ(out(r, c), dense(r, c));
    // Forward: <z_i, z_j> for i < j, row by row.
    std::vector<std::vector<long double>> g(n, std::vector<long double>(n, 0));
    int64_t k = dim;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < n; ++j, ++k) {
        long double dot = 0;
        for (int64_t c = 0; c < dim; ++c) dot += z(r, i, c) * z(r, j, c);
        EXPECT_NEAR(out(r, k), static_cast<double>(dot), 1e-5 * (1 + std::abs(dot)))
            << "sample " << r << " pair " << i << "," << j;
        g[i][j] = g[j][i] = d_out(r, k);
      }
    }
    // Backward: dz_i = sum_j g_ij z_j, and the dense part also passes d_out's first columns.
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < dim; ++c) {
        long double dz = i == 0 ? d_out(r, c) : 0;
        for (int64_t j = 0; j < n; ++j) dz += g[i][j] * z(r, j, c);
        const float got = i == 0 ? d_dense(r, c) : d_vectors(r, (i - 1) * dim + c);
        EXPECT_NEAR(got, static_cast<double>(dz), 1e-4 * (1 + std::abs(dz)))
            << "sample " << r << " vector " << i << " dim " << c;
      }
    }
  }
}

TEST(LayersTest, LoglossValueAndGradient) {
  M logits(4, 1);
  logits << -30, -0.5, 0.7, 40;  // extremes must not overflow
  const double labels[4] = {0, 1, 0, 1};
  M d;
  const double loss = Logloss(logits, labels, &d);
  double expected = 0;
  for (int r = 0; r < 4; ++r) {
    // -log p = log(1 + e^-z) for a click, -log(1 - p) = log(1 + e^z) for none, in long double.
    const long double z = logits(r, 0);
    expected +=
        static_cast<double>(labels[r] == 1 ? std::log1p(std::exp(-z)) : std::log1p(std::exp(z)));
  }
  EXPECT_NEAR(loss, expected / 4, 1e-9);
  auto f = [&] {
    M unused;
    return Logloss(logits, labels, &unused);
  };
  ExpectGradient(f, logits.data(), 4, d.data(), "logloss");
  // A micro-batch of a mini-batch of 10: the sum, and gradients scaled by 1/10.
  M d_part;
  EXPECT_NEAR(LoglossSum(logits, labels, 0.1, &d_part), expected, 1e-9);
  for (int r = 0; r < 4; ++r) EXPECT_NEAR(d_part(r, 0), d(r, 0) * 4 / 10, 1e-15);
}

TEST(LayersTest, AStackOfLayersBackpropagatesEndToEnd) {
  // bottom fc (relu) -> dot interaction with two vectors -> top fc -> logloss.
  std::mt19937 rng(3);
  const int64_t batch = 7, dim = 4;
  FcLayer<double> bottom(5, dim, Activation::kRelu);
  InteractionLayer<double> interact(InteractionOp::kDot, dim, 2, dim);
  FcLayer<double> top(interact.out(), 1, Activation::kNone);
  std::vector<double> pb(bottom.num_params()), pt(top.num_params());
  for (double& p : pb) p = 0.5 * std::normal_distribution<double>()(rng);
  for (double& p : pt) p = 0.5 * std::normal_distribution<double>()(rng);
  M x = Random(batch, 5, rng), vecs = Random(batch, 2 * dim, rng);
  std::vector<double> labels(batch);
  for (int64_t r = 0; r < batch; ++r) labels[r] = r % 2;
  // h, f and logits are the caller's: the layers keep their inputs for Backward.
  M h, f, logits;
  auto forward = [&](FcLayer<double>& b, InteractionLayer<double>& i, FcLayer<double>& t,
                     M* d_logits) {
    b.Forward(pb.data(), x, &h);
    i.Forward(h, vecs, &f);
    t.Forward(pt.data(), f, &logits);
    return Logloss(logits, labels.data(), d_logits);
  };
  M d_logits, d_f, d_h, d_vecs, d_x;
  forward(bottom, interact, top, &d_logits);
  auto loss = [&] {
    FcLayer<double> b(5, dim, Activation::kRelu), t(interact.out(), 1, Activation::kNone);
    InteractionLayer<double> i(InteractionOp::kDot, dim, 2, dim);
    M hh, ff, ll, unused;
    b.Forward(pb.data(), x, &hh);
    i.Forward(hh, vecs, &ff);
    t.Forward(pt.data(), ff, &ll);
    return Logloss(ll, labels.data(), &unused);
  };
  std::vector<double> gb(pb.size(), 0.0), gt(pt.size(), 0.0);
  top.Backward(pt.data(), &d_logits, &d_f, gt.data());
  interact.Backward(d_f, &d_h, &d_vecs);
  bottom.Backward(pb.data(), &d_h, &d_x, gb.data());
  ExpectGradient(loss, pt.data(), pt.size(), gt.data(), "top");
  ExpectGradient(loss, pb.data(), pb.size(), gb.data(), "bottom");
  ExpectGradient(loss, vecs.data(), vecs.size(), d_vecs.data(), "embedding vectors");
  ExpectGradient(loss, x.data(), x.size(), d_x.data(), "dense input");
}

}  // namespace
}  // namespace heterps::dense
