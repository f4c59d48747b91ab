// The exact scheduler. docs/schedulers.md explains the method; in short:
//
// The optimal plan's bottleneck time E* is one of the values ET(X_{i..j,t}, k) of some segment of
// layers i..j on some type t with k units. For a fixed E, the cheapest plan is a shortest path
// over layer segments (a dynamic program): stage i..j on t costs p_t k_min(i..j, t, E), and
// consecutive stages differ in type. Its value S(E) is non-increasing in E, so over a range of
// candidates [E_lo, E_hi] no plan costs less than c E_lo S(E_hi) (c = N / B / 3600): a best-first
// branch-and-bound over ranges of candidates skips most of them. The dynamic program ignores that
// stages of one type share that type's units; where its plan breaks that limit, a depth-first
// search with the dynamic program's suffix values as bounds finds the constrained optimum at that
// E. Its bounds are Lagrangian: each type's units get a price lambda_t >= 0, fitted by subgradient
// ascent at the root; at every node the dynamic program runs again on the remaining layers with
// prices p_t + lambda_t and only the units each type has left, minus lambda_t times those units,
// or, where that bound is the weaker one (deep in a plan), once more at the plain prices.
// The constrained optimum S_c(E) is non-increasing in E too (a plan that meets a bottleneck meets
// every larger one with no more units), so where a range's Lagrangian bound comes close to the
// incumbent but does not reach it, the search at E_hi with the range's budget (the incumbent over
// c E_lo) sets the whole range aside if it finds no plan below it, instead of splitting the range
// down to candidates that each prove the same.
// A candidate's depth-first search visits at most a node limit (4096 at first); one that reaches
// it proves nothing, and the candidate is set back and searched again with 4 times the limit,
// the set-back candidates sharing the work equally with the ranges still open: one hard
// bottleneck no longer holds up the rest (on 64 x 16 tight instances one search took the whole
// time limit).
// Every plan found is provisioned exactly by cost::Provision, so costs match brute force.
//
// The parameter servers, when priced, are one more stage of a free type: their ET values join the
// candidates; P(E), the cheapest servers' rate at E with the stages' units ignored, is also
// non-increasing, so a range's bound becomes c E_lo (S(E_hi) + P(E_hi)); at a candidate, each
// type's cheapest servers are tried in order of rate, with their units set aside from the stages'.
// A range's Lagrangian bound sets them aside too: the least over the servers' choices at E_hi of
// the dual with that choice's units set aside plus its rate, a bound on the stages and servers
// together that a range keeps apart from its bound on the stages alone.
#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "heterps/base/deadline.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/provisioner.h"
#include "heterps/sched/local_search.h"
#include "heterps/sched/schedulers.h"

namespace heterps::sched {
namespace {

using cost::CostModel;
using cost::kInfinity;

// 1 - 1e-12: a bound must beat the incumbent by more than rounding to be worth exploring.
constexpr double kStrictly = 1 - 1e-12;
// A range whose bound is within this factor of the incumbent is searched at its end before it is
// split (Run).
constexpr double kNear = 0.95;
// A candidate's depth-first search first visits at most this many nodes (SchedulerOptions::
// exact_first_nodes; about 0.1 s on a 64-layer, 16-type instance); each time it comes back, this
// many times more.
constexpr int64_t kFirstNodeLimit = 4096;
constexpr int64_t kNodeLimitGrowth = 4;

class ExactSearch {
 public:
  ExactSearch(const CostModel& model, const SchedulerOptions& options)
      : model_(model),
        options_(options),
        num_layers_(model.num_layers()),
        num_types_(model.num_types()),
        deadline_(options.time_limit_seconds),
        wan_(model.num_regions() > 1) {}

  PricedPlan Run();
  // RelaxedAssignments (schedulers.h).
  std::vector<std::vector<int>> RelaxedAt(int count);
  // BeamAssignments (schedulers.h).
  std::vector<std::vector<int>> BeamAt(int count, int width);

 private:
  double X(int i, int j, int t) const { return x_[(i * num_layers_ + j) * num_types_ + t]; }
  // The fewest units of layers i..j on type t at bottleneck e (0: none suffice, or a first stage
  // that breaks the workload's rules on it): CostModel::MinStageUnits on the cached X.
  int64_t KMin(int i, int j, int t, double e) const {
    return model_.MinStageUnits(i, j, X(i, j, t), t, e);
  }
  // P(e): the cheapest parameter servers' rate at bottleneck e, units shared with the stages
  // ignored (0 when they are not priced).
  double PsRate(double e) const { return model_.CheapestPsRate(e); }
  // The bound of a range of candidates [lo, hi] whose plans' stages cost at least `s` (sum p k)
  // and whose stages and servers together at least `v` (sum p k plus the servers' rate).
  double RangeCost(size_t lo, size_t hi, double s, double v) const {
    return model_.JobCost(cand_[lo], std::max(s + PsRate(cand_[hi]), v));
  }
  double Price(int t) const { return model_.type(t).price_per_hour; }
  double G(int i, int prev) const { return g_[i * (num_types_ + 1) + prev]; }

