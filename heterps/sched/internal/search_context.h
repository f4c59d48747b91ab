// Bookkeeping shared by the randomized searches (genetic, bo, random): the types each layer may
// take, the random source, the cache of provisioned plans and the budget.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "heterps/base/deadline.h"
#include "heterps/sched/priced_plan.h"
#include "heterps/sched/scheduler.h"

namespace heterps::sched::internal {

// Lower is better. A feasible plan scores log(cost_usd). An infeasible one scores
// kInfeasibleScore + log(1 + shortfall): worse than every feasible plan (no job costs e^1000 USD),
// and better the nearer the plan comes to feasibility, so that a search moves towards feasible
// plans before it compares costs.
constexpr double kInfeasibleScore = 1000;
// Evaluations between calls of SchedulerOptions::progress.
constexpr int64_t kProgressEvery = 64;

inline double Score(const PricedPlan& plan) {
  return plan.feasible ? std::log(plan.cost_usd)
                       : kInfeasibleScore + std::log1p(plan.why.shortfall);
}

// The state of a randomized search over assignments: the types each layer may take (those that
// can hold the layer alone, CostModel::CanHold; all types when none can), the random source, and
// the plans provisioned so far. Each distinct assignment is provisioned once and counts once
// against the budget, so revisiting a plan is free. Stops provisioning when the budget or the
// deadline is spent, except that the first plan is always provisioned so that the search has a
// result.
class SearchContext {
 public:
  SearchContext(const cost::CostModel& model, const SchedulerOptions& options,
                int64_t default_budget)
      : model_(model),
        options_(options),
        budget_(options.max_plans > 0 ? options.max_plans : default_budget),
        deadline_(options.time_limit_seconds),
        rng_(options.seed) {
    for (int l = 0; l < model.num_layers(); ++l) {
      std::vector<int> fit;
      for (int t = 0; t < model.num_types(); ++t) {
        if (model.CanHold(l, l, t)) fit.push_back(t);
      }
      if (fit.empty()) {
        for (int t = 0; t < model.num_types(); ++t) fit.push_back(t);
      }
      space_ *= static_cast<double>(fit.size());
      allowed_.push_back(std::move(fit));
    }
  }

  const cost::CostModel& model() const { return model_; }
  // allowed()[l]: the types layer l may take, ascending.
  const std::vector<std::vector<int>>& allowed() const { return allowed_; }
  // How many assignments the allowed types give (may be astronomically large).
  double space() const { return space_; }
  std::mt19937_64& rng() { return rng_; }
  int64_t evaluated() const { return static_cast<int64_t>(scores_.size()); }

  // The score of `assignment`: cached, or provisioned now. nullopt for a new plan once Spent().
  std::optional<double> Evaluate(const std::vector<int>& assignment) {
    if (auto it = scores_.find(assignment); it != scores_.end()) return it->second;
    if (Spent()) return std::nullopt;
    PricedPlan plan = PricePlan(model_, assignment);
    const double score = Score(plan);
    scores_.emplace(assignment, score);
    if (scores_.size() == 1 || Better(plan, best_)) best_ = std::move(plan);
    if (options_.progress && evaluated() % kProgressEvery == 0) {
      options_.progress(evaluated(), BestCost());
    }
    return score;
  }
  bool Seen(const std::vector<int>& assignment) const { return scores_.contains(assignment); }
  // The budget of plans or the time is spent.
  bool Spent() const { return evaluated() >= budget_ || (evaluated() > 0 && deadline_.Expired()); }
  // Spent, or every allowed assignment has been provisioned.
  bool Done() const { return Spent() || static_cast<double>(evaluated()) >= space_; }

  int RandomType(int l) {
    const std::vector<int>& types = allowed_[l];
    return types[std::uniform_int_distribution<size_t>(0, types.size() - 1)(rng_)];
  }
  std::vector<int> RandomAssignment() {
    std::vector<int> assignment(allowed_.size());
    for (size_t l = 0; l < allowed_.size(); ++l) assignment[l] = RandomType(static_cast<int>(l));
    return assignment;
  }
  // Type t on every layer that t can hold; a random allowed type on the others.
  std::vector<int> Homogeneous(int t) {
    std::vector<int> assignment(allowed_.size());
    for (size_t l = 0; l < allowed_.size(); ++l) {
      const std::vector<int>& types = allowed_[l];
      const bool fits = std::binary_search(types.begin(), types.end(), t);
      assignment[l] = fits ? t : RandomType(static_cast<int>(l));
    }
    return assignment;
  }
  // Moves layer l to another allowed type, chosen uniformly; unchanged if it has no other.
  void MutateLayer(std::vector<int>& assignment, int l) {
    const std::vector<int>& types = allowed_[l];
    if (types.size() < 2) return;
    const size_t pick = std::uniform_int_distribution<size_t>(0, types.size() - 2)(rng_);
    const size_t current = static_cast<size_t>(
        std::lower_bound(types.begin(), types.end(), assignment[l]) - types.begin());
    assignment[l] = types[pick < current ? pick : pick + 1];
  }

  // The best plan found (by Better), labelled for the scheduler `name`.
  PricedPlan Finish(absl::string_view name) {
    if (scores_.empty()) Evaluate(RandomAssignment());
    PricedPlan plan = best_;
    plan.scheduler = std::string(name);
    plan.certified_optimal = false;
    plan.plans_evaluated = evaluated();
    plan.search_seconds = deadline_.Elapsed();
    if (options_.progress) options_.progress(evaluated(), BestCost());
    return plan;
  }

 private:
  double BestCost() const { return best_.feasible ? best_.cost_usd : cost::kInfinity; }

  const cost::CostModel& model_;
  const SchedulerOptions& options_;
  const int64_t budget_;
  const base::Deadline deadline_;
  std::mt19937_64 rng_;
  std::vector<std::vector<int>> allowed_;
  double space_ = 1;
  absl::flat_hash_map<std::vector<int>, double> scores_;
  PricedPlan best_;
};

}  // namespace heterps::sched::internal
