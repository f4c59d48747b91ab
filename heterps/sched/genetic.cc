// The genetic scheduler: a generational genetic algorithm over assignments (a type per layer).
//
// The population (32) starts with the homogeneous plans, type t on every layer it can hold, for as
// many types as the population allows; random assignments fill the rest. Each generation keeps the
// best 2 (elitism) and breeds the rest: two parents from tournaments of 3, a two-point crossover on
// the layer sequence (it keeps runs of layers, the stages, together), and a mutation of each layer
// with probability 1/L to another type that can hold it. A child that is a plan already seen is
// mutated again, a few times, so that the budget buys new plans. The search ends when the budget of
// plans (default 2000) or the time is spent, when every plan has been seen, or after 50
// generations without a new plan.
//
// Fitness, lower is better: log(cost_usd) for a feasible plan; 1000 + log(1 + shortfall) for an
// infeasible one, so that infeasible plans lose to every feasible one and the nearer to feasible
// win among themselves.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "heterps/base/deadline.h"
#include "heterps/sched/plan.h"
#include "heterps/sched/schedulers.h"

namespace heterps::sched {
namespace {

// ---- Search bookkeeping shared by genetic.cc, bayes_opt.cc and random_search.cc (identical). ----

// Lower is better. A feasible plan scores log(cost_usd). An infeasible one scores
// kInfeasibleScore + log(1 + shortfall): worse than every feasible plan (no job costs e^1000 USD),
// and better the nearer the plan comes to feasibility, so that a search moves towards feasible
// plans before it compares costs.
constexpr double kInfeasibleScore = 1000;
// Evaluations between calls of SchedulerOptions::progress.
constexpr int64_t kProgressEvery = 64;

double Score(const Plan& plan) {
  return plan.feasible ? std::log(plan.cost_usd)
                       : kInfeasibleScore + std::log1p(plan.why.shortfall);
}

// The state of a randomized search over assignments: the types each layer may take (those that
// can hold the layer alone; all types when none can), the random source, and the plans provisioned
// so far. Each distinct assignment is provisioned once and counts once against the budget, so
// revisiting a plan is free. Stops provisioning when the budget or the deadline is spent, except
// that the first plan is always provisioned so that the search has a result.
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
        if (model.StageMemoryBytes(l, l) <= model.type(t).memory) fit.push_back(t);
      }
      if (fit.empty()) {
        for (int t = 0; t < model.num_types(); ++t) fit.push_back(t);
      }
      space_ *= static_cast<double>(fit.size());
      allowed_.push_back(std::move(fit));
    }
  }

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
    Plan plan = MakePlan(model_, assignment);
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
  bool Spent() const {
    return evaluated() >= budget_ || (evaluated() > 0 && deadline_.Expired());
  }
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
  Plan Finish(absl::string_view name) {
    if (scores_.empty()) Evaluate(RandomAssignment());
    Plan plan = best_;
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
  Plan best_;
};

// ---- End of the shared bookkeeping. ----

constexpr int64_t kDefaultBudget = 2000;
constexpr size_t kPopulation = 32;
constexpr size_t kElite = 2;
constexpr int kTournament = 3;
constexpr int kDuplicateRetries = 4;  // extra mutations of a child that is a plan already seen
constexpr int kMaxStalledGenerations = 50;

struct Individual {
  std::vector<int> assignment;
  double score = 0;
};

class Evolution {
 public:
  Evolution(const cost::CostModel& model, const SchedulerOptions& options)
      : context_(model, options, kDefaultBudget), num_types_(model.num_types()) {}

  Plan Run(absl::string_view name) {
    int stalled = 0;
    if (Initialise()) {
      while (!context_.Done() && stalled < kMaxStalledGenerations) {
        const int64_t before = context_.evaluated();
        if (!NextGeneration()) break;
        stalled = context_.evaluated() > before ? 0 : stalled + 1;
      }
    }
    return context_.Finish(name);
  }

 private:
  // Fills the population; false if the budget ran out first.
  bool Initialise() {
    const size_t homogeneous = std::min(static_cast<size_t>(num_types_), kPopulation);
    for (size_t i = 0; i < kPopulation; ++i) {
      std::vector<int> assignment = i < homogeneous ? context_.Homogeneous(static_cast<int>(i))
                                                    : context_.RandomAssignment();
      if (!Add(std::move(assignment), population_)) return false;
    }
    return true;
  }

  // Replaces the population by the elite and their offspring; false if the budget ran out first.
  bool NextGeneration() {
    std::stable_sort(population_.begin(), population_.end(),
                     [](const Individual& a, const Individual& b) { return a.score < b.score; });
    std::vector<Individual> next(population_.begin(),
                                 population_.begin() + std::min(kElite, population_.size()));
    while (next.size() < population_.size()) {
      const std::vector<int>& mother = Tournament();
      const std::vector<int>& father = Tournament();
      std::vector<int> child = Crossover(mother, father);
      Mutate(child);
      for (int retry = 0; retry < kDuplicateRetries && context_.Seen(child); ++retry) {
        context_.MutateLayer(child, RandomLayer(child.size()));
      }
      if (!Add(std::move(child), next)) return false;
    }
    population_ = std::move(next);
    return true;
  }

  // Scores `assignment` and appends it to `to`; false if the budget ran out first.
  bool Add(std::vector<int> assignment, std::vector<Individual>& to) {
    std::optional<double> score = context_.Evaluate(assignment);
    if (!score) return false;
    to.push_back({std::move(assignment), *score});
    return true;
  }

  // The fittest of kTournament individuals drawn with replacement (the first drawn on ties).
  const std::vector<int>& Tournament() {
    std::uniform_int_distribution<size_t> pick(0, population_.size() - 1);
    size_t best = pick(context_.rng());
    for (int i = 1; i < kTournament; ++i) {
      const size_t other = pick(context_.rng());
      if (population_[other].score < population_[best].score) best = other;
    }
    return population_[best].assignment;
  }

  // `a` with the layers between two random cut points taken from `b`.
  std::vector<int> Crossover(const std::vector<int>& a, const std::vector<int>& b) {
    std::uniform_int_distribution<size_t> cut(0, a.size());
    size_t begin = cut(context_.rng()), end = cut(context_.rng());
    if (begin > end) std::swap(begin, end);
    std::vector<int> child = a;
    std::copy(b.begin() + begin, b.begin() + end, child.begin() + begin);
    return child;
  }

  void Mutate(std::vector<int>& child) {
    std::bernoulli_distribution flip(1.0 / static_cast<double>(child.size()));
    for (size_t l = 0; l < child.size(); ++l) {
      if (flip(context_.rng())) context_.MutateLayer(child, static_cast<int>(l));
    }
  }

  int RandomLayer(size_t num_layers) {
    return static_cast<int>(
        std::uniform_int_distribution<size_t>(0, num_layers - 1)(context_.rng()));
  }

  SearchContext context_;
  const int num_types_;
  std::vector<Individual> population_;
};

class GeneticScheduler : public Scheduler {
 public:
  absl::string_view name() const override { return "genetic"; }
  absl::StatusOr<Plan> Schedule(const cost::CostModel& model,
                                const SchedulerOptions& options) override {
    return Evolution(model, options).Run(name());
  }
};

}  // namespace

std::unique_ptr<Scheduler> NewGeneticScheduler() { return std::make_unique<GeneticScheduler>(); }

}  // namespace heterps::sched
