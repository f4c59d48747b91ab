#include "heterps/sched/rl/rl_scheduler.h"

#include <cmath>
#include <iostream>
#include <limits>
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

// Plans evaluated until the best cost first reached `target` (or the total if never).
struct Trace {
  std::vector<std::pair<int64_t, double>> points;
  int64_t EvaluationsToReach(double target) const {
    for (auto [n, cost] : points) {
      if (cost <= target * (1 + 1e-9)) return n;
    }
    return std::numeric_limits<int64_t>::max();
  }
};

TEST(RlSchedulerTest, WarmStartReachesAsGoodAPlanSooner) {
  // An instance where learning matters: its optimum mixes types and beats every homogeneous plan
  // by more than 5%. The related instance: the same model and cluster at a 15% higher limit.
  // The local search is off so that what is compared is the policy itself.
  std::mt19937_64 rng(31);
  testing::RandomInstance instance;
  for (int tries = 0;; ++tries) {
    ASSERT_LT(tries, 200) << "no instance with a heterogeneous optimum";
    instance = MakeRandomInstance(rng, {14, 6, 4});
    auto hard = [](const cost::CostModel& model) {
      Plan optimum = RunScheduler(NewExactScheduler(), model);
      Plan homogeneous = RunScheduler(NewHomogeneousScheduler(), model);
      return optimum.feasible && optimum.stages.size() >= 2 &&
             (!homogeneous.feasible || homogeneous.cost_usd > 1.05 * optimum.cost_usd);
    };
    auto raised = instance;
    raised.workload.throughput_limit *= 1.15;
    if (hard(CostModelOf(instance)) && hard(CostModelOf(raised))) break;
  }
  cost::CostModel first = CostModelOf(instance);
  instance.workload.throughput_limit *= 1.15;
  cost::CostModel related = CostModelOf(instance);
  RlOptions policy_only;  // what the policy learns: no local search, no two-type splits
  policy_only.polish_share = 0;
  policy_only.split_share = 0;
  const std::string policy_file = ::testing::TempDir() + "/warm_policy.bin";
  SchedulerOptions train;
  train.max_plans = 1500;
  train.policy_out = policy_file;
  Plan trained = RunScheduler(NewRlScheduler(policy_only), first, train);
  ASSERT_TRUE(trained.feasible);

  auto run = [&](const std::string& policy_in, Trace* trace) {
    SchedulerOptions options;
    options.max_plans = 1500;
    options.seed = 77;
    options.policy_in = policy_in;
    options.progress = [trace](int64_t n, double cost) { trace->points.push_back({n, cost}); };
    return RunScheduler(NewRlScheduler(policy_only), related, options);
  };
  Trace cold_trace, warm_trace;
  Plan cold = run("", &cold_trace);
  Plan warm = run(policy_file, &warm_trace);
  ASSERT_TRUE(cold.feasible && warm.feasible);
  EXPECT_LE(warm.cost_usd, cold.cost_usd * (1 + 1e-9));
  const int64_t cold_n = cold_trace.EvaluationsToReach(cold.cost_usd);
  const int64_t warm_n = warm_trace.EvaluationsToReach(cold.cost_usd);
  std::cout << "cold reached $" << cold.cost_usd << " after " << cold_n << " plans; warm after "
            << warm_n << "\n";
  EXPECT_LT(warm_n, cold_n);
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
