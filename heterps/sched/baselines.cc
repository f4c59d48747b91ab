// The heuristic baselines: greedy, manual and homogeneous. Each picks a type per layer by a rule
// and provisions the result exactly.
#include <cmath>

#include "absl/strings/string_view.h"
#include "heterps/base/deadline.h"
#include "heterps/sched/schedulers.h"

namespace heterps::sched {
namespace {

using cost::CostModel;

bool Fits(const CostModel& model, int l, int t) { return model.CanHold(l, l, t); }

// The type minimizing score(t) among those that can hold layer l (all types if none can).
template <typename Score>
int ArgMin(const CostModel& model, int l, Score score) {
  int best = -1;
  for (int pass = 0; pass < 2 && best < 0; ++pass) {
    for (int t = 0; t < model.num_types(); ++t) {
      if (pass == 0 && !Fits(model, l, t)) continue;
      if (best < 0 || score(t) < score(best)) best = t;
    }
  }
  return best;
}

class GreedyScheduler : public Scheduler {
 public:
  absl::string_view name() const override { return "greedy"; }
  absl::StatusOr<PricedPlan> Schedule(const CostModel& model, const SchedulerOptions&) override {
    base::Deadline clock(0);
    std::vector<int> assignment(model.num_layers());
    for (int l = 0; l < model.num_layers(); ++l) {
      assignment[l] = ArgMin(model, l, [&](int t) {
        return model.Stage(l, l, t).total() * model.type(t).price_per_hour;
      });
    }
    PricedPlan plan = PricePlan(model, assignment);
    plan.scheduler = std::string(name());
    plan.search_seconds = clock.Elapsed();
    return plan;
  }
};

class ManualScheduler : public Scheduler {
 public:
  absl::string_view name() const override { return "manual"; }
  absl::StatusOr<PricedPlan> Schedule(const CostModel& model, const SchedulerOptions&) override {
    base::Deadline clock(0);
    std::vector<int> assignment(model.num_layers());
    for (int l = 0; l < model.num_layers(); ++l) {
      const bool sparse_side = model.layer(l).sparse ||
                               model.model().layers[l].kind == config::LayerKind::kInput;
      const bool has_gpu = HasKind(model, l, config::DeviceKind::kGpu);
      const bool has_cpu = HasKind(model, l, config::DeviceKind::kCpu);
      config::DeviceKind want = sparse_side ? (has_cpu ? config::DeviceKind::kCpu
                                                       : config::DeviceKind::kGpu)
                                            : (has_gpu ? config::DeviceKind::kGpu
                                                       : config::DeviceKind::kCpu);
      assignment[l] = ArgMin(model, l, [&](int t) {
        const auto& type = model.type(t);
        if (type.kind != want) return cost::kInfinity;
        return sparse_side ? type.price_per_hour / type.lookup_rate
                           : type.price_per_hour / type.flops;
      });
    }
    PricedPlan plan = PricePlan(model, assignment);
    plan.scheduler = std::string(name());
    plan.search_seconds = clock.Elapsed();
    return plan;
  }

 private:
  // Whether a type of `kind` may run layer l (under a residency rule, one in the data's region,
  // or anywhere past the raw features where activations may cross: CostModel::MayRun).
  static bool HasKind(const CostModel& model, int l, config::DeviceKind kind) {
    for (int t = 0; t < model.num_types(); ++t) {
      if (model.MayRun(l, t) && model.type(t).kind == kind) return true;
    }
    return false;
  }
};

class HomogeneousScheduler : public Scheduler {
 public:
  absl::string_view name() const override { return "homogeneous"; }
  absl::StatusOr<PricedPlan> Schedule(const CostModel& model, const SchedulerOptions&) override {
    base::Deadline clock(0);
    PricedPlan best;
    for (int t = 0; t < model.num_types(); ++t) {
      PricedPlan plan = PricePlan(model, std::vector<int>(model.num_layers(), t));
      if (t == 0 || Better(plan, best)) best = plan;
    }
    best.scheduler = std::string(name());
    best.plans_evaluated = model.num_types();
    best.search_seconds = clock.Elapsed();
    return best;
  }
};

}  // namespace

std::unique_ptr<Scheduler> NewGreedyScheduler() { return std::make_unique<GreedyScheduler>(); }
std::unique_ptr<Scheduler> NewManualScheduler() { return std::make_unique<ManualScheduler>(); }
std::unique_ptr<Scheduler> NewHomogeneousScheduler() {
  return std::make_unique<HomogeneousScheduler>();
}

}  // namespace heterps::sched
