#include "heterps/sched/rl/rl_scheduler.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <utility>

#include "heterps/base/deadline.h"
#include "heterps/sched/local_search.h"
#include "heterps/sched/rl/features.h"
#include "heterps/sched/rl/lstm_policy.h"
#include "heterps/sched/schedulers.h"

namespace heterps::sched::rl {
namespace {

using Eigen::MatrixXd;
using Eigen::VectorXd;

struct Adam {
  VectorXd m, v;
  int64_t step = 0;
  void Apply(VectorXd& params, const VectorXd& grad, double lr) {
    constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
    if (m.size() == 0) {
      m = VectorXd::Zero(params.size());
      v = VectorXd::Zero(params.size());
    }
    ++step;
    m = kBeta1 * m + (1 - kBeta1) * grad;
    v = kBeta2 * v + (1 - kBeta2) * grad.cwiseProduct(grad);
    const double c1 = 1 - std::pow(kBeta1, step), c2 = 1 - std::pow(kBeta2, step);
    params.array() -= lr * (m.array() / c1) / ((v.array() / c2).sqrt() + kEps);
  }
};

class RlScheduler : public Scheduler {
 public:
  explicit RlScheduler(RlOptions options) : options_(options) {}
  absl::string_view name() const override { return "rl"; }
  absl::StatusOr<PricedPlan> Schedule(const cost::CostModel& model,
                                      const SchedulerOptions& options) override;

 private:
  double Reward(const PricedPlan& plan) {
    if (!plan.feasible) return -(options_.infeasible_penalty + std::log1p(plan.why.shortfall));
    if (!(reference_cost_ > 0)) reference_cost_ = plan.cost_usd;
    return -std::log(plan.cost_usd / reference_cost_);
  }
  void Train(const cost::CostModel& model, const SchedulerOptions& options, LstmPolicy& policy,
             PlanCache& evaluator, int64_t train_budget, const base::Deadline& deadline);
  void SeedSplits(const cost::CostModel& model, PlanCache& evaluator, int64_t budget);
  // Supervised steps towards `best` before the policy is saved, so that the file makes the best
  // plan seen its most likely one; a warm start then samples around it.
  void Distill(const cost::CostModel& model, const std::vector<int>& best, LstmPolicy& policy);
  // Orders each layer's types by the policy's mean probability in the last update.
  void RankTypes(const Tape& tape, int sampled);

