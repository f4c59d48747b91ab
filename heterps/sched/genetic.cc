// The genetic scheduler: a generational genetic algorithm over assignments (a type per layer).
//
// The population (32) starts with the best of the homogeneous plans (type t on every layer it can
// hold), every type's tried, so that a catalog of more types than the population is seeded by its
// best types rather than its first, and the fastest plan (FastestAssignment: feasible wherever
// speed alone decides); random assignments fill the rest. Each generation keeps the
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
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "heterps/base/deadline.h"
#include "heterps/sched/internal/search_context.h"
#include "heterps/sched/priced_plan.h"
#include "heterps/sched/schedulers.h"

namespace heterps::sched {
namespace {

using internal::SearchContext;

constexpr int64_t kGeneticBudget = 2000;
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
      : context_(model, options, kGeneticBudget), num_types_(model.num_types()) {}

  PricedPlan Run(absl::string_view name) {
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
    for (int t = 0; t < num_types_; ++t) {
      if (!Add(context_.Homogeneous(t), population_)) return false;
    }
    if (!Add(FastestAssignment(context_.model()), population_)) return false;
    std::stable_sort(population_.begin(), population_.end(),
                     [](const Individual& a, const Individual& b) { return a.score < b.score; });
    if (population_.size() > kPopulation) population_.resize(kPopulation);
    while (population_.size() < kPopulation) {
      if (!Add(context_.RandomAssignment(), population_)) return false;
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
  absl::StatusOr<PricedPlan> Schedule(const cost::CostModel& model,
                                      const SchedulerOptions& options) override {
    return Evolution(model, options).Run(name());
  }
};

}  // namespace

std::unique_ptr<Scheduler> NewGeneticScheduler() { return std::make_unique<GeneticScheduler>(); }

}  // namespace heterps::sched