  void BuildStageTable();
  void BuildCandidates();
  // The dynamic program at bottleneck e, availability shared across stages ignored. Fills g_ and
  // h_ and returns S(e) = sum_s p_t k_s of the cheapest plan (kInfinity if none).
  double Relaxed(double e);
  std::vector<int> RelaxedAssignment() const;
  bool WithinUnits(const std::vector<int>& assignment, double e) const;
  // Whether the plan of the last Relaxed(e) fits the units beside the cheapest servers at e (then
  // its S(e) + P(e) is the least sum p k plus servers' rate of any plan at e).
  bool RelaxedFits(double e);
  // The cheapest plan at e that respects availability and beats `bound` (in sum p k), using the
  // g_ of the last Relaxed(e) as lower bounds. Empty if none.
  std::vector<int> Constrained(double e, double bound);
  void Dfs(int i, int prev, double cost);
  // Searches bottleneck e_hi for stage plans that, with the cheapest servers that leave room for
  // them, would cost less than the incumbent at bottleneck e_lo <= e_hi, and considers the plans
  // it finds. With `first_only`, stops at the first plan found; else finds the cheapest at e_hi
  // below that budget for each server choice. Each depth-first search visits at most
  // `node_limit` nodes: one that reaches it proves nothing (kOpen), and the caller searches the
  // candidate again later with a larger limit.
  enum class Outcome {
    kNone,  // proved: no plan with its bottleneck in [e_lo, e_hi] beats the incumbent
    kDone,  // searched to the end (first_only: a plan found), the incumbent updated
    kOpen,  // a search reached its node limit, or the time ran out
  };
  Outcome Evaluate(double e_lo, double e_hi, bool first_only, int64_t node_limit);
  // The cheapest plan at dfs_e_ that a beam of `width` partial plans per layer finds, each stage
  // within the units its type has left, ranked by cost so far plus the relaxed cost of the rest
  // (g_ of Relaxed(dfs_e_)). Empty if the beam ends with none.
  std::vector<int> Beam(int width) const;
  // The dynamic program over layers from.. at dfs_e_ with prices `price`, each stage limited
  // to `left[t]` units; fills g[m][prev] for m >= from. With `usage`, also the units per type of
  // the plan that achieves g[from][none], and, when collect_ is set and that plan (from layer 0)
  // fits the units left, its assignment joins collect_.
  void LimitedDp(int from, const std::vector<int64_t>& left, const std::vector<double>& price,
                 std::vector<double>& g, std::vector<int64_t>* usage);
  // Fits lambda_ by subgradient ascent on the Lagrangian dual at dfs_e_; returns the best bound.
  double FitMultipliers(double relaxed);
  // dfs_k_: the fewest units of each segment and type at bottleneck e.
  void PrepareUnits(double e);
  // A lower bound on sum p k plus the servers' rate of every plan that respects the units with a
  // bottleneck of at most e_hi: the least, over the choices of servers at e_hi, of the Lagrangian
  // dual with the servers' units set aside plus their rate (for fixed prices the dynamic
  // program's value only grows as the bottleneck shrinks, and each type's servers need more
  // shards, so this value at e_hi bounds the whole range); at least `relaxed` (S(e_hi)) plus
  // P(e_hi). `target`: the value that would prune.
  double RangeBound(double e_hi, double relaxed, double target);
  int64_t Units(int i, int j, int t) const {
    return dfs_k_[(i * num_layers_ + j) * num_types_ + t];
  }
  // The parameter servers' choices at e: each type's fewest shards, cheapest first (one choice
  // of no servers, type -1, when they are not priced).
  struct Servers {
    double rate = 0;
    int type = -1;
    int64_t shards = 0;
  };
  std::vector<Servers> ServerChoices(double e) const;
  // Sets a choice of servers' units aside from those the stages may take (units_) for its
  // lifetime.
  class UnitsAside {
   public:
    UnitsAside(std::vector<int64_t>& units, const Servers& servers)
        : units_(units), servers_(servers) {
      if (servers_.type >= 0) units_[servers_.type] -= servers_.shards;
    }
    ~UnitsAside() {
      if (servers_.type >= 0) units_[servers_.type] += servers_.shards;
    }
    UnitsAside(const UnitsAside&) = delete;
    UnitsAside& operator=(const UnitsAside&) = delete;

   private:
    std::vector<int64_t>& units_;
    const Servers servers_;
  };
  void Consider(const std::vector<int>& assignment);
  PricedPlan Infeasible();

  const CostModel& model_;
  const SchedulerOptions& options_;
  const int num_layers_, num_types_;
  base::Deadline deadline_;
  bool timed_out_ = false;
  // Units of each type the stages may take: all of them, less the servers' where set aside.
  std::vector<int64_t> units_;
  int64_t evaluated_ = 0;

  std::vector<double> x_;     // [i][j][t]: one unit's stage seconds; kInfinity if j < i or no fit
  std::vector<double> cand_;  // candidate bottlenecks <= E_max, ascending, distinct
  std::vector<double> g_;     // [i][prev]: cheapest cover of layers i.. whose first type != prev
  std::vector<double> h_;     // [i][t]: cheapest cover of layers i.. whose first stage is on t
  std::vector<int> h_end_;    // [i][t]: last layer of that first stage

  // The constrained depth-first search.
  double dfs_e_ = 0, dfs_best_ = 0;
  std::vector<int> dfs_current_, dfs_found_;
  bool dfs_first_only_ = false;  // Constrained stops at the first plan below its bound
  int64_t dfs_nodes_ = 0, dfs_node_limit_ = 0;  // nodes visited by Constrained, and its limit
  bool dfs_cut_ = false;                        // Constrained reached its node limit
  std::vector<int64_t> dfs_used_;
  std::vector<int64_t> dfs_k_;               // [i][j][t]: k_min(i..j, t, dfs_e_), 0 if none
  std::vector<std::vector<double>> dfs_g_;   // per depth: [m][prev] as g_, units left respected
  std::vector<double> lambda_;               // Lagrange multiplier per type (warm-started across E)
  std::vector<double> dfs_price_;            // p_t + lambda_t
  std::vector<double> plain_price_;          // p_t
  std::vector<std::vector<double>> dfs_g0_;  // per depth: as dfs_g_, at the plain prices
  // Across regions (docs/cost_model.md, "Links between regions"; wan_: the catalog has several):
  // the servers of the search under way, the longest a link may take in it (the bucket of
  // bottlenecks a candidate stands for ends at the next candidate), the dollars one unit of rate
  // (USD/h) costs at the range's lowest bottleneck (egress converts to rate at it, a lower bound
  // over the range), and the traffic of the plan so far.
  bool wan_ = false;
  Servers dfs_servers_;
  double dfs_link_limit_ = 0, dfs_usd_per_rate_ = 0;
  cost::WanLoad dfs_load_;
  // Where set, FitMultipliers adds the distinct plans of its dynamic programs that fit the
  // units (RelaxedAt).
  std::vector<std::vector<int>>* collect_ = nullptr;