  RlOptions options_;
  double reference_cost_ = 0;
  std::vector<std::vector<int>> ranked_;  // [l]: types by the policy's preference, best first
};

void RlScheduler::RankTypes(const Tape& tape, int sampled) {
  ranked_.assign(tape.probs.size(), {});
  for (size_t l = 0; l < tape.probs.size(); ++l) {
    Eigen::VectorXd mean = tape.probs[l].leftCols(sampled).rowwise().mean();
    std::vector<int>& order = ranked_[l];
    for (int t = 0; t < mean.size(); ++t) {
      if (mean(t) > 0) order.push_back(t);
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return mean(a) > mean(b); });
  }
}

absl::StatusOr<PricedPlan> RlScheduler::Schedule(const cost::CostModel& model,
                                                 const SchedulerOptions& options) {
  base::Deadline deadline(options.time_limit_seconds);
  const PolicyShape shape{NumFeatures(model.num_types()), model.num_types(), options_.hidden};
  LstmPolicy policy(shape, options.seed);
  if (!options.policy_in.empty()) {
    auto loaded = LstmPolicy::Load(options.policy_in, shape);
    if (!loaded.ok()) return loaded.status();
    policy = std::move(*loaded);
  }
  const int64_t budget = options.max_plans > 0 ? options.max_plans : options_.default_budget;
  PlanCache evaluator(model, budget, options.progress);
  // The plans any user would try first (each type everywhere, the greedy plan) are evaluated
  // first; the cheapest feasible one is the reward's reference and the first plan to imitate.
  reference_cost_ = 0;
  for (int t = 0; t < model.num_types() && !evaluator.exhausted(); ++t) {
    if (model.InDataRegion(t)) evaluator.Evaluate(std::vector<int>(model.num_layers(), t));
  }
  if (auto greedy = NewGreedyScheduler()->Schedule(model, options); greedy.ok()) {
    evaluator.Evaluate(greedy->assignment);
  }
  // The fastest plan: feasible wherever meeting the limit is a matter of speed alone, it keeps
  // the search from ending infeasible where only a careful mix of types meets the limit.
  if (!evaluator.exhausted()) evaluator.Evaluate(FastestAssignment(model));
  SeedSplits(model, evaluator,
             static_cast<int64_t>(options_.split_share * static_cast<double>(budget)));
  // The cheapest plans of the units-relaxed dynamic program at a few bottlenecks: optimal where
  // the units do not bind, and a start for the search where they do.
  // The seeds' searches get what is left of the time limit (none left: they return at once).
  auto left = [&] {
    return options.time_limit_seconds > 0
               ? std::max(options.time_limit_seconds - deadline.Elapsed(), 1e-9)
               : 0.0;
  };
  for (const std::vector<int>& relaxed :
       RelaxedAssignments(model, options_.relaxed_plans, left())) {
    if (evaluator.exhausted()) break;
    evaluator.Evaluate(relaxed);
  }
  // Plans that respect the units, built stage by stage at the bottlenecks where the relaxed job
  // cost is least: where the units bind across many stages (chains of small pools, often at a
  // bottleneck far below the limit's), neither the relaxed plans nor single moves reach them.
  for (const std::vector<int>& beam :
       BeamAssignments(model, options_.beam_plans, options_.beam_width, left())) {
    if (evaluator.exhausted()) break;
    evaluator.Evaluate(beam);
  }
  if (evaluator.have_best() && evaluator.best().feasible) {
    reference_cost_ = evaluator.best().cost_usd;
  }
  const int64_t train_budget =
      budget - static_cast<int64_t>(options_.polish_share * static_cast<double>(budget));
  Train(model, options, policy, evaluator, train_budget, deadline);
  LocalSearchOptions polish;
  polish.types_per_move = options_.polish_types;
  polish.window_plans = options_.window_plans;
  polish.seed = options.seed;
  polish.ranked = &ranked_;
  Polish(model, evaluator, deadline, polish);
  if (!options.policy_out.empty()) {
    if (evaluator.have_best()) Distill(model, evaluator.best().assignment, policy);
    absl::Status saved = policy.Save(options.policy_out);
    if (!saved.ok()) return saved;
  }
  PricedPlan plan = evaluator.have_best() ? evaluator.best() : PricePlan(model, {});
  plan.scheduler = std::string(name());
  plan.certified_optimal = false;
  plan.plans_evaluated = evaluator.evaluated();
  plan.search_seconds = deadline.Elapsed();
  return plan;
}

// Two-type plans: the model cut once, each side on one of a few types: those that run the whole
// model cheapest on one unit (price times one unit's time per batch), and the cheapest of those
// that come within half of the limit with all their units (a cut halves their work) but whose
// units ran out, or were too slow, running it alone. A mix of this shape (two spot pools of one
// GPU, a CPU front and a GPU tower) is where neither the policy's samples nor single moves reach:
// each side alone on its type is worse, or infeasible. Each pair's cuts are ranked by what the
// two stages and the cheapest parameter servers beside them would cost at the throughput limit,
// each with the fewest units that meet it (their price per hour times the slowest one's seconds:
// the job's cost, up to the provisioning's choice of more units), and its `split_cuts` best are
// evaluated: a pair's cost is not monotone in the cut (each side's units jump), so the cheapest
// cut is often next to one where a side needs a unit more; 16 cuts spread evenly missed it. At most
// `budget` new plans; the cheapest pairs first.
void RlScheduler::SeedSplits(const cost::CostModel& model, PlanCache& evaluator, int64_t budget) {
  const int L = model.num_layers(), T = model.num_types();
  if (L < 2 || T < 2 || budget <= 0) return;
  std::vector<std::pair<double, int>> cheap, saturated;
  for (int t = 0; t < T; ++t) {
    const double x = model.StageSeconds(0, L - 1, t);
    if (!std::isfinite(x)) continue;
    const double score = model.type(t).price_per_hour * x;
    cheap.push_back({score, t});
    const PricedPlan* alone =
        evaluator.Evaluate(std::vector<int>(L, t));  // seen already: no budget
    const auto& type = model.type(t);
    const double reach = model.batch() / cost::CostModel::ExecSeconds(x, type.dp_loss, type.units);
    if (alone != nullptr && !alone->feasible && reach >= 0.5 * model.workload().throughput_limit &&
        (alone->why.constraint == "units" || alone->why.constraint == "throughput")) {
      saturated.push_back({score, t});
    }
  }
  std::sort(cheap.begin(), cheap.end());
  std::sort(saturated.begin(), saturated.end());
  std::vector<std::pair<double, int>> pool;
  for (const auto* list : {&cheap, &saturated}) {
    for (size_t i = 0; i < list->size() && static_cast<int>(i) < options_.split_types; ++i) {
      if (std::find(pool.begin(), pool.end(), (*list)[i]) == pool.end()) pool.push_back((*list)[i]);
    }
  }
  std::vector<std::tuple<double, int, int>> pairs;
  for (const auto& [sa, a] : pool) {
    for (const auto& [sb, b] : pool) {
      if (a != b) pairs.push_back({sa + sb, a, b});
    }
  }
  std::sort(pairs.begin(), pairs.end());
  const double limit = model.max_bottleneck_seconds();
  std::vector<int64_t> used(T, 0);
  const int64_t stop = evaluator.evaluated() + budget;
  for (const auto& [score, a, b] : pairs) {
    std::vector<std::pair<double, int>> cuts;  // {estimated cost, layers on a}
    for (int cut = 1; cut < L; ++cut) {
      const FewestUnits front = StageAtTheLimit(model, 0, cut - 1, a);
      const FewestUnits back = StageAtTheLimit(model, cut, L - 1, b);
      if (front.units == 0 || back.units == 0) continue;
      used[a] = front.units;
      used[b] = back.units;
      const cost::PsServers ps = model.CheapestPs(limit, used);
      used[a] = used[b] = 0;
      if (model.prices_ps() && ps.type < 0) continue;
      const double estimate = (front.usd_per_hour + back.usd_per_hour + ps.usd_per_hour) *
                              std::max({front.seconds, back.seconds, ps.seconds_per_batch});
      cuts.push_back({estimate, cut});
    }
    const size_t keep = std::min<size_t>(cuts.size(), options_.split_cuts);
    std::partial_sort(cuts.begin(), cuts.begin() + keep, cuts.end());
    for (size_t i = 0; i < keep; ++i) {
      if (evaluator.evaluated() >= stop || evaluator.exhausted()) return;
      std::vector<int> split(L, b);
      std::fill(split.begin(), split.begin() + cuts[i].second, a);
      evaluator.Evaluate(split);
    }
  }
}

void RlScheduler::Train(const cost::CostModel& model, const SchedulerOptions& options,
                        LstmPolicy& policy, PlanCache& evaluator, int64_t train_budget,
                        const base::Deadline& deadline) {
  const PolicyInputs inputs = MakePolicyInputs(model);
  std::mt19937_64 rng(options.seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_real_distribution<double> uniform(0, 1);
  // Each update samples `batch` plans and replays the best plan seen so far as one more episode
  // (self-imitation: it is pushed towards only when it beats the baseline).
  const int batch = options_.batch, L = model.num_layers(), columns = batch + 1;
  Adam adam;
  double baseline = 0, entropy_weight = options_.entropy_start;
  bool have_baseline = false;
  int64_t last_improvements = evaluator.improvements(), last_evaluated = evaluator.evaluated();
  int stale = 0, repeating = 0;
  // Samples are cheap when they hit the cache, but not free: cap them at a multiple of the budget.
  int64_t samples_left = 20 * std::max<int64_t>(train_budget, 1);
  std::vector<int> replay;
  auto sample = [&](int l, const MatrixXd& probs, std::vector<int>& actions) {
    actions[batch] = replay.empty() ? 0 : replay[l];
    for (int n = 0; n < batch; ++n) {
      double u = uniform(rng), acc = 0;
      int pick = 0;
      for (Eigen::Index t = 0; t < probs.rows(); ++t) {
        if (probs(t, n) <= 0) continue;
        pick = static_cast<int>(t);
        acc += probs(t, n);
        if (u < acc) break;
      }
      actions[n] = pick;
    }
  };
  while (evaluator.evaluated() < train_budget && !deadline.Expired() && samples_left > 0) {
    samples_left -= batch;
    replay = options_.self_imitation && evaluator.have_best() ? evaluator.best().assignment
                                                              : std::vector<int>();
    Tape tape = policy.Forward(inputs.features, inputs.allowed, columns, sample);
    std::vector<double> rewards(batch);
    bool complete = true;
    for (int n = 0; n < batch && complete; ++n) {
      std::vector<int> assignment(L);
      for (int l = 0; l < L; ++l) assignment[l] = tape.actions[l][n];
      const PricedPlan* plan = evaluator.Evaluate(assignment);
      complete = plan != nullptr;
      if (complete) rewards[n] = Reward(*plan);
    }
    if (!complete) break;
    double mean = 0, var = 0;
    for (double r : rewards) mean += r / batch;
    for (double r : rewards) var += (r - mean) * (r - mean) / batch;
    if (!have_baseline) baseline = mean;
    have_baseline = true;
    // Advantages in units of the batch's spread (at least 0.05 log-cost units). A floor of 1 unit
    // damps the collapse of a converged policy but measured worse on the scheduler suite
    // (docs/benchmarks.md); the saved policy is distilled towards the best plan anyway.
    const double scale = std::max(std::sqrt(var), 0.05);
    std::vector<double> advantages(columns, 0.0);
    for (int n = 0; n < batch; ++n) advantages[n] = (rewards[n] - baseline) / scale;
    if (!replay.empty()) {
      advantages[batch] = std::max(0.0, Reward(evaluator.best()) - baseline) / scale;
    }
    baseline = options_.baseline_decay * baseline + (1 - options_.baseline_decay) * mean;
    std::vector<MatrixXd> dlogits;
    SurrogateLoss(tape, advantages, entropy_weight, &dlogits);
    VectorXd grad = policy.Backward(inputs.features, tape, dlogits);
    const double norm = grad.norm();
    if (norm > options_.clip_norm) grad *= options_.clip_norm / norm;
    adam.Apply(policy.params(), grad, options_.learning_rate);
    entropy_weight =
        options_.entropy_start * std::max(0.0, 1.0 - static_cast<double>(evaluator.evaluated()) /
                                                         static_cast<double>(train_budget));
    RankTypes(tape, batch);
    if (options.progress) {
      options.progress(evaluator.evaluated(), evaluator.have_best() && evaluator.best().feasible
                                                  ? evaluator.best().cost_usd
                                                  : cost::kInfinity);
    }
    stale = evaluator.improvements() == last_improvements ? stale + 1 : 0;
    repeating = evaluator.evaluated() == last_evaluated ? repeating + 1 : 0;
    last_improvements = evaluator.improvements();
    last_evaluated = evaluator.evaluated();
    // Converged: the policy has settled and finds nothing better, or it only samples plans it
    // has already seen while nothing improves.
    if (stale >= options_.patience &&
        (MeanEntropy(tape) < 0.05 || repeating >= options_.patience)) {
      break;
    }
  }
}

void RlScheduler::Distill(const cost::CostModel& model, const std::vector<int>& best,
                          LstmPolicy& policy) {
  // Until every layer's choice in `best` has probability 0.9 on average (geometric), or for at
  // most kMaxSteps steps.
  constexpr int kMaxSteps = 500;
  const double target = -std::log(0.9) * static_cast<double>(best.size());
  const PolicyInputs inputs = MakePolicyInputs(model);
  Adam adam;
  for (int step = 0; step < kMaxSteps; ++step) {
    Tape tape = policy.Forward(
        inputs.features, inputs.allowed, 1,
        [&](int l, const MatrixXd&, std::vector<int>& actions) { actions[0] = best[l]; });
    std::vector<MatrixXd> dlogits;
    if (SurrogateLoss(tape, {1.0}, 0.0, &dlogits) < target) break;  // -log p(best)
    VectorXd grad = policy.Backward(inputs.features, tape, dlogits);
    const double norm = grad.norm();
    if (norm > options_.clip_norm) grad *= options_.clip_norm / norm;
    adam.Apply(policy.params(), grad, options_.learning_rate);
  }
}

}  // namespace

std::unique_ptr<Scheduler> NewRlScheduler(RlOptions options) {
  return std::make_unique<RlScheduler>(options);
}

}  // namespace heterps::sched::rl
