#include "heterps/sched/rl/lstm_policy.h"

#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/env.h"
#include "heterps/base/fnv.h"
#include "heterps/base/status_macros.h"

namespace heterps::sched::rl {
namespace {

constexpr char kMagic[] = "heterps-lstm-policy-v1";

using Eigen::MatrixXd;
using Map = Eigen::Map<MatrixXd>;
using VecMap = Eigen::Map<Eigen::VectorXd>;

MatrixXd Sigmoid(const MatrixXd& z) { return (1.0 + (-z.array()).exp()).inverse().matrix(); }

// Softmax of each column over the allowed rows; the others get exactly 0.
MatrixXd MaskedSoftmax(const MatrixXd& logits, const Eigen::VectorXd& allowed) {
  MatrixXd p = MatrixXd::Zero(logits.rows(), logits.cols());
  for (Eigen::Index n = 0; n < logits.cols(); ++n) {
    double top = -std::numeric_limits<double>::infinity();
    for (Eigen::Index t = 0; t < logits.rows(); ++t) {
      if (allowed(t) != 0) top = std::max(top, logits(t, n));
    }
    double sum = 0;
    for (Eigen::Index t = 0; t < logits.rows(); ++t) {
      if (allowed(t) != 0) sum += p(t, n) = std::exp(logits(t, n) - top);
    }
    p.col(n) /= sum;
  }
  return p;
}

// FNV-1a over bytes: detects truncation and corruption of a policy file.
uint64_t Checksum(const char* data, size_t size) { return base::Fnv1a64(data, size); }

std::string ShapeText(const PolicyShape& s) {
  return absl::StrFormat("features %d types %d hidden %d", s.features, s.types, s.hidden);
}

}  // namespace

// The parameter blocks, as views into a flat array laid out wx, wa, wh, b, wo, bo, ws.
struct LstmPolicy::Views {
  Map wx, wa, wh;
  VecMap b;
  Map wo;
  VecMap bo;
  Map ws;

