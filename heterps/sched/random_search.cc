// The random scheduler: assignments drawn uniformly from the allowed types of each layer (those
// that can hold it), the best kept. Draws are without replacement, so a budget at least the size of
// the space visits every plan: a lazy Fisher-Yates shuffle of the plans' indices in mixed radix,
// which needs memory for the plans drawn only. Spaces beyond 2^62 plans are sampled with
// replacement, repeats being then vanishingly rare (and free: a repeat is not provisioned again).
// Budget: 2000 plans by default.
//
// Plans are compared with Better; the shared score (log(cost_usd) when feasible, 1000 +
// log(1 + shortfall) when not) is kept only for the bookkeeping the schedulers share.
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

constexpr int64_t kRandomSearchBudget = 2000;
constexpr uint64_t kMaxShuffledSpace = uint64_t{1} << 62;
// With replacement, stop after this many draws in a row that were all plans already seen.
constexpr int kMaxRepeats = 1000;

// The number of allowed assignments, or 0 if above kMaxShuffledSpace.
uint64_t ExactSpace(const std::vector<std::vector<int>>& allowed) {
  uint64_t space = 1;
  for (const std::vector<int>& types : allowed) {
    if (space > kMaxShuffledSpace / types.size()) return 0;
    space *= types.size();
  }
  return space;
}

// The assignment numbered `index` in mixed radix, layer 0 the least significant digit.
std::vector<int> Decode(const std::vector<std::vector<int>>& allowed, uint64_t index) {
  std::vector<int> assignment(allowed.size());
  for (size_t l = 0; l < allowed.size(); ++l) {
    assignment[l] = allowed[l][index % allowed[l].size()];
    index /= allowed[l].size();
  }
  return assignment;
}

void SampleWithoutReplacement(SearchContext& context, uint64_t space) {
  // The shuffled order of [0, space): position i holds moved[i] if present, else i.
  absl::flat_hash_map<uint64_t, uint64_t> moved;
  auto at = [&moved](uint64_t i) {
    auto it = moved.find(i);
    return it == moved.end() ? i : it->second;
  };
  for (uint64_t i = 0; i < space && !context.Done(); ++i) {
    const uint64_t j = std::uniform_int_distribution<uint64_t>(i, space - 1)(context.rng());
    const uint64_t drawn = at(j);
    moved[j] = at(i);
    if (!context.Evaluate(Decode(context.allowed(), drawn))) return;
  }
}

void SampleWithReplacement(SearchContext& context) {
  for (int repeats = 0; repeats < kMaxRepeats && !context.Done();) {
    std::vector<int> assignment = context.RandomAssignment();
    repeats = context.Seen(assignment) ? repeats + 1 : 0;
    if (!context.Evaluate(assignment)) return;
  }
}

class RandomScheduler : public Scheduler {
 public:
  absl::string_view name() const override { return "random"; }
  absl::StatusOr<PricedPlan> Schedule(const cost::CostModel& model,
                                      const SchedulerOptions& options) override {
    SearchContext context(model, options, kRandomSearchBudget);
    const uint64_t space = ExactSpace(context.allowed());
    if (space > 0) {
      SampleWithoutReplacement(context, space);
    } else {
      SampleWithReplacement(context);
    }
    return context.Finish(name());
  }
};

}  // namespace

std::unique_ptr<Scheduler> NewRandomScheduler() { return std::make_unique<RandomScheduler>(); }

}  // namespace heterps::sched
