// The bo scheduler: Bayesian optimisation over assignments (a type per layer).
//
// Encoding. Layer l on type t is the feature vector of t: the logs of its FLOP rate, memory
// bandwidth, lookup rate, network bandwidth and price, each standardized across the cluster's
// types; an assignment is the concatenation over layers (5 L numbers, whatever the number of
// types, where one-hot would take L T). Types that perform alike are near, so the model learns
// "faster here" rather than "type 7 here". Squared distances come from a T x T table of the types'
// feature distances, summed over the layers: O(L) a pair.
//
// Surrogate. A Gaussian process with an RBF kernel, length scale the median pairwise distance of
// its points, noise 1e-6, on the standardized score. The score is log(cost_usd) for a feasible
// plan; for an infeasible one it is 1000 + log(1 + shortfall) in the search, and in the GP the
// worst feasible log cost among its points + 1 + log(1 + shortfall), so that the penalty stays on
// the scale of the costs instead of flattening their differences after standardization (the plain
// penalty when no point is feasible). The GP holds at most 200 points: the 100 best and the most
// recent others, so an iteration costs O(200^3 + 200^2 x 256).
//
// Acquisition. Expected improvement over a pool of 256 candidates not yet evaluated: three
// quarters are the 5 best plans with 1 to 3 layers moved to another type, a quarter uniformly
// random. The search starts from the homogeneous plans (type t on every layer it can hold) and 10
// random ones, and ends when the budget of plans (default 300) or the time is spent, or no new
// candidate can be found.
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "heterps/base/deadline.h"
#include "heterps/sched/internal/search_context.h"
#include "heterps/sched/priced_plan.h"
#include "heterps/sched/schedulers.h"

namespace heterps::sched {
namespace {

using internal::kInfeasibleScore;
using internal::SearchContext;

constexpr int64_t kBayesOptBudget = 300;
constexpr int kInitialRandom = 10;
constexpr size_t kMaxGpPoints = 200;
constexpr size_t kPoolSize = 256;
constexpr size_t kParents = 5;  // candidates are mutations of this many best plans
constexpr int kMaxLayerChanges = 3;
constexpr double kNoise = 1e-6;

using Assignment = std::vector<int>;

// Squared distances between assignments under the type-feature encoding.
class FeatureDistance {
 public:
  explicit FeatureDistance(const cost::CostModel& model) : num_types_(model.num_types()) {
    std::vector<std::vector<double>> features(num_types_);
    for (int t = 0; t < num_types_; ++t) {
      const config::ResourceType& type = model.type(t);
      for (double x :
           {type.flops, type.mem_bandwidth, type.lookup_rate, type.network, type.price_per_hour}) {
        features[t].push_back(std::log(std::max(x, 1e-300)));
      }
    }
    Standardize(features);
    table_.resize(static_cast<size_t>(num_types_) * num_types_);
    for (int a = 0; a < num_types_; ++a) {
      for (int b = 0; b < num_types_; ++b) {
        double d2 = 0;
        for (size_t f = 0; f < features[a].size(); ++f) {
          d2 += (features[a][f] - features[b][f]) * (features[a][f] - features[b][f]);
        }
        table_[a * num_types_ + b] = d2;
      }
    }
  }

  double Squared(const Assignment& x, const Assignment& y) const {
    double d2 = 0;
    for (size_t l = 0; l < x.size(); ++l) d2 += table_[x[l] * num_types_ + y[l]];
    return d2;
  }

 private:
  // Each feature to mean 0 and standard deviation 1 across the types (0 where it does not vary).
  static void Standardize(std::vector<std::vector<double>>& features) {
    const size_t n = features.size();
    for (size_t f = 0; n > 0 && f < features[0].size(); ++f) {
      double mean = 0, var = 0;
      for (const auto& v : features) mean += v[f] / n;
      for (const auto& v : features) var += (v[f] - mean) * (v[f] - mean) / n;
      const double sd = var > 1e-24 ? std::sqrt(var) : 1.0;
      for (auto& v : features) v[f] = (v[f] - mean) / sd;
    }
  }