  PricedPlan best_;
  bool have_best_ = false;
};

void ExactSearch::BuildStageTable() {
  x_.assign(static_cast<size_t>(num_layers_) * num_layers_ * num_types_, kInfinity);
  for (int i = 0; i < num_layers_; ++i) {
    for (int j = i; j < num_layers_; ++j) {
      for (int t = 0; t < num_types_; ++t) {
        x_[(i * num_layers_ + j) * num_types_ + t] = model_.StageSeconds(i, j, t);
      }
    }
  }
}

void ExactSearch::BuildCandidates() {
  const double e_max = model_.max_bottleneck_seconds();
  for (int i = 0; i < num_layers_; ++i) {
    for (int j = i; j < num_layers_; ++j) {
      for (int t = 0; t < num_types_; ++t) {
        double x = X(i, j, t);
        int64_t k_min = KMin(i, j, t, e_max);
        if (k_min == 0) continue;
        for (int64_t k = k_min; k <= model_.MaxStageUnits(i, t); ++k) {
          cand_.push_back(CostModel::ExecSeconds(x, model_.type(t).dp_loss, k));
        }
      }
    }
  }
  // Where the parameter servers are the slowest stage.
  cand_.insert(cand_.end(), model_.ps_candidates().begin(), model_.ps_candidates().end());
  std::sort(cand_.begin(), cand_.end());
  cand_.erase(std::unique(cand_.begin(), cand_.end()), cand_.end());
}

double ExactSearch::Relaxed(double e) {
  ++evaluated_;
  const int stride = num_types_ + 1;
  g_.assign(static_cast<size_t>(num_layers_ + 1) * stride, 0.0);
  h_.assign(static_cast<size_t>(num_layers_) * num_types_, kInfinity);
  h_end_.assign(static_cast<size_t>(num_layers_) * num_types_, -1);
  for (int i = num_layers_ - 1; i >= 0; --i) {
    double best1 = kInfinity, best2 = kInfinity;
    int arg1 = -1;
    for (int t = 0; t < num_types_; ++t) {
      double& h = h_[i * num_types_ + t];
      for (int j = i; j < num_layers_; ++j) {
        int64_t k = KMin(i, j, t, e);
        if (k == 0) continue;
        double v = Price(t) * static_cast<double>(k) + G(j + 1, t);
        if (v < h) {
          h = v;
          h_end_[i * num_types_ + t] = j;
        }
      }
      if (h < best1) {
        best2 = best1;
        best1 = h;
        arg1 = t;
      } else if (h < best2) {
        best2 = h;
      }
    }
    for (int prev = 0; prev <= num_types_; ++prev) {
      g_[i * stride + prev] = prev == arg1 ? best2 : best1;
    }
  }
  return G(0, num_types_);
}

std::vector<int> ExactSearch::RelaxedAssignment() const {
  std::vector<int> assignment(num_layers_);
  for (int i = 0, prev = num_types_; i < num_layers_;) {
    int pick = -1;
    for (int t = 0; t < num_types_; ++t) {
      if (t == prev) continue;
      if (pick < 0 || h_[i * num_types_ + t] < h_[i * num_types_ + pick]) pick = t;
    }
    int end = h_end_[i * num_types_ + pick];
    std::fill(assignment.begin() + i, assignment.begin() + end + 1, pick);
    i = end + 1;
    prev = pick;
  }
  return assignment;
}

bool ExactSearch::WithinUnits(const std::vector<int>& assignment, double e) const {
  std::vector<int64_t> used(num_types_, 0);
  for (const cost::StageSpec& s : StagesOf(assignment)) {
    const int64_t k = KMin(s.first, s.last, s.type, e);
    used[s.type] += k;
    if (k == 0 || used[s.type] > units_[s.type]) return false;
  }
  return true;
}

void ExactSearch::PrepareUnits(double e) {
  dfs_e_ = e;
  dfs_k_.assign(x_.size(), 0);
  for (int i = 0; i < num_layers_; ++i) {
    for (int j = i; j < num_layers_; ++j) {
      for (int t = 0; t < num_types_; ++t) {
        dfs_k_[(i * num_layers_ + j) * num_types_ + t] = KMin(i, j, t, e);
      }
    }
  }
}

bool ExactSearch::RelaxedFits(double e) {
  const std::vector<Servers> choices = ServerChoices(e);
  if (choices.empty()) return true;  // no servers at e: no plan either, and P(e) says so
  const UnitsAside aside(units_, choices.front());
  return WithinUnits(RelaxedAssignment(), e);
}

double ExactSearch::RangeBound(double e_hi, double relaxed, double target) {
  PrepareUnits(e_hi);
  const std::vector<Servers> choices = ServerChoices(e_hi);
  if (choices.empty()) return kInfinity;
  const double weakest = relaxed + choices.front().rate;  // S(e_hi) + P(e_hi)
  double bound = kInfinity;
  for (const Servers& servers : choices) {
    if (!(relaxed + servers.rate < bound)) break;  // nor can any dearer choice
    if (deadline_.Expired()) return weakest;       // cut short, only that one holds
    const UnitsAside aside(units_, servers);
    dfs_best_ = target - servers.rate;
    bound = std::min(bound, FitMultipliers(relaxed) + servers.rate);
  }
  return std::max(weakest, bound);
}

std::vector<int> ExactSearch::Constrained(double e, double bound) {
  PrepareUnits(e);
  dfs_best_ = bound;
  dfs_current_.assign(num_layers_, -1);
  dfs_found_.clear();
  dfs_used_.assign(num_types_, 0);
  dfs_g_.assign(num_layers_ + 1, {});
  dfs_g0_.assign(num_layers_ + 1, {});
  if (FitMultipliers(G(0, num_types_)) >= dfs_best_ * kStrictly) return dfs_found_;
  Dfs(0, num_types_, 0.0);
  return dfs_found_;
}

void ExactSearch::Dfs(int i, int prev, double cost) {
  if (timed_out_ || dfs_cut_ || (dfs_first_only_ && !dfs_found_.empty())) return;
  if (++dfs_nodes_ > dfs_node_limit_) {
    dfs_cut_ = true;
    return;
  }
  if (++evaluated_ % 4096 == 0 && deadline_.Expired()) {
    timed_out_ = true;
    return;
  }
  if (i == num_layers_) {
    // Across regions the plan's value is its own: its links may set a bottleneck above dfs_e_,
    // and its egress is paid per byte.
    const double value = wan_ ? (model_.JobCost(std::max(dfs_e_, model_.LinkSeconds(dfs_load_)),
                                                cost + dfs_servers_.rate) +
                                 model_.JobEgressUsd(dfs_load_)) /
                                        dfs_usd_per_rate_ -
                                    dfs_servers_.rate
                              : cost;
    // The children's bounds let through only plans that beat the incumbent; checked again here.
    if (!(value < dfs_best_ * kStrictly)) return;
    dfs_best_ = value;
    dfs_found_ = dfs_current_;
    return;
  }
  std::vector<int64_t> left(num_types_);
  double reserved = 0;  // sum_t lambda_t (units left of t)
  for (int t = 0; t < num_types_; ++t) {
    left[t] = units_[t] - dfs_used_[t];
    reserved += lambda_[t] * static_cast<double>(left[t]);
  }
  // Two bounds, the better one counts: the Lagrangian one (prices p + lambda, less lambda times
  // the units left), and the plain prices' (lambda = 0), which is the tighter one deep in the
  // search, where most of the units left will not be used and lambda times them is slack.
  const int stride = num_types_ + 1;
  LimitedDp(i, left, dfs_price_, dfs_g_[i], nullptr);
  const std::vector<double>& g = dfs_g_[i];
  if (!(cost + g[i * stride + prev] - reserved < dfs_best_ * kStrictly)) return;
  // reserved 0: every type whose units carry a price has none left, so both see the same prices.
  if (reserved > 0) LimitedDp(i, left, plain_price_, dfs_g0_[i], nullptr);
  const std::vector<double>& g0 = reserved > 0 ? dfs_g0_[i] : g;
  if (!(cost + g0[i * stride + prev] < dfs_best_ * kStrictly)) return;
  struct Child {
    double bound;
    int end, type;
    int64_t units;
    cost::WanLoad load;  // the plan's traffic across links with this child (wan_)
  };
  std::vector<Child> children;
  for (int t = 0; t < num_types_; ++t) {
    if (t == prev) continue;
    for (int j = i; j < num_layers_; ++j) {
      int64_t k = Units(i, j, t);
      if (k == 0 || k > left[t]) continue;
      double bound = std::max(
          cost + dfs_price_[t] * static_cast<double>(k) + g[(j + 1) * stride + t] - reserved,
          cost + Price(t) * static_cast<double>(k) + g0[(j + 1) * stride + t]);
      cost::WanLoad load;
      if (wan_) {
        // The boundary before this stage and the stage's own traffic with the servers; a link
        // that takes longer than the bucket allows rules the child out, and the egress so far
        // (paid whatever the rest) raises its bound.
        load = dfs_load_;
        if (i > 0) model_.AddBoundaryLoad(i - 1, prev, t, &load);
        model_.AddServerLoad(i, j, t, dfs_servers_.type, &load);
        if (model_.LinkSeconds(load) > dfs_link_limit_) continue;
        bound += model_.JobEgressUsd(load) / dfs_usd_per_rate_;
      }
      if (bound < dfs_best_ * kStrictly) children.push_back({bound, j, t, k, std::move(load)});
    }
  }
  std::sort(children.begin(), children.end(),
            [](const Child& a, const Child& b) { return a.bound < b.bound; });
  for (Child& c : children) {
    if (!(c.bound < dfs_best_ * kStrictly)) break;
    dfs_used_[c.type] += c.units;
    std::fill(dfs_current_.begin() + i, dfs_current_.begin() + c.end + 1, c.type);
    if (wan_) std::swap(dfs_load_, c.load);
    Dfs(c.end + 1, c.type, cost + Price(c.type) * static_cast<double>(c.units));
    if (wan_) std::swap(dfs_load_, c.load);
    dfs_used_[c.type] -= c.units;
  }
}

void ExactSearch::LimitedDp(int from, const std::vector<int64_t>& left,
                            const std::vector<double>& price, std::vector<double>& g,
                            std::vector<int64_t>* usage) {
  const int stride = num_types_ + 1;
  g.assign(static_cast<size_t>(num_layers_ + 1) * stride, 0.0);
  std::vector<int> end(usage ? num_layers_ * num_types_ : 0, -1);
  std::vector<double> h(usage ? num_layers_ * num_types_ : 0, kInfinity);
  for (int m = num_layers_ - 1; m >= from; --m) {
    double best1 = kInfinity, best2 = kInfinity;
    int arg1 = -1;
    for (int t = 0; t < num_types_; ++t) {
      double best_h = kInfinity;
      for (int j = m; j < num_layers_; ++j) {
        int64_t k = Units(m, j, t);
        if (k == 0 || k > left[t]) continue;
        double v = price[t] * static_cast<double>(k) + g[(j + 1) * stride + t];
        if (v < best_h) {
          best_h = v;
          if (usage) end[m * num_types_ + t] = j;
        }
      }
      if (usage) h[m * num_types_ + t] = best_h;
      if (best_h < best1) {
        best2 = best1;
        best1 = best_h;
        arg1 = t;
      } else if (best_h < best2) {
        best2 = best_h;
      }
    }
    for (int p = 0; p <= num_types_; ++p) g[m * stride + p] = p == arg1 ? best2 : best1;
  }
  if (usage == nullptr) return;
  usage->assign(num_types_, 0);
  // The plan's assignment, only where it is to be collected (the search's fits need none).
  const bool collect = collect_ != nullptr && from == 0;
  std::vector<int> assignment(collect ? num_layers_ : 0, -1);
  for (int m = from, prev = num_types_; m < num_layers_;) {
    int pick = -1;
    for (int t = 0; t < num_types_; ++t) {
      if (t != prev && (pick < 0 || h[m * num_types_ + t] < h[m * num_types_ + pick])) pick = t;
    }
    if (pick < 0 || end[m * num_types_ + pick] < 0) return;
    int j = end[m * num_types_ + pick];
    (*usage)[pick] += Units(m, j, pick);
    if (collect) std::fill(assignment.begin() + m, assignment.begin() + j + 1, pick);
    m = j + 1;
    prev = pick;
  }
  if (!collect) return;
  for (int t = 0; t < num_types_; ++t) {
    if ((*usage)[t] > left[t]) return;
  }
  if (std::find(collect_->begin(), collect_->end(), assignment) == collect_->end()) {
    collect_->push_back(std::move(assignment));
  }
}

// Subgradient ascent on L(lambda) = min_plan sum_s (p_t + lambda_t) k_s - sum_t lambda_t K_t, a
// lower bound on the constrained optimum for every lambda >= 0. Polyak steps towards the
// incumbent (or, without one, towards twice the relaxed value); the step shrinks when the bound
// stalls.
// The target is fixed for the fit and bounds every multiplier. Where no plan fits the units the
// dual grows without limit: a target that followed the bound doubled the multipliers at every
// step, the warm start carried them (to 1e25) into fits where plans do fit, and there the bound,
// the difference of two such numbers, was rounding noise above the optimum (a dearer plan was
// certified). A unit priced above the whole target prunes as well as any dearer one.
double ExactSearch::FitMultipliers(double relaxed) {
  constexpr int kIterations = 40;
  if (lambda_.empty()) lambda_.assign(num_types_, 0.0);
  const double target = std::isfinite(dfs_best_) ? dfs_best_ : 2 * relaxed;
  const double ceiling = std::max({target, relaxed, 0.0});
  for (double& l : lambda_) l = std::min(l, ceiling);
  std::vector<int64_t> full(num_types_), usage;
  for (int t = 0; t < num_types_; ++t) full[t] = units_[t];
  std::vector<double> g, best_lambda = lambda_;
  double best = -kInfinity, theta = 1.0;
  int stalled = 0;
  dfs_price_.resize(num_types_);
  for (int iter = 0; iter < kIterations; ++iter) {
    for (int t = 0; t < num_types_; ++t) dfs_price_[t] = Price(t) + lambda_[t];
    LimitedDp(0, full, dfs_price_, g, &usage);
    double value = g[num_types_];  // g[0][none]
    if (!std::isfinite(value)) break;
    double norm = 0;
    for (int t = 0; t < num_types_; ++t) {
      value -= lambda_[t] * static_cast<double>(full[t]);
      double d = static_cast<double>(usage[t] - full[t]);
      if (d > 0 || lambda_[t] > 0) norm += d * d;
    }
    if (value > best) {
      best = value;
      best_lambda = lambda_;
      stalled = 0;
    } else if (++stalled >= 4) {
      theta /= 2;
      stalled = 0;
    }
    if (norm == 0) break;  // the plan respects availability: the bound is as good as it gets
    double step = theta * std::max(target - value, 1e-12 * target) / norm;
    for (int t = 0; t < num_types_; ++t) {
      lambda_[t] = std::clamp(lambda_[t] + step * static_cast<double>(usage[t] - full[t]), 0.0,
                              ceiling);
    }
  }
  lambda_ = best_lambda;
  for (int t = 0; t < num_types_; ++t) dfs_price_[t] = Price(t) + lambda_[t];
  return std::max(best, relaxed);
}

void ExactSearch::Consider(const std::vector<int>& assignment) {
  PricedPlan plan = PricePlan(model_, assignment);
  ++evaluated_;
  if (!have_best_ || Better(plan, best_)) {
    best_ = std::move(plan);
    have_best_ = true;
  }
}

std::vector<ExactSearch::Servers> ExactSearch::ServerChoices(double e) const {
  std::vector<Servers> choices;
  if (!model_.prices_ps()) choices.push_back({});
  for (int t = 0; model_.prices_ps() && t < num_types_; ++t) {
    if (!model_.HostsPs(t)) continue;
    const int64_t n = model_.MinPsShards(t, e, model_.type(t).units);
    if (n > 0) choices.push_back({static_cast<double>(n) * Price(t), t, n});
  }
  std::stable_sort(choices.begin(), choices.end(),
                   [](const Servers& a, const Servers& b) { return a.rate < b.rate; });
  return choices;
}

ExactSearch::Outcome ExactSearch::Evaluate(double e_lo, double e_hi, bool first_only,
                                           int64_t node_limit) {
  const double s = Relaxed(e_hi);
  if (s == kInfinity) return Outcome::kNone;
  const std::vector<int> relaxed = RelaxedAssignment();
  const std::vector<Servers> choices = ServerChoices(e_hi);
  // Only plans whose bound c e_lo (S + rate) beats the incumbent matter.
  const double c = model_.JobCost(e_lo, 1.0);
  bool none = true, open = false;
  for (const Servers& servers : choices) {
    const double budget = best_.feasible ? best_.cost_usd / c - servers.rate : kInfinity;
    if (!(s < budget * kStrictly) || timed_out_) break;  // nor can any dearer choice
    const UnitsAside aside(units_, servers);
    if (WithinUnits(relaxed, e_hi) &&
        (!wan_ || cost::PlanWanLoad(model_, StagesOf(relaxed), servers.type).empty())) {
      // The stages' cheapest plan beside the cheapest servers that leave room for it (and, across
      // regions, sends nothing over a link: else a dearer plan that stays home may cost less).
      Consider(relaxed);
      return Outcome::kDone;
    }
    if (wan_) {
      dfs_servers_ = servers;
      dfs_usd_per_rate_ = c;
      dfs_load_ = model_.NoWanLoad();
      const auto next = std::upper_bound(cand_.begin(), cand_.end(), e_hi);
      dfs_link_limit_ = next == cand_.end() ? model_.max_bottleneck_seconds() : *next;
    }
    dfs_first_only_ = first_only;
    dfs_nodes_ = 0;
    dfs_node_limit_ = node_limit;
    dfs_cut_ = false;
    const std::vector<int> assignment = Constrained(e_hi, budget);
    dfs_first_only_ = false;
    open = open || dfs_cut_;
    if (!assignment.empty()) {
      Consider(assignment);
      none = false;
      if (first_only) break;
    }
  }
  if (timed_out_ || open) return Outcome::kOpen;
  return none ? Outcome::kNone : Outcome::kDone;
}

PricedPlan ExactSearch::Run() {
  units_.resize(num_types_);
  for (int t = 0; t < num_types_; ++t) units_[t] = model_.type(t).units;
  plain_price_.resize(num_types_);
  for (int t = 0; t < num_types_; ++t) plain_price_[t] = Price(t);
  BuildStageTable();
  for (int t = 0; t < num_types_; ++t) Consider(std::vector<int>(num_layers_, t));
  for (const std::vector<int>& assignment : options_.incumbents) {
    const bool valid = static_cast<int>(assignment.size()) == num_layers_ &&
                       std::all_of(assignment.begin(), assignment.end(),
                                   [&](int t) { return t >= 0 && t < num_types_; });
    if (valid) Consider(assignment);
  }
  BuildCandidates();
  struct Range {
    double bound;  // no plan with a bottleneck in [cand[lo], cand[hi]] costs less
    size_t lo, hi;
    double s_hi;   // a lower bound on sum p k over the range: S(cand[hi]), or better
    double v = 0;  // a lower bound on sum p k plus the servers' rate over the range
    // v holds the Lagrangian bound at cand[hi] (RangeBound), or needs none: the relaxed plan at
    // cand[hi] respects the units beside the cheapest servers.
    bool tightened = false;
    bool searched = false;  // Evaluate(cand[lo], cand[hi]) could not set it aside
    int64_t node_limit = 0;  // of its depth-first searches (Evaluate)
    bool operator<(const Range& o) const { return bound > o.bound; }  // min-heap
  };
  std::priority_queue<Range> open;
  const int64_t first_nodes =
      options_.exact_first_nodes > 0 ? options_.exact_first_nodes : kFirstNodeLimit;
  if (!cand_.empty()) {
    size_t hi = cand_.size() - 1;
    double s = Relaxed(cand_[hi]);
    if (s < kInfinity) {
      const bool exact = RelaxedFits(cand_[hi]);
      open.push({RangeCost(0, hi, s, 0), 0, hi, s, 0, exact, false, first_nodes});
    }
  }
  double pending = kInfinity;  // the bound of the range being explored when time ran out
  // Candidates whose search reached its node limit, lowest bound first, each searched again with
  // a limit kNodeLimitGrowth times larger while the ranges in `open` go on, the two sharing the
  // work (plans evaluated and nodes visited) equally: one hard candidate does not hold up all the
  // easy ones (on deep, tight instances a single search could take the whole time limit), nor
  // do the easy ones starve a hard one that holds the optimum. Nothing is set aside unproved, so
  // the search stays exact.
  std::priority_queue<Range> deferred;
  int64_t fresh_work = 0, deferred_work = 0;
  // A range whose bound is infinite holds no feasible plan (the servers cannot reach its
  // bottlenecks, say): it is set aside even before a plan is found.
  auto beats = [&](const Range& r) {
    return std::isfinite(r.bound) && (!best_.feasible || r.bound < best_.cost_usd * kStrictly);
  };
  while (!timed_out_) {
    if (deadline_.Expired()) {
      timed_out_ = true;
      break;
    }
    if (!deferred.empty() && !beats(deferred.top())) deferred = {};  // nor can any other
    const bool open_done = open.empty() || !beats(open.top());
    if (open_done && deferred.empty()) break;
    const bool retry = !deferred.empty() && (open_done || deferred_work <= fresh_work);
    std::priority_queue<Range>& from = retry ? deferred : open;
    Range r = from.top();
    from.pop();
    const int64_t work_before = evaluated_;
    pending = r.bound;
    if (!r.tightened) {
      // Before splitting a range or searching a candidate, its Lagrangian bound: where the units
      // bind, it sets aside whole ranges that the relaxed bound would have split down to their
      // candidates, and orders the candidates' searches by a bound close to their optimum.
      r.tightened = true;
      const double target =
          best_.feasible ? best_.cost_usd / model_.JobCost(cand_[r.lo], 1.0) : kInfinity;
      r.v = std::max(r.v, RangeBound(cand_[r.hi], r.s_hi, target));
      r.bound = std::max(r.bound, RangeCost(r.lo, r.hi, r.s_hi, r.v));
      if (!timed_out_ && !(best_.feasible && !(r.bound < best_.cost_usd * kStrictly))) {
        open.push(r);
      }
    } else if (r.lo == r.hi) {
      if (Evaluate(cand_[r.lo], cand_[r.lo], false, r.node_limit) == Outcome::kOpen &&
          !timed_out_) {
        r.node_limit *= kNodeLimitGrowth;
        deferred.push(r);
      }
    } else if (!r.searched && best_.feasible && r.bound >= kNear * best_.cost_usd) {
      // Within the Lagrangian bound's usual gap of the incumbent: one search at cand[hi] may set
      // the whole range aside. Else it comes back as it was, to be split.
      r.searched = true;
      if (Evaluate(cand_[r.lo], cand_[r.hi], true, r.node_limit) != Outcome::kNone && !timed_out_) {
        open.push(r);
      }
    } else {
      size_t mid = r.lo + (r.hi - r.lo) / 2;
      // The upper half shares the range's end, and with it its Lagrangian bound; the lower half
      // keeps it too (it holds for every bottleneck up to cand[hi]), until its own is fitted.
      open.push({RangeCost(mid + 1, r.hi, r.s_hi, r.v), mid + 1, r.hi, r.s_hi, r.v, true, false,
                 first_nodes});
      double s_mid = Relaxed(cand_[mid]);
      if (s_mid < kInfinity) {
        const bool exact = RelaxedFits(cand_[mid]);
        s_mid = std::max(s_mid, r.s_hi);
        open.push(
            {RangeCost(r.lo, mid, s_mid, r.v), r.lo, mid, s_mid, r.v, exact, false, first_nodes});
      }
    }
    (retry ? deferred_work : fresh_work) += evaluated_ - work_before;
    if (!timed_out_) pending = kInfinity;
    if (options_.progress && evaluated_ % 256 < 2) {
      options_.progress(evaluated_, best_.feasible ? best_.cost_usd : kInfinity);
    }
  }
  PricedPlan plan = best_.feasible ? best_ : Infeasible();
  plan.certified_optimal = plan.feasible && !timed_out_;
  plan.cut_short = timed_out_;
  plan.plans_evaluated = evaluated_;
  // Every feasible plan has its bottleneck in a range still open, in the one being explored, or
  // costs at least the incumbent (the ranges set aside could not beat it).
  double bound = best_.feasible ? best_.cost_usd : kInfinity;
  if (timed_out_) {
    bound = std::min(bound, pending);
    if (!open.empty()) bound = std::min(bound, open.top().bound);
    if (!deferred.empty()) bound = std::min(bound, deferred.top().bound);
  }
  plan.lower_bound_usd = std::isfinite(bound) ? bound : 0;
  return plan;
}

std::vector<std::vector<int>> ExactSearch::RelaxedAt(int count) {
  std::vector<std::vector<int>> out;
  units_.resize(num_types_);
  for (int t = 0; t < num_types_; ++t) units_[t] = model_.type(t).units;
  BuildStageTable();
  const double e_max = model_.max_bottleneck_seconds();
  for (int i = 0; i < count && !deadline_.Expired(); ++i) {
    const double e = e_max * std::pow(0.5, count > 1 ? static_cast<double>(i) / (count - 1) : 0.0);
    const double s = Relaxed(e);
    if (s == kInfinity) break;  // faster bottlenecks have no plan either
    std::vector<int> assignment = RelaxedAssignment();
    if (std::find(out.begin(), out.end(), assignment) == out.end()) out.push_back(assignment);
    // The units the stages may take beside the cheapest servers at e.
    const std::vector<Servers> servers = ServerChoices(e);
    if (servers.empty()) continue;
    const UnitsAside aside(units_, servers[0]);
    if (!WithinUnits(assignment, e)) {
      // The units bind: the plans of the Lagrangian dual's dynamic programs that fit them, each
      // type's units priced up until the plan fits, no stage given more units than are left.
      PrepareUnits(e);
      dfs_best_ = kInfinity;
      collect_ = &out;
      FitMultipliers(s);
      collect_ = nullptr;
    }
  }
  return out;
}

std::vector<std::vector<int>> ExactSearch::BeamAt(int count, int width) {
  std::vector<std::vector<int>> out;
  units_.resize(num_types_);
  for (int t = 0; t < num_types_; ++t) units_[t] = model_.type(t).units;
  BuildStageTable();
  // The bottlenecks tried: kGrid of them from e_max down to kLowest of it, in equal ratios (0.93).
  constexpr int kGrid = 48;
  constexpr double kLowest = 1.0 / 32;
  const double e_max = model_.max_bottleneck_seconds();
  std::vector<std::pair<double, double>> bounds;  // {relaxed job cost, e}
  for (int g = 0; g < kGrid && !deadline_.Expired(); ++g) {
    const double e = e_max * std::pow(kLowest, static_cast<double>(g) / (kGrid - 1));
    const double s = Relaxed(e);
    if (s == kInfinity) break;  // faster bottlenecks have no plan either
    bounds.push_back({model_.JobCost(e, s + PsRate(e)), e});
  }
  std::sort(bounds.begin(), bounds.end());
  if (static_cast<int>(bounds.size()) > count) bounds.resize(count);
  for (const auto& [bound, e] : bounds) {
    if (deadline_.Expired()) break;
    Relaxed(e);
    const std::vector<Servers> servers = ServerChoices(e);
    if (servers.empty()) continue;
    const UnitsAside aside(units_, servers[0]);
    PrepareUnits(e);
    std::vector<int> assignment = Beam(width);
    if (!assignment.empty() && std::find(out.begin(), out.end(), assignment) == out.end()) {
      out.push_back(std::move(assignment));
    }
  }
  return out;
}

std::vector<int> ExactSearch::Beam(int width) const {
  // A partial plan covering layers [0, end) and a candidate extension of one.
  struct Partial {
    std::vector<int> assignment;  // layers [0, end)
    std::vector<int64_t> used;    // units per type
    double cost = 0;              // sum p k
    int prev = 0;                 // last stage's type (num_types_: none)
  };
  struct Extension {
    double score = 0;  // cost + the relaxed cost of the layers after it
    double cost = 0;
    int parent = 0;  // the partial plan it extends: beam[start][parent]
    int type = 0, start = 0;
    int64_t units = 0;
  };
  auto worse = [](const Extension& a, const Extension& b) { return a.score < b.score; };
  // pending[m]: the best `width` extensions that end just before layer m (a max-heap by score).
  std::vector<std::vector<Extension>> pending(num_layers_ + 1);
  auto offer = [&](std::vector<Extension>& heap, const Extension& e) {
    if (static_cast<int>(heap.size()) < width) {
      heap.push_back(e);
      std::push_heap(heap.begin(), heap.end(), worse);
    } else if (e.score < heap.front().score) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      heap.back() = e;
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  };
  std::vector<std::vector<Partial>> beam(num_layers_ + 1);
  beam[0].push_back({{}, std::vector<int64_t>(num_types_, 0), 0.0, num_types_});
  for (int i = 0; i < num_layers_; ++i) {
    if (deadline_.Expired()) return {};
    for (const Extension& e : pending[i]) {
      const Partial& from = beam[e.start][e.parent];
      Partial next = from;
      next.assignment.resize(i, e.type);
      next.used[e.type] += e.units;
      next.cost = e.cost;
      next.prev = e.type;
      beam[i].push_back(std::move(next));
    }
    for (int p = 0; p < static_cast<int>(beam[i].size()); ++p) {
      const Partial& from = beam[i][p];
      for (int t = 0; t < num_types_; ++t) {
        if (t == from.prev) continue;
        const int64_t left = units_[t] - from.used[t];
        for (int j = i; j < num_layers_; ++j) {
          const int64_t k = Units(i, j, t);
          if (k == 0 || k > left) continue;
          const double cost = from.cost + Price(t) * static_cast<double>(k);
          offer(pending[j + 1], {cost + G(j + 1, t), cost, p, t, i, k});
        }
      }
    }
  }
  if (pending[num_layers_].empty()) return {};
  const Extension& best =
      *std::min_element(pending[num_layers_].begin(), pending[num_layers_].end(),
                        [](const Extension& a, const Extension& b) { return a.cost < b.cost; });
  std::vector<int> assignment = beam[best.start][best.parent].assignment;
  assignment.resize(num_layers_, best.type);
  return assignment;
}

// No plan meets the limit: report the fastest plan (every stage with all units of its type, shared
// limits ignored) and why even it fails.
PricedPlan ExactSearch::Infeasible() {
  PricedPlan plan = PricePlan(model_, FastestAssignment(model_));
  const cost::Workload& rules = model_.workload();
  plan.why.message = absl::StrCat(
      "even the fastest plan",
      rules.first_stage_max_units > 0 || rules.first_stage_through >= 0
          ? " that keeps the first stage's rules (the GPU tier's: its units, the layers it holds)"
          : "",
      rules.data_region.empty()
          ? ""
          : absl::StrCat(model_.away_from() < num_layers_
                             ? absl::StrCat(" with the stages before layer '",
                                            model_.away_from_name(), "' and the servers")
                             : std::string(),
                         " on the types of region '", rules.data_region, "', where ",
                         cost::DataName(rules), " is kept,"),
      " fails: ", plan.why.message);
  return plan;
}

class AutoScheduler : public Scheduler {
 public:
  explicit AutoScheduler(std::unique_ptr<Scheduler> rl) : rl_(std::move(rl)) {}
  absl::string_view name() const override { return "auto"; }
  absl::StatusOr<PricedPlan> Schedule(const CostModel& model,
                                      const SchedulerOptions& options) override {
    base::Deadline clock(0);
    const double limit = options.time_limit_seconds;
    SchedulerOptions first = options;
    if (limit > 0) first.time_limit_seconds = limit / 3;
    HETERPS_ASSIGN_OR_RETURN(PricedPlan learned, rl_->Schedule(model, first));
    SchedulerOptions second = options;
    second.incumbents.push_back(learned.assignment);
    second.policy_in.clear();
    second.policy_out.clear();
    if (limit > 0) second.time_limit_seconds = std::max(0.05 * limit, limit - clock.Elapsed());
    PricedPlan plan = ExactSearch(model, second).Run();
    plan.scheduler = std::string(name());
    plan.plans_evaluated += learned.plans_evaluated;
    plan.search_seconds = clock.Elapsed();
    if (options.progress) {
      options.progress(plan.plans_evaluated,
                       plan.feasible ? plan.cost_usd : std::numeric_limits<double>::infinity());
    }
    return plan;
  }

