#include "heterps/sched/local_search.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <tuple>
#include <utility>

namespace heterps::sched {

namespace {

std::string Key(const std::vector<int>& assignment) {
  return std::string(assignment.begin(), assignment.end());
}

// The types `layer` should try first (LocalSearchOptions::ranked); none where no ranking is given.
const std::vector<int>& RankedTypes(const LocalSearchOptions& options, int layer) {
  static const std::vector<int> kNone;
  return options.ranked == nullptr || options.ranked->empty() ? kNone : (*options.ranked)[layer];
}

}  // namespace

FewestUnits StageAtTheLimit(const cost::CostModel& model, int first, int last, int t) {
  const double x = model.StageSeconds(first, last, t);
  const int64_t k =
      std::isfinite(x) ? model.MinStageUnits(first, last, x, t, model.max_bottleneck_seconds()) : 0;
  if (k == 0) return {};
  const auto& type = model.type(t);
  return {k, type.price_per_hour * static_cast<double>(k),
          cost::CostModel::ExecSeconds(x, type.dp_loss, k)};
}

const PricedPlan* PlanCache::Evaluate(const std::vector<int>& assignment) {
  std::string key = Key(assignment);
  auto it = cache_.find(key);
  if (it != cache_.end()) return &it->second;
  if (exhausted()) return nullptr;
  ++evaluated_;
  PricedPlan plan = PricePlan(model_, assignment);
  if (!have_best_ || Better(plan, best_)) {
    best_ = plan;
    have_best_ = true;
    ++improvements_;
    if (on_improvement_) {
      on_improvement_(evaluated_, best_.feasible ? best_.cost_usd : cost::kInfinity);
    }
  }
  return &cache_.emplace(std::move(key), std::move(plan)).first->second;
}

// The layers of one stage of the best plan, or of two adjacent ones (a window), taken again as one
// stage, or as two of any two types at any cut, the other stages and the servers kept as they
// are: every choice is ranked by an estimate of the job's cost (each new stage with the fewest
// units that meet the limit of what the other stages leave of its type; the hourly price of every
// stage and the servers times the slowest one's seconds per batch), and the `window_plans`
// cheapest are evaluated. Window by window, until no window improves the best plan. A plan whose
// optimum chains several small pools (spot pools of one or two units) differs from a good plan of
// another shape in several stages at once: single moves reach it only through plans that break a
// type's units.
void Rewindow(const cost::CostModel& model, PlanCache& evaluator, const base::Deadline& deadline,
              int window_plans) {
  const int T = model.num_types();
  bool improved = true;
  while (improved && evaluator.have_best() && evaluator.best().feasible && !evaluator.exhausted() &&
         !deadline.Expired()) {
    improved = false;
    const PricedPlan best = evaluator.best();
    const int S = static_cast<int>(best.stages.size());
    // Windows of one stage (split in two), then of two adjacent stages.
    for (int w = 0; w < 2 * S - 1 && !improved; ++w) {
      const int s = w < S ? w : w - S, width = w < S ? 1 : 2;
      const int first = best.stages[s].spec.first, last = best.stages[s + width - 1].spec.last;
      std::vector<int64_t> left(T);
      for (int t = 0; t < T; ++t) left[t] = model.type(t).units;
      double fixed_price = 0, fixed_seconds = 0;
      for (int o = 0; o < S; ++o) {
        if (o >= s && o < s + width) continue;
        const PricedStage& st = best.stages[o];
        left[st.spec.type] -= st.units;
        fixed_price += model.type(st.spec.type).price_per_hour * static_cast<double>(st.units);
        fixed_seconds = std::max(fixed_seconds, st.seconds_per_batch);
      }
      if (best.ps.type >= 0) {
        left[best.ps.type] -= best.ps.shards;
        fixed_price += best.ps.usd_per_hour;
        fixed_seconds = std::max(fixed_seconds, best.ps.seconds_per_batch);
      }
      // Layers [i, j] on t at the limit, with none where the other stages leave too few units.
      auto side = [&](int i, int j, int t) {
        const FewestUnits s = StageAtTheLimit(model, i, j, t);
        return s.units <= left[t] ? s : FewestUnits{};
      };
      const int n = last - first + 1;
      // front[t][c], back[t][c]: layers [first, first + c - 1] and [first + c, last] on t.
      std::vector<std::vector<FewestUnits>> front(T), back(T);
      for (int t = 0; t < T; ++t) {
        front[t].resize(n + 1);
        back[t].resize(n + 1);
        for (int c = 1; c <= n; ++c) front[t][c] = side(first, first + c - 1, t);
        for (int c = 0; c < n; ++c) back[t][c] = side(first + c, last, t);
      }
      std::vector<std::tuple<double, int, int, int>> choices;  // {estimate, a, b, cut}
      auto consider = [&](double price, double seconds, int a, int b, int cut) {
        const double estimate = (fixed_price + price) * std::max(fixed_seconds, seconds);
        if (std::isfinite(estimate)) choices.push_back({estimate, a, b, cut});
      };
      for (int a = 0; a < T; ++a) {
        consider(front[a][n].usd_per_hour, front[a][n].seconds, a, a, n);
        for (int b = 0; b < T; ++b) {
          if (b == a) continue;
          for (int c = 1; c < n; ++c) {
            consider(front[a][c].usd_per_hour + back[b][c].usd_per_hour,
                     std::max(front[a][c].seconds, back[b][c].seconds), a, b, c);
          }
        }
      }
      const size_t keep = std::min<size_t>(choices.size(), window_plans);
      std::partial_sort(choices.begin(), choices.begin() + keep, choices.end());
      const int64_t before = evaluator.improvements();
      for (size_t i = 0; i < keep && !evaluator.exhausted(); ++i) {
        const auto [estimate, a, b, cut] = choices[i];
        std::vector<int> assignment = best.assignment;
        std::fill(assignment.begin() + first, assignment.begin() + first + cut, a);
        std::fill(assignment.begin() + first + cut, assignment.begin() + last + 1, b);
        evaluator.Evaluate(assignment);
      }
      improved = evaluator.improvements() > before;
    }
  }
}

// The local search's neighbourhood of a plan, in this order: move a stage boundary by one layer;
// give a whole stage any other type; split a stage, giving the layers from a cut point on (or up
// to it) another type, taken from the ranking of the layer concerned (the `types_per_move` it
// prefers, plus the neighbouring stages' types).
std::vector<std::vector<int>> LocalMoves(const cost::CostModel& model,
                                         const std::vector<int>& current,
                                         const LocalSearchOptions& options) {
  const std::vector<cost::StageSpec> stages = StagesOf(current);
  auto candidates = [&](int layer, int s) {
    std::vector<int> types;
    auto add = [&](int t) {
      if (t != stages[s].type && std::find(types.begin(), types.end(), t) == types.end()) {
        types.push_back(t);
      }
    };
    if (s > 0) add(stages[s - 1].type);
    if (s + 1 < static_cast<int>(stages.size())) add(stages[s + 1].type);
    const std::vector<int>& ranked = RankedTypes(options, layer);
    for (size_t i = 0;
         i < ranked.size() && static_cast<int>(types.size()) < options.types_per_move + 2; ++i) {
      add(ranked[i]);
    }
    for (int t = 0;
         t < model.num_types() && static_cast<int>(types.size()) < options.types_per_move + 2;
         ++t) {
      add(t);
    }
    return types;
  };
  std::vector<std::vector<int>> moves;
  auto retype = [&](int first, int last, int t) {
    std::vector<int> m = current;
    std::fill(m.begin() + first, m.begin() + last + 1, t);
    moves.push_back(std::move(m));
  };
  const int num_stages = static_cast<int>(stages.size());
  for (int s = 0; s + 1 < num_stages; ++s) {
    retype(stages[s].last, stages[s].last, stages[s + 1].type);
    retype(stages[s + 1].first, stages[s + 1].first, stages[s].type);
  }
  for (int s = 0; s < num_stages; ++s) {
    for (int t = 0; t < model.num_types(); ++t) {
      if (t != stages[s].type && model.MayRun(stages[s].first, t)) {
        retype(stages[s].first, stages[s].last, t);
      }
    }
  }
  for (int s = 0; s < num_stages; ++s) {
    for (int cut = stages[s].first + 1; cut <= stages[s].last; ++cut) {
      for (int t : candidates(cut, s)) retype(cut, stages[s].last, t);
      for (int t : candidates(cut - 1, s)) retype(stages[s].first, cut - 1, t);
    }
  }
  return moves;
}

// First-improvement local search from `start` until no move helps; returns the local optimum.
// Stops early when the budget or the time runs out.
std::vector<int> Descend(const cost::CostModel& model, PlanCache& evaluator, std::vector<int> start,
                         const base::Deadline& deadline, const LocalSearchOptions& options) {
  const PricedPlan* here = evaluator.Evaluate(start);
  if (here == nullptr) return start;
  PricedPlan current = *here;
  bool improved = true;
  while (improved && !deadline.Expired()) {
    improved = false;
    for (const std::vector<int>& m : LocalMoves(model, current.assignment, options)) {
      if (deadline.Expired()) break;
      const PricedPlan* next = evaluator.Evaluate(m);
      if (next == nullptr) return current.assignment;
      if (Better(*next, current)) {
        current = *next;
        improved = true;
        break;
      }
    }
  }
  return current.assignment;
}

// Iterated local search: descend from the best plan; then, while budget and time remain, perturb
// the best plan (retype one to three random segments, with types the policy ranks highly) and
// descend again, until the kicks stop reaching new plans. The evaluator keeps the best plan.
void Polish(const cost::CostModel& model, PlanCache& evaluator, const base::Deadline& deadline,
            const LocalSearchOptions& options) {
  if (!evaluator.have_best()) return;
  std::mt19937_64 rng(options.seed ^ 0x5bd1e9955bd1e995ull);
  const int L = model.num_layers();
  // The types a kick may draw: those that may run a part of the job (all, without a residency
  // rule; a kick that puts an early layer outside the data's region is priced infeasible).
  std::vector<int> types;
  for (int t = 0; t < model.num_types(); ++t) {
    if (model.MayRun(L - 1, t)) types.push_back(t);
  }
  Rewindow(model, evaluator, deadline, options.window_plans);
  Descend(model, evaluator, evaluator.best().assignment, deadline, options);
  Rewindow(model, evaluator, deadline, options.window_plans);
  // Kicks that reach no plan not yet seen: the neighbourhood of the best plan is exhausted.
  constexpr int kFruitlessKicks = 64;
  int fruitless = 0;
  while (!evaluator.exhausted() && !deadline.Expired() && fruitless < kFruitlessKicks) {
    const int64_t before = evaluator.evaluated();
    std::vector<int> kick = evaluator.best().assignment;
    const int changes = 1 + static_cast<int>(rng() % 3);
    for (int c = 0; c < changes; ++c) {
      int first = static_cast<int>(rng() % L), last = static_cast<int>(rng() % L);
      if (first > last) std::swap(first, last);
      const std::vector<int>& ranked = RankedTypes(options, first);
      const int pool = std::min<int>(static_cast<int>(ranked.size()), options.types_per_move);
      const int t = pool > 0 && rng() % 2 == 0 ? ranked[rng() % pool] : types[rng() % types.size()];
      std::fill(kick.begin() + first, kick.begin() + last + 1, t);
    }
    Descend(model, evaluator, kick, deadline, options);
    fruitless = evaluator.evaluated() == before ? fruitless + 1 : 0;
  }
}

}  // namespace heterps::sched