  int num_types_;
  std::vector<double> table_;  // [a * T + b]: squared distance between the features of a and b
};

double NormalPdf(double z) { return 0.3989422804014327 * std::exp(-0.5 * z * z); }
double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// Expected improvement below `best` of a normal with this mean and standard deviation.
double ExpectedImprovement(double best, double mean, double sd) {
  const double gap = best - mean;
  if (sd < 1e-12) return std::max(gap, 0.0);
  const double z = gap / sd;
  return gap * NormalCdf(z) + sd * NormalPdf(z);
}

// A Gaussian process regression with kernel exp(-d^2 / (2 s^2)) and noise kNoise on the diagonal
// (raised tenfold until the Cholesky factorization succeeds).
class GaussianProcess {
 public:
  GaussianProcess(const FeatureDistance& distance, std::vector<const Assignment*> points,
                  const Eigen::VectorXd& targets)
      : distance_(distance), points_(std::move(points)) {
    const Eigen::Index n = static_cast<Eigen::Index>(points_.size());
    Eigen::MatrixXd d2(n, n);
    std::vector<double> pairs;
    for (Eigen::Index i = 0; i < n; ++i) {
      d2(i, i) = 0;
      for (Eigen::Index j = 0; j < i; ++j) {
        d2(i, j) = d2(j, i) = distance_.Squared(*points_[i], *points_[j]);
        pairs.push_back(d2(i, j));
      }
    }
    if (!pairs.empty()) {
      std::nth_element(pairs.begin(), pairs.begin() + pairs.size() / 2, pairs.end());
      const double median = std::sqrt(pairs[pairs.size() / 2]);
      if (median > 0) length_scale_ = median;
    }
    const Eigen::MatrixXd k = Kernel(d2);
    for (double noise = kNoise; noise < 1; noise *= 10) {
      llt_.compute(k + noise * Eigen::MatrixXd::Identity(n, n));
      if (llt_.info() == Eigen::Success) break;
    }
    alpha_ = llt_.solve(targets);
  }

  // The posterior mean and standard deviation at each candidate.
  void Predict(const std::vector<Assignment>& candidates, Eigen::VectorXd* mean,
               Eigen::VectorXd* sd) const {
    Eigen::MatrixXd d2(points_.size(), candidates.size());
    for (size_t j = 0; j < candidates.size(); ++j) {
      for (size_t i = 0; i < points_.size(); ++i) {
        d2(i, j) = distance_.Squared(*points_[i], candidates[j]);
      }
    }
    const Eigen::MatrixXd k = Kernel(d2);
    *mean = k.transpose() * alpha_;
    const Eigen::MatrixXd v = llt_.matrixL().solve(k);
    *sd = (1.0 - v.colwise().squaredNorm().array()).max(0.0).sqrt().matrix().transpose();
  }

 private:
  Eigen::MatrixXd Kernel(const Eigen::MatrixXd& d2) const {
    return (-d2.array() / (2 * length_scale_ * length_scale_)).exp().matrix();
  }

  const FeatureDistance& distance_;
  std::vector<const Assignment*> points_;
  double length_scale_ = 1;
  Eigen::LLT<Eigen::MatrixXd> llt_;
  Eigen::VectorXd alpha_;
};

class BayesianOptimisation {
 public:
  BayesianOptimisation(const cost::CostModel& model, const SchedulerOptions& options)
      : context_(model, options, kBayesOptBudget),
        distance_(model),
        num_types_(model.num_types()) {}

  PricedPlan Run(absl::string_view name) {
    bool more = true;
    for (int t = 0; more && t < num_types_; ++t) more = Add(context_.Homogeneous(t));
    if (more) more = Add(FastestAssignment(context_.model()));
    for (int i = 0; more && i < kInitialRandom; ++i) more = Add(context_.RandomAssignment());
    while (more && !context_.Done()) {
      std::vector<Assignment> pool = CandidatePool();
      if (pool.empty()) break;
      more = Add(std::move(pool[Acquire(pool)]));
    }
    return context_.Finish(name);
  }

 private:
  struct Point {
    Assignment assignment;
    double score;
  };

  // Evaluates `assignment` and records it if new; false if the budget ran out first.
  bool Add(Assignment assignment) {
    const bool seen = context_.Seen(assignment);
    std::optional<double> score = context_.Evaluate(assignment);
    if (!score) return false;
    if (!seen) history_.push_back({std::move(assignment), *score});
    return true;
  }