 private:
  std::unique_ptr<Scheduler> rl_;
};

class ExactScheduler : public Scheduler {
 public:
  absl::string_view name() const override { return "exact"; }
  absl::StatusOr<PricedPlan> Schedule(const CostModel& model,
                                      const SchedulerOptions& options) override {
    base::Deadline clock(0);
    // A search that has not certified within a tenth of its time goes on seeded with its own
    // relaxed and beam plans, improved by a local search (local_search.h) for at most a quarter
    // of the time: without an incumbent that fits the units, a deep, tight instance spends its
    // time on the first bottlenecks' searches and returns a plan dearer than the beam's, and the
    // bound search alone reaches the cheaper plans too slowly. Most instances certify long
    // before, and pay nothing for the seeds.
    const double limit = options.time_limit_seconds;
    SchedulerOptions first = options;
    if (limit > 0) first.time_limit_seconds = 0.1 * limit;
    PricedPlan plan = ExactSearch(model, first).Run();
    // An infeasible answer not cut short is proven: nothing to seed or improve.
    if (limit > 0 && !plan.certified_optimal && (plan.feasible || plan.cut_short)) {
      SchedulerOptions seeded = options, quick = options;
      quick.time_limit_seconds = 0.05 * limit;
      PlanCache cache(model, std::numeric_limits<int64_t>::max());
      if (plan.feasible) cache.Evaluate(plan.assignment);
      for (const std::vector<int>& a : ExactSearch(model, quick).RelaxedAt(8)) cache.Evaluate(a);
      for (const std::vector<int>& a : ExactSearch(model, quick).BeamAt(8, 32)) cache.Evaluate(a);
      // A local search around the best of them: the bound search below prunes by the incumbent,
      // and on deep, tight instances it proves too slowly to reach the better plans itself.
      Polish(model, cache, base::Deadline(0.25 * limit), LocalSearchOptions{});
      if (cache.have_best()) seeded.incumbents.push_back(cache.best().assignment);
      seeded.time_limit_seconds = std::max(0.05 * limit, limit - clock.Elapsed());
      const int64_t evaluated = plan.plans_evaluated + cache.evaluated();
      plan = ExactSearch(model, seeded).Run();
      plan.plans_evaluated += evaluated;
    }
    plan.scheduler = std::string(name());
    plan.search_seconds = clock.Elapsed();
    // The last report is the search's result.
    if (options.progress) {
      options.progress(plan.plans_evaluated,
                       plan.feasible ? plan.cost_usd : std::numeric_limits<double>::infinity());
    }
    return plan;
  }
};

}  // namespace

std::unique_ptr<Scheduler> NewExactScheduler() { return std::make_unique<ExactScheduler>(); }

std::vector<int> FastestAssignment(const CostModel& model) {
  const int num_layers = model.num_layers(), num_types = model.num_types();
  const int stride = num_types;
  // A stage of layers i..j on all the units of t that the workload's rules allow it (none where
  // a first stage would end before the layer it must reach).
  auto seconds = [&](int i, int j, int t) {
    if (i == 0 && j < model.workload().first_stage_through) return kInfinity;
    return CostModel::ExecSeconds(model.StageSeconds(i, j, t), model.type(t).dp_loss,
                                  model.MaxStageUnits(i, t));
  };
  // m[j][t]: the smallest bottleneck of layers 0..j-1 whose last stage is on t.
  std::vector<double> m((num_layers + 1) * stride, kInfinity);
  std::vector<int> from_i((num_layers + 1) * stride, -1), from_t((num_layers + 1) * stride, -1);
  for (int j = 1; j <= num_layers; ++j) {
    for (int t = 0; t < num_types; ++t) {
      for (int i = 0; i < j; ++i) {
        double before = i == 0 ? 0.0 : kInfinity;
        int type = -1;
        for (int p = 0; i > 0 && p < num_types; ++p) {
          if (p != t && m[i * stride + p] < before) {
            before = m[i * stride + p];
            type = p;
          }
        }
        const double v = std::max(before, seconds(i, j - 1, t));
        if (v < m[j * stride + t]) {
          m[j * stride + t] = v;
          from_i[j * stride + t] = i;
          from_t[j * stride + t] = type;
        }
      }
    }
  }
  int t = 0;
  for (int u = 1; u < num_types; ++u) {
    if (m[num_layers * stride + u] < m[num_layers * stride + t]) t = u;
  }
  // Where no type holds some layer, the rest of the plan is on a type that shows why: the first
  // type, or under a residency rule the data region's type with the most memory.
  int fallback = 0;
  if (!model.InDataRegion(0)) {
    for (int u = 1; u < num_types; ++u) {
      if (model.InDataRegion(u) &&
          (!model.InDataRegion(fallback) || model.type(u).memory > model.type(fallback).memory)) {
        fallback = u;
      }
    }
  }
  std::vector<int> assignment(num_layers, fallback);
  for (int j = num_layers; j > 0 && t >= 0;) {
    const int i = from_i[j * stride + t];
    if (i < 0) break;  // no type holds some layer: any assignment shows why
    std::fill(assignment.begin() + i, assignment.begin() + j, t);
    const int prev = from_t[j * stride + t];
    j = i;
    t = prev;
  }
  return assignment;
}

std::unique_ptr<Scheduler> NewAutoScheduler(std::unique_ptr<Scheduler> rl) {
  return std::make_unique<AutoScheduler>(std::move(rl));
}

std::vector<std::vector<int>> RelaxedAssignments(const CostModel& model, int count,
                                                 double seconds) {
  SchedulerOptions options;
  options.time_limit_seconds = seconds;
  return ExactSearch(model, options).RelaxedAt(count);
}

std::vector<std::vector<int>> BeamAssignments(const CostModel& model, int count, int width,
                                              double seconds) {
  SchedulerOptions options;
  options.time_limit_seconds = seconds;
  return ExactSearch(model, options).BeamAt(count, width);
}

PricedPlan BoundPlan(const CostModel& model, PricedPlan plan, double seconds) {
  if (!plan.feasible || plan.certified_optimal) {
    if (plan.certified_optimal) plan.lower_bound_usd = plan.cost_usd;
    return plan;
  }
  SchedulerOptions options;
  options.time_limit_seconds = std::max(seconds, 1e-3);
  options.incumbents.push_back(plan.assignment);
  const PricedPlan exact = ExactSearch(model, options).Run();
  plan.lower_bound_usd = std::min(exact.lower_bound_usd, plan.cost_usd);
  return plan;
}

}  // namespace heterps::sched
