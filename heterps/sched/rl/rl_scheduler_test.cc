#include "heterps/sched/rl/rl_scheduler.h"

#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/sched/schedulers.h"
#include "heterps/sched/testing/random_instance.h"

namespace heterps::sched::rl {
namespace {

using testing::CostModelOf;
using testing::MakeRandomInstance;

Plan RunScheduler(std::unique_ptr<Scheduler> scheduler, const cost::CostModel& model,
         const SchedulerOptions& options = {}) {
  auto plan = scheduler->Schedule(model, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

TEST(RlSchedulerTest, FindsTheOptimumWhereItIsUnique) {
  std::mt19937_64 rng(2024);
  int unique = 0, found = 0;
  for (int trial = 0; trial < 40; ++trial) {
    auto instance = MakeRandomInstance(rng, {3 + static_cast<int>(rng() % 4),
                                             2 + static_cast<int>(rng() % 3), 6});
    cost::CostModel model = CostModelOf(instance);
    Plan optimum = RunScheduler(NewExactScheduler(), model);
    if (!optimum.feasible) continue;
    // Unique: no other assignment comes within 1e-6 of the optimum.
    SchedulerOptions all;
    int near = 0;
    std::vector<int> a(model.num_layers(), 0);
    while (true) {
      Plan p = MakePlan(model, a);
      if (p.feasible && p.cost_usd <= optimum.cost_usd * (1 + 1e-6)) ++near;
      int l = 0;
      while (l < model.num_layers() && ++a[l] == model.num_types()) a[l++] = 0;
      if (l == model.num_layers()) break;
    }
    if (near != 1) continue;
    ++unique;
    SchedulerOptions options;
    options.seed = 1 + trial;
    options.max_plans = 1000;
    Plan plan = RunScheduler(NewRlScheduler(), model, options);
    ASSERT_TRUE(plan.feasible) << "trial " << trial;
    EXPECT_GE(plan.cost_usd, optimum.cost_usd * (1 - 1e-9));
    if (plan.cost_usd <= optimum.cost_usd * (1 + 1e-9)) ++found;
  }
  EXPECT_GE(unique, 15);
  EXPECT_EQ(found, unique);
}

TEST(RlSchedulerTest, SameSeedSamePlan) {
  std::mt19937_64 rng(5);
  auto instance = MakeRandomInstance(rng, {12, 8, 8});
  cost::CostModel model = CostModelOf(instance);
  SchedulerOptions options;
  options.seed = 42;
  options.max_plans = 400;
  Plan a = RunScheduler(NewRlScheduler(), model, options);
  Plan b = RunScheduler(NewRlScheduler(), model, options);
  EXPECT_EQ(a.assignment, b.assignment);
  EXPECT_EQ(a.cost_usd, b.cost_usd);
  EXPECT_EQ(a.plans_evaluated, b.plans_evaluated);
}

TEST(RlSchedulerTest, HonoursBudgetAndTimeLimit) {
  std::mt19937_64 rng(6);
  auto instance = MakeRandomInstance(rng, {20, 16, 8});
  cost::CostModel model = CostModelOf(instance);
  SchedulerOptions options;
  options.max_plans = 100;
  Plan plan = RunScheduler(NewRlScheduler(), model, options);
  EXPECT_LE(plan.plans_evaluated, 100);
  EXPECT_GT(plan.plans_evaluated, 0);

  auto big = MakeRandomInstance(rng, {64, 64, 16});
  SchedulerOptions quick;
  quick.time_limit_seconds = 0.05;
  quick.max_plans = 1000000;
  Plan fast = RunScheduler(NewRlScheduler(), CostModelOf(big), quick);
  EXPECT_LT(fast.search_seconds, 1.0);
}

TEST(RlSchedulerTest, BadPolicyFileIsAClearError) {
  std::mt19937_64 rng(7);
  cost::CostModel model = CostModelOf(MakeRandomInstance(rng, {5, 3, 4}));
  SchedulerOptions options;
  options.policy_in = "no/such/policy.bin";
  auto plan = NewRlScheduler()->Schedule(model, options);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(std::string(plan.status().message()), ::testing::HasSubstr("no/such/policy.bin"));
}

}  // namespace
}  // namespace heterps::sched::rl