  // Indices into history_ by score, best first (earlier first on ties).
  std::vector<size_t> Ranking() const {
    std::vector<size_t> order(history_.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return history_[a].score < history_[b].score; });
    return order;
  }

  // The GP's points: all, or the kMaxGpPoints / 2 best and then the most recent others.
  std::vector<size_t> TrainingSet() const {
    std::vector<size_t> chosen = Ranking();
    if (chosen.size() <= kMaxGpPoints) return chosen;
    chosen.resize(kMaxGpPoints / 2);
    std::vector<bool> taken(history_.size(), false);
    for (size_t i : chosen) taken[i] = true;
    for (size_t i = history_.size(); i-- > 0 && chosen.size() < kMaxGpPoints;) {
      if (!taken[i]) chosen.push_back(i);
    }
    return chosen;
  }

  // The GP targets of `points`, standardized: scores, with infeasible ones moved to just above
  // the worst feasible score (see the file comment).
  Eigen::VectorXd Targets(const std::vector<size_t>& points) const {
    double worst_feasible = -cost::kInfinity;
    for (size_t i : points) {
      if (history_[i].score < kInfeasibleScore) {
        worst_feasible = std::max(worst_feasible, history_[i].score);
      }
    }
    Eigen::VectorXd y(points.size());
    for (size_t k = 0; k < points.size(); ++k) {
      const double score = history_[points[k]].score;
      const bool shifted = score >= kInfeasibleScore && worst_feasible > -cost::kInfinity;
      y(k) = shifted ? worst_feasible + 1 + (score - kInfeasibleScore) : score;
    }
    const double mean = y.mean();
    const double sd = std::sqrt((y.array() - mean).square().mean());
    return ((y.array() - mean) / (sd > 1e-12 ? sd : 1.0)).matrix();
  }

  // Up to kPoolSize distinct assignments not yet evaluated.
  std::vector<Assignment> CandidatePool() {
    const std::vector<size_t> ranking = Ranking();
    const size_t parents = std::min(kParents, ranking.size());
    const int num_layers = static_cast<int>(history_.front().assignment.size());
    std::uniform_int_distribution<int> layer(0, num_layers - 1), changes(1, kMaxLayerChanges);
    absl::flat_hash_set<Assignment> pooled;
    std::vector<Assignment> pool;
    for (size_t attempt = 0; pool.size() < kPoolSize && attempt < 4 * kPoolSize; ++attempt) {
      Assignment candidate;
      if (attempt % 4 == 3) {
        candidate = context_.RandomAssignment();
      } else {
        candidate = history_[ranking[attempt % parents]].assignment;
        for (int c = changes(context_.rng()); c > 0; --c) {
          context_.MutateLayer(candidate, layer(context_.rng()));
        }
      }
      if (context_.Seen(candidate) || !pooled.insert(candidate).second) continue;
      pool.push_back(std::move(candidate));
    }
    return pool;
  }

  // The index in `pool` of the candidate with the largest expected improvement.
  size_t Acquire(const std::vector<Assignment>& pool) const {
    const std::vector<size_t> training = TrainingSet();
    const Eigen::VectorXd y = Targets(training);
    std::vector<const Assignment*> points;
    for (size_t i : training) points.push_back(&history_[i].assignment);
    GaussianProcess gp(distance_, std::move(points), y);
    Eigen::VectorXd mean, sd;
    gp.Predict(pool, &mean, &sd);
    const double best = y.minCoeff();
    size_t chosen = 0;
    double chosen_ei = -1;
    for (size_t j = 0; j < pool.size(); ++j) {
      const double ei = ExpectedImprovement(best, mean(j), sd(j));
      if (ei > chosen_ei) {
        chosen = j;
        chosen_ei = ei;
      }
    }
    return chosen;
  }

  SearchContext context_;
  const FeatureDistance distance_;
  const int num_types_;
  std::vector<Point> history_;  // every plan evaluated, in order
};

class BayesOptScheduler : public Scheduler {
 public:
  absl::string_view name() const override { return "bo"; }
  absl::StatusOr<PricedPlan> Schedule(const cost::CostModel& model,
                                      const SchedulerOptions& options) override {
    return BayesianOptimisation(model, options).Run(name());
  }
};

}  // namespace

std::unique_ptr<Scheduler> NewBayesOptScheduler() { return std::make_unique<BayesOptScheduler>(); }

}  // namespace heterps::sched
