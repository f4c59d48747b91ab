// The local search around a good plan that the searches share: `rl` spends the end of its budget
// on it, `exact` improves its incumbent with it before its certifying search goes on.
//
// Not thread-safe: a PlanCache and a search over it belong to one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "heterps/base/deadline.h"
#include "heterps/cost/cost_model.h"
#include "heterps/sched/priced_plan.h"

namespace heterps::sched {

// Layers [first, last] on type t with the fewest units that meet the throughput limit: how many
// (0 where even all of them do not, or where a first stage would break the workload's rules on
// it), their price per hour and their seconds per batch (both infinite where none). What the
// searches' estimates of a stage's cost start from.
struct FewestUnits {
  int64_t units = 0;
  double usd_per_hour = cost::kInfinity;
  double seconds = cost::kInfinity;
};
FewestUnits StageAtTheLimit(const cost::CostModel& model, int first, int last, int t);

// Provisions plans once each (PricePlan), counts them against a budget, keeps the best.
class PlanCache {
 public:
  // `on_improvement` (may be empty) hears (plans evaluated, best cost or +inf) at every new best.
  PlanCache(const cost::CostModel& model, int64_t budget,
            std::function<void(int64_t, double)> on_improvement = {})
      : model_(model), budget_(budget), on_improvement_(std::move(on_improvement)) {}

  bool exhausted() const { return evaluated_ >= budget_; }
  int64_t evaluated() const { return evaluated_; }
  const PricedPlan& best() const { return best_; }
  bool have_best() const { return have_best_; }
  int64_t improvements() const { return improvements_; }

  // The plan for `assignment`, or nullptr when it is new and the budget is spent. The pointer
  // stays valid for the cache's lifetime.
  const PricedPlan* Evaluate(const std::vector<int>& assignment);

 private:
  const cost::CostModel& model_;
  const int64_t budget_;
  std::function<void(int64_t, double)> on_improvement_;
  int64_t evaluated_ = 0;
  int64_t improvements_ = 0;
  absl::flat_hash_map<std::string, PricedPlan> cache_;
  PricedPlan best_;
  bool have_best_ = false;
};

struct LocalSearchOptions {
  // Types tried per split move: the neighbouring stages' types, then `ranked`'s first ones for
  // the layer concerned, then the others in index order, this many in all beyond the neighbours.
  int types_per_move = 6;
  int window_plans = 3;  // plans evaluated per window of one or two stages (Rewindow)
  uint64_t seed = 0;     // the kicks' random source
  // Where given, [l]: the types layer l should try first, best first (rl: its policy's ranking).
  const std::vector<std::vector<int>>* ranked = nullptr;
};

// The layers of one stage of the best plan, or of two adjacent ones (a window), taken again as one
// stage, or as two of any two types at any cut, the other stages and the servers kept as they
// are, the `window_plans` choices estimated cheapest evaluated; window by window, until no window
// improves the cache's best plan.
void Rewindow(const cost::CostModel& model, PlanCache& cache, const base::Deadline& deadline,
              int window_plans);

// Every move of the local search from `current`, most promising kinds first: move a stage
// boundary by one layer; give a whole stage any other type; split a stage.
std::vector<std::vector<int>> LocalMoves(const cost::CostModel& model,
                                         const std::vector<int>& current,
                                         const LocalSearchOptions& options);

// First-improvement local search from `start` until no move helps; returns the local optimum.
// Stops early when the budget or the time runs out.
std::vector<int> Descend(const cost::CostModel& model, PlanCache& cache, std::vector<int> start,
                         const base::Deadline& deadline, const LocalSearchOptions& options);

// Iterated local search around the cache's best plan: window re-solves and a descent; then, while
// budget and time remain, perturb the best plan (retype one to three random segments) and descend
// again, until 64 kicks in a row reach no plan not yet seen. The cache keeps the best plan.
void Polish(const cost::CostModel& model, PlanCache& cache, const base::Deadline& deadline,
            const LocalSearchOptions& options);

}  // namespace heterps::sched
