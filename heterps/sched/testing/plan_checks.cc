#include "heterps/sched/testing/plan_checks.h"

#include "gtest/gtest.h"
#include "heterps/sched/default_schedulers.h"

namespace heterps::sched::testing {

PricedPlan Schedule(absl::string_view name, const cost::CostModel& model,
                    const SchedulerOptions& options) {
  auto scheduler = DefaultSchedulers().Create(name);
  EXPECT_TRUE(scheduler.ok()) << scheduler.status();
  if (!scheduler.ok()) return PricedPlan{};
  auto plan = (*scheduler)->Schedule(model, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : PricedPlan{};
}

void ExpectValid(const cost::CostModel& model, const PricedPlan& plan) {
  ASSERT_EQ(plan.assignment.size(), static_cast<size_t>(model.num_layers()));
  std::vector<cost::StageSpec> stages = StagesOf(plan.assignment);
  ASSERT_EQ(stages.size(), plan.stages.size());
  PricedPlan again = PricePlan(model, plan.assignment);
  EXPECT_EQ(again.feasible, plan.feasible);
  if (!plan.feasible) {
    EXPECT_FALSE(plan.why.message.empty());
    return;
  }
  std::vector<int64_t> used(model.num_types(), 0);
  for (size_t s = 0; s < stages.size(); ++s) {
    EXPECT_EQ(stages[s].first, plan.stages[s].spec.first);
    EXPECT_EQ(stages[s].type, plan.stages[s].spec.type);
    used[stages[s].type] += plan.stages[s].units;
  }
  for (int t = 0; t < model.num_types(); ++t) EXPECT_LE(used[t], model.type(t).units);
  EXPECT_DOUBLE_EQ(plan.cost_usd, again.cost_usd);
  EXPECT_GE(plan.throughput, model.workload().throughput_limit * (1 - 1e-12));
}

}  // namespace heterps::sched::testing
