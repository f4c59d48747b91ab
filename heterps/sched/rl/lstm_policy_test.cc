#include "heterps/sched/rl/lstm_policy.h"

#include <fstream>
#include <iterator>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heterps::sched::rl {
namespace {

using Eigen::MatrixXd;

struct Problem {
  MatrixXd features, allowed;
  std::vector<std::vector<int>> actions;  // [l][n], fixed by a first sampled pass
  std::vector<double> advantages;
};

constexpr int kLayers = 5, kBatch = 3;

Problem MakeProblem(const LstmPolicy& policy) {
  std::mt19937_64 rng(17);
  std::normal_distribution<double> normal;
  const PolicyShape& s = policy.shape();
  Problem p;
  p.features = MatrixXd::NullaryExpr(s.features, kLayers, [&]() { return normal(rng); });
  p.allowed = MatrixXd::Ones(s.types, kLayers);
  p.allowed(0, 1) = 0;  // masked types must not disturb the gradient
  p.allowed(2, 3) = 0;
  Tape tape = policy.Forward(p.features, p.allowed, kBatch,
                             [&](int, const MatrixXd& probs, std::vector<int>& actions) {
                               for (int n = 0; n < kBatch; ++n) {
                                 std::discrete_distribution<int> d(
                                     probs.col(n).data(), probs.col(n).data() + probs.rows());
                                 actions[n] = d(rng);
                               }
                             });
  p.actions = tape.actions;
  p.advantages = {0.7, -1.3, 0.4};
  return p;
}

// The surrogate loss with the episodes' actions forced.
double Loss(const LstmPolicy& policy, const Problem& p, double entropy_weight,
            std::vector<MatrixXd>* dlogits, Tape* tape_out) {
  Tape tape = policy.Forward(
      p.features, p.allowed, kBatch,
      [&](int l, const MatrixXd&, std::vector<int>& actions) { actions = p.actions[l]; });
  std::vector<MatrixXd> d;
  double loss = SurrogateLoss(tape, p.advantages, entropy_weight, dlogits ? dlogits : &d);
  if (tape_out) *tape_out = std::move(tape);
  return loss;
}

TEST(LstmPolicyTest, BackwardMatchesFiniteDifferencesForEveryWeight) {
  LstmPolicy policy({/*features=*/4, /*types=*/3, /*hidden=*/5}, /*seed=*/3);
  Problem problem = MakeProblem(policy);
  for (double entropy_weight : {0.0, 0.3}) {
    std::vector<MatrixXd> dlogits;
    Tape tape;
    Loss(policy, problem, entropy_weight, &dlogits, &tape);
    Eigen::VectorXd analytic = policy.Backward(problem.features, tape, dlogits);
    ASSERT_EQ(analytic.size(), policy.params().size());
    const double eps = 1e-6;
    int checked = 0;
    for (Eigen::Index i = 0; i < policy.params().size(); ++i) {
      const double saved = policy.params()(i);
      policy.params()(i) = saved + eps;
      double up = Loss(policy, problem, entropy_weight, nullptr, nullptr);
      policy.params()(i) = saved - eps;
      double down = Loss(policy, problem, entropy_weight, nullptr, nullptr);
      policy.params()(i) = saved;
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(analytic(i), numeric, 1e-7 + 1e-5 * std::abs(numeric))
          << "parameter " << i << ", entropy weight " << entropy_weight;
      ++checked;
    }
    // wx 20x4, wa 20x4, wh 20x5, b 20, wo 3x5, bo 3, ws 3x4.
    EXPECT_EQ(checked, 20 * 4 + 20 * 4 + 20 * 5 + 20 + 15 + 3 + 12);
  }
}

TEST(LstmPolicyTest, MaskedTypesGetZeroProbability) {
  LstmPolicy policy({4, 3, 5}, 3);
  Problem problem = MakeProblem(policy);
  Tape tape;
  Loss(policy, problem, 0, nullptr, &tape);
  for (int n = 0; n < kBatch; ++n) {
    EXPECT_EQ(tape.probs[1](0, n), 0);
    EXPECT_EQ(tape.probs[3](2, n), 0);
    EXPECT_NEAR(tape.probs[1].col(n).sum(), 1, 1e-12);
  }
}

TEST(LstmPolicyTest, SaveLoadRoundTripAndCorruption) {
  LstmPolicy policy({4, 3, 5}, 9);
  const std::string path = ::testing::TempDir() + "/policy.bin";
  ASSERT_TRUE(policy.Save(path).ok());
  auto back = LstmPolicy::Load(path, policy.shape());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->params(), policy.params());

  auto other = LstmPolicy::Load(path, {4, 7, 5});
  ASSERT_FALSE(other.ok());
  EXPECT_THAT(std::string(other.status().message()),
              ::testing::HasSubstr("the policy has features 4 types 3 hidden 5; this problem "
                                   "needs features 4 types 7 hidden 5"));

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  std::ofstream(path, std::ios::binary) << flipped;
  auto corrupt = LstmPolicy::Load(path, policy.shape());
  ASSERT_FALSE(corrupt.ok());
  EXPECT_THAT(std::string(corrupt.status().message()), ::testing::HasSubstr("checksum mismatch"));

  std::ofstream(path, std::ios::binary) << bytes.substr(0, bytes.size() - 20);
  auto truncated = LstmPolicy::Load(path, policy.shape());
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(std::string(truncated.status().message()), ::testing::HasSubstr("truncated"));

  std::ofstream(path) << "hello\n";
  EXPECT_FALSE(LstmPolicy::Load(path, policy.shape()).ok());
}

}  // namespace
}  // namespace heterps::sched::rl