  Views(double* p, const PolicyShape& s)
      : wx(p, 4 * s.hidden, s.features),
        wa(wx.data() + wx.size(), 4 * s.hidden, s.types + 1),
        wh(wa.data() + wa.size(), 4 * s.hidden, s.hidden),
        b(wh.data() + wh.size(), 4 * s.hidden),
        wo(b.data() + b.size(), s.types, s.hidden),
        bo(wo.data() + wo.size(), s.types),
        ws(bo.data() + bo.size(), s.types, s.types + 1) {}
};

int64_t LstmPolicy::NumParams(const PolicyShape& s) {
  int64_t gates = 4 * s.hidden;
  return gates * (s.features + s.types + 1 + s.hidden + 1) + s.types * (s.hidden + 1) +
         s.types * (s.types + 1);
}

// Read-only use: the views of a const policy are never written through.
LstmPolicy::Views LstmPolicy::views() const {
  return Views(const_cast<double*>(theta_.data()), shape_);
}

LstmPolicy::LstmPolicy(const PolicyShape& shape, uint64_t seed)
    : shape_(shape), theta_(NumParams(shape)) {
  std::mt19937_64 rng(seed);
  Views w(theta_.data(), shape_);
  auto fill = [&](auto& block, double fan_in) {
    std::uniform_real_distribution<double> u(-1 / std::sqrt(fan_in), 1 / std::sqrt(fan_in));
    for (Eigen::Index i = 0; i < block.size(); ++i) block.data()[i] = u(rng);
  };
  const double fan_in = shape.features + shape.types + 1 + shape.hidden;
  fill(w.wx, fan_in);
  fill(w.wa, fan_in);
  fill(w.wh, fan_in);
  w.b.setZero();
  w.b.segment(shape.hidden, shape.hidden).setOnes();  // remember by default
  fill(w.wo, shape.hidden);
  w.bo.setZero();
  w.ws.setZero();
  w.ws.leftCols(shape.types).diagonal().setConstant(std::log(shape.types) + 1.0);
}

Tape LstmPolicy::Forward(const MatrixXd& features, const MatrixXd& allowed, int batch,
                         const Chooser& choose) const {
  const int H = shape_.hidden, L = static_cast<int>(features.cols());
  Views w = views();
  MatrixXd fx = w.wx * features;  // 4H x L: the layers' share of the gates, for every episode
  fx.colwise() += w.b;
  Tape tape;
  tape.batch = batch;
  tape.actions.assign(L, std::vector<int>(batch, 0));
  MatrixXd h = MatrixXd::Zero(H, batch), c = MatrixXd::Zero(H, batch);
  std::vector<int> prev(batch, shape_.types);  // "none" before the first layer
  for (int l = 0; l < L; ++l) {
    MatrixXd z = w.wh * h;
    z.colwise() += fx.col(l);
    for (int n = 0; n < batch; ++n) z.col(n) += w.wa.col(prev[n]);
    MatrixXd gates(4 * H, batch);
    gates.topRows(H) = Sigmoid(z.topRows(H));
    gates.middleRows(H, H) = Sigmoid(z.middleRows(H, H));
    gates.middleRows(2 * H, H) = z.middleRows(2 * H, H).array().tanh().matrix();
    gates.bottomRows(H) = Sigmoid(z.bottomRows(H));
    c = gates.middleRows(H, H).cwiseProduct(c) +
        gates.topRows(H).cwiseProduct(gates.middleRows(2 * H, H));
    h = gates.bottomRows(H).cwiseProduct(c.array().tanh().matrix());
    MatrixXd logits = w.wo * h;
    logits.colwise() += w.bo;
    for (int n = 0; n < batch; ++n) logits.col(n) += w.ws.col(prev[n]);
    MatrixXd probs = MaskedSoftmax(logits, allowed.col(l));
    choose(l, probs, tape.actions[l]);
    prev = tape.actions[l];
    tape.gates.push_back(std::move(gates));
    tape.cell.push_back(c);
    tape.hidden.push_back(h);
    tape.probs.push_back(std::move(probs));
  }
  return tape;
}

Eigen::VectorXd LstmPolicy::Backward(const MatrixXd& features, const Tape& tape,
                                     const std::vector<MatrixXd>& dlogits) const {
  const int H = shape_.hidden, L = static_cast<int>(features.cols()), N = tape.batch;
  Views w = views();
  Eigen::VectorXd grad = Eigen::VectorXd::Zero(theta_.size());
  Views g(grad.data(), shape_);
  MatrixXd dh_next = MatrixXd::Zero(H, N), dc_next = MatrixXd::Zero(H, N);
  const MatrixXd zeros = MatrixXd::Zero(H, N);
  for (int l = L - 1; l >= 0; --l) {
    const MatrixXd& gates = tape.gates[l];
    auto i = gates.topRows(H).array(), f = gates.middleRows(H, H).array();
    auto gg = gates.middleRows(2 * H, H).array(), o = gates.bottomRows(H).array();
    const MatrixXd& h_prev = l > 0 ? tape.hidden[l - 1] : zeros;
    const MatrixXd& c_prev = l > 0 ? tape.cell[l - 1] : zeros;
    g.wo += dlogits[l] * tape.hidden[l].transpose();
    g.bo += dlogits[l].rowwise().sum();
    for (int n = 0; n < N; ++n) {
      g.ws.col(l > 0 ? tape.actions[l - 1][n] : shape_.types) += dlogits[l].col(n);
    }
    Eigen::ArrayXXd dh = (w.wo.transpose() * dlogits[l] + dh_next).array();
    Eigen::ArrayXXd tc = tape.cell[l].array().tanh();
    Eigen::ArrayXXd dc = dh * o * (1 - tc.square()) + dc_next.array();
    MatrixXd dz(4 * H, N);
    dz.topRows(H) = (dc * gg * i * (1 - i)).matrix();
    dz.middleRows(H, H) = (dc * c_prev.array() * f * (1 - f)).matrix();
    dz.middleRows(2 * H, H) = (dc * i * (1 - gg.square())).matrix();
    dz.bottomRows(H) = (dh * tc * o * (1 - o)).matrix();
    g.wh += dz * h_prev.transpose();
    Eigen::VectorXd dz_sum = dz.rowwise().sum();
    g.b += dz_sum;
    g.wx += dz_sum * features.col(l).transpose();
    for (int n = 0; n < N; ++n) {
      g.wa.col(l > 0 ? tape.actions[l - 1][n] : shape_.types) += dz.col(n);
    }
    dh_next = w.wh.transpose() * dz;
    dc_next = (dc * f).matrix();
  }
  return grad;
}

double SurrogateLoss(const Tape& tape, const std::vector<double>& advantages, double entropy_weight,
                     std::vector<MatrixXd>* dlogits) {
  const int N = tape.batch;
  dlogits->clear();
  double loss = 0;
  for (size_t l = 0; l < tape.probs.size(); ++l) {
    const MatrixXd& p = tape.probs[l];
    MatrixXd d = MatrixXd::Zero(p.rows(), N);
    for (int n = 0; n < N; ++n) {
      const int a = tape.actions[l][n];
      double entropy = 0;
      for (Eigen::Index t = 0; t < p.rows(); ++t) {
        if (p(t, n) > 0) entropy -= p(t, n) * std::log(p(t, n));
      }
      loss += -advantages[n] * std::log(p(a, n)) - entropy_weight * entropy;
      // d(-log p_a)/dz = p - e_a;  d(-H)/dz_t = p_t (log p_t + H).
      for (Eigen::Index t = 0; t < p.rows(); ++t) {
        if (p(t, n) <= 0) continue;
        d(t, n) =
            advantages[n] * p(t, n) + entropy_weight * p(t, n) * (std::log(p(t, n)) + entropy);
      }
      d(a, n) -= advantages[n];
    }
    dlogits->push_back(d / N);
  }
  return loss / N;
}

double MeanEntropy(const Tape& tape) {
  double sum = 0;
  int count = 0;
  for (const MatrixXd& p : tape.probs) {
    for (Eigen::Index n = 0; n < p.cols(); ++n, ++count) {
      for (Eigen::Index t = 0; t < p.rows(); ++t) {
        if (p(t, n) > 0) sum -= p(t, n) * std::log(p(t, n));
      }
    }
  }
  return count ? sum / count : 0;
}

absl::Status LstmPolicy::Save(const std::string& path, base::Env* env) const {
  std::string out = absl::StrCat(kMagic, "\n", ShapeText(shape_), "\n");
  const char* bytes = reinterpret_cast<const char*>(theta_.data());
  const size_t size = sizeof(double) * theta_.size();
  out.append(bytes, size);
  uint64_t sum = Checksum(bytes, size);
  out.append(reinterpret_cast<const char*>(&sum), sizeof sum);
  return base::WriteFileAtomically(env, path, out);
}

absl::StatusOr<LstmPolicy> LstmPolicy::Load(const std::string& path, const PolicyShape& expected,
                                            base::Env* env) {
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, path));
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", why));
  };
  size_t first = text.find('\n');
  size_t second = first == std::string::npos ? first : text.find('\n', first + 1);
  if (second == std::string::npos || text.compare(0, first, kMagic) != 0) {
    return bad(absl::StrCat("not a heterps policy file (expected '", kMagic, "')"));
  }
  PolicyShape shape;
  std::istringstream header(text.substr(first + 1, second - first - 1));
  std::string w1, w2, w3;
  if (!(header >> w1 >> shape.features >> w2 >> shape.types >> w3 >> shape.hidden) ||
      w1 != "features" || w2 != "types" || w3 != "hidden") {
    return bad("malformed header");
  }
  if (!(shape == expected)) {
    return bad(absl::StrCat("the policy has ", ShapeText(shape), "; this problem needs ",
                            ShapeText(expected),
                            " (a policy warm-starts only the same cluster and hidden size)"));
  }
  const size_t size = sizeof(double) * NumParams(shape);
  const size_t body = second + 1;
  if (text.size() != body + size + sizeof(uint64_t)) {
    return bad(absl::StrCat("truncated or padded: ", text.size() - body,
                            " bytes of parameters "
                            "and checksum, expected ",
                            size + sizeof(uint64_t)));
  }
  uint64_t sum;
  std::memcpy(&sum, text.data() + body + size, sizeof sum);
  if (sum != Checksum(text.data() + body, size)) return bad("checksum mismatch: file corrupt");
  LstmPolicy policy(shape, 0);
  std::memcpy(policy.theta_.data(), text.data() + body, size);
  return policy;
}

}  // namespace heterps::sched::rl
