// Tests of the search schedulers (genetic, bo, random): validity, the exact optimum as the oracle,
// budgets, determinism and the time limit.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "heterps/sched/default_schedulers.h"
#include "heterps/sched/schedulers.h"
#include "heterps/sched/testing/plan_checks.h"
#include "heterps/sched/testing/random_instance.h"

namespace heterps::sched {
namespace {

using testing::CostModelOf;
using testing::InstanceShape;
using testing::MakeRandomInstance;

const std::vector<std::string> kSearchers = {"genetic", "bo", "random"};

using testing::ExpectValid;
using testing::Schedule;

// The number of assignments the searches draw from: per layer, the types that can hold it alone
// (every type when none can).
int64_t AllowedSpace(const cost::CostModel& model) {
  int64_t space = 1;
  for (int l = 0; l < model.num_layers(); ++l) {
    int fit = 0;
    for (int t = 0; t < model.num_types(); ++t) {
      if (model.CanHold(l, l, t)) ++fit;
    }
    space *= fit > 0 ? fit : model.num_types();
  }
  return space;
}

// genetic and random get a budget above T^L, bo 100 plans (its GP would make more slow for a unit
// test). Every plan they return is valid and never beats the optimum; genetic and bo, which start
// from the homogeneous plans, never lose to the homogeneous scheduler; random, drawing without
// replacement, sees every allowed plan and so finds the optimum; genetic and bo find it where
// there are at most 64 plans.
TEST(SearchSchedulerTest, SmallInstancesAgainstTheOptimum) {
  std::mt19937_64 rng(2024);
  int small_feasible = 0;
  for (int trial = 0; trial < 60; ++trial) {
    InstanceShape shape{3 + static_cast<int>(rng() % 4), 2 + static_cast<int>(rng() % 3),
                        1 + static_cast<int>(rng() % 6)};
    auto instance = MakeRandomInstance(rng, shape);
    cost::CostModel model = CostModelOf(instance);
    const double space = std::pow(model.num_types(), model.num_layers());
    const bool few_plans = space <= 64;
    PricedPlan exact = Schedule("exact", model);
    PricedPlan homogeneous = Schedule("homogeneous", model);
    if (few_plans && exact.feasible) ++small_feasible;
    for (const std::string& name : kSearchers) {
      SCOPED_TRACE(name + " trial " + std::to_string(trial) + "\n" + instance.model_yaml +
                   instance.cluster_yaml);
      SchedulerOptions options;
      options.seed = trial + 1;
      options.time_limit_seconds = 0;
      options.max_plans = name == "bo" ? 100 : static_cast<int64_t>(space) + 1;
      PricedPlan plan = Schedule(name, model, options);
      EXPECT_EQ(plan.scheduler, name);
      EXPECT_FALSE(plan.certified_optimal);
      ExpectValid(model, plan);
      EXPECT_GT(plan.plans_evaluated, 0);
      EXPECT_LE(plan.plans_evaluated, options.max_plans);
      // A plan seen twice counts once, so no search counts more plans than there are.
      EXPECT_LE(plan.plans_evaluated, AllowedSpace(model));
      if (name == "random") {
        EXPECT_EQ(plan.plans_evaluated, AllowedSpace(model));
      }
      if (plan.feasible) {
        EXPECT_TRUE(exact.feasible);
        EXPECT_GE(plan.cost_usd, exact.cost_usd * (1 - 1e-9));
      }
      if (name != "random" && homogeneous.feasible) {
        EXPECT_TRUE(plan.feasible);
        EXPECT_LE(plan.cost_usd, homogeneous.cost_usd * (1 + 1e-9));
      }
      if (!exact.feasible) continue;
      if (name != "bo") {
        EXPECT_TRUE(plan.feasible);
      }
      if (name == "random" || few_plans) {
        EXPECT_NEAR(plan.cost_usd, exact.cost_usd, 1e-9 * exact.cost_usd);
      }
    }
  }
  EXPECT_GE(small_feasible, 5);  // the optimum checks ran on enough instances
}

// Where the units-relaxed dynamic program's plan breaks the units (the servers' and the stages'
// together), the seeds still hold a plan that fits them (one of the Lagrangian dual's), on every
// instance that has a feasible plan; and no seed is cheaper than the optimum.
TEST(SearchSchedulerTest, RelaxedAssignmentsFitTheUnitsWhereTheyBind) {
  std::mt19937_64 rng(77);
  int feasible = 0, binding = 0;
  for (int trial = 0; trial < 200; ++trial) {
    auto instance = MakeRandomInstance(rng, {4 + static_cast<int>(rng() % 5), 3, 2});
    cost::CostModel model = CostModelOf(instance);
    const PricedPlan exact = Schedule("exact", model);
    if (!exact.feasible) continue;
    ++feasible;
    const std::vector<std::vector<int>> seeds = RelaxedAssignments(model, 8);
    ASSERT_FALSE(seeds.empty());
    const PricedPlan first = PricePlan(model, seeds[0]);
    binding += !first.feasible && first.why.constraint == "units";
    bool any_feasible = false;
    for (const std::vector<int>& seed : seeds) {
      const PricedPlan plan = PricePlan(model, seed);
      if (!plan.feasible) continue;
      any_feasible = true;
      EXPECT_GE(plan.cost_usd, exact.cost_usd * (1 - 1e-9)) << "trial " << trial;
    }
    EXPECT_TRUE(any_feasible) << "trial " << trial << ": " << seeds.size()
                              << " seeds, none feasible\n"
                              << instance.model_yaml << instance.cluster_yaml;
  }
  EXPECT_GE(feasible, 50);
  EXPECT_GE(binding, 10);  // the units bound often enough for the test to mean something
}

// The beam's plans respect the units and the limit (each is feasible as provisioned), none is
// cheaper than the optimum, and on most small instances one of them is the optimum.
TEST(SearchSchedulerTest, BeamAssignmentsAreFeasibleAndOftenOptimal) {
  std::mt19937_64 rng(78);
  int feasible = 0, found = 0, optimal = 0;
  for (int trial = 0; trial < 200; ++trial) {
    auto instance = MakeRandomInstance(rng, {4 + static_cast<int>(rng() % 5), 3, 2});
    cost::CostModel model = CostModelOf(instance);
    const PricedPlan exact = Schedule("exact", model);
    const std::vector<std::vector<int>> beams = BeamAssignments(model, 8, 64);
    if (!exact.feasible) {
      for (const std::vector<int>& beam : beams) EXPECT_FALSE(PricePlan(model, beam).feasible);
      continue;
    }
    ++feasible;
    found += !beams.empty();
    double best = cost::kInfinity;
    for (const std::vector<int>& beam : beams) {
      const PricedPlan plan = PricePlan(model, beam);
      ASSERT_TRUE(plan.feasible) << "trial " << trial << ": " << plan.why.message << "\n"
                                 << instance.model_yaml << instance.cluster_yaml;
      EXPECT_GE(plan.cost_usd, exact.cost_usd * (1 - 1e-9)) << "trial " << trial;
      best = std::min(best, plan.cost_usd);
    }
    optimal += best <= exact.cost_usd * (1 + 1e-9);
  }
  EXPECT_GE(feasible, 50);
  EXPECT_GE(found, feasible * 9 / 10);
  EXPECT_GE(optimal, feasible * 3 / 4);
  std::printf("beam: %d feasible instances, a plan on %d, the optimum on %d\n", feasible, found,
              optimal);
}

TEST(SearchSchedulerTest, GeneticFindsTheOptimumOfSmallInstancesWithItsDefaultBudget) {
  std::mt19937_64 rng(77);
  int checked = 0;
  for (int trial = 0; checked < 20 && trial < 200; ++trial) {
    InstanceShape shape{3 + static_cast<int>(rng() % 4), 2 + static_cast<int>(rng() % 3),
                        1 + static_cast<int>(rng() % 6)};
    auto instance = MakeRandomInstance(rng, shape);
    cost::CostModel model = CostModelOf(instance);
    if (std::pow(model.num_types(), model.num_layers()) > 64) continue;
    PricedPlan exact = Schedule("exact", model);
    if (!exact.feasible) continue;
    ++checked;
    SchedulerOptions options;
    options.seed = trial;
    options.max_plans = 2000;
    PricedPlan plan = Schedule("genetic", model, options);
    ASSERT_TRUE(plan.feasible) << "trial " << trial;
    EXPECT_NEAR(plan.cost_usd, exact.cost_usd, 1e-9 * exact.cost_usd)
        << "trial " << trial << "\n"
        << instance.model_yaml << instance.cluster_yaml;
  }
  EXPECT_EQ(checked, 20);
}

// With a budget of 50 on a large instance every search uses exactly the budget, and reports
// progress that never runs past it.
TEST(SearchSchedulerTest, HonoursThePlanBudget) {
  std::mt19937_64 rng(7);
  auto instance = MakeRandomInstance(rng, {12, 8, 8});
  cost::CostModel model = CostModelOf(instance);
  for (const std::string& name : kSearchers) {
    SCOPED_TRACE(name);
    int64_t most = 0;
    double best = cost::kInfinity;
    SchedulerOptions options;
    options.max_plans = 50;
    options.time_limit_seconds = 0;
    options.progress = [&](int64_t evaluated, double cost) {
      EXPECT_GE(evaluated, most);
      EXPECT_LE(cost, best);
      most = evaluated;
      best = cost;
    };
    PricedPlan plan = Schedule(name, model, options);
    ExpectValid(model, plan);
    EXPECT_EQ(plan.plans_evaluated, 50);
    EXPECT_EQ(most, 50);
    if (plan.feasible) {
      EXPECT_EQ(best, plan.cost_usd);
    }
  }
}

TEST(SearchSchedulerTest, SameSeedSamePlan) {
  std::mt19937_64 rng(21);
  auto instance = MakeRandomInstance(rng, {12, 6, 8});
  cost::CostModel model = CostModelOf(instance);
  for (const std::string& name : kSearchers) {
    SCOPED_TRACE(name);
    SchedulerOptions options;
    options.max_plans = 150;
    options.time_limit_seconds = 0;  // no stopping on time, so that runs are comparable
    options.seed = 5;
    PricedPlan first = Schedule(name, model, options);
    PricedPlan second = Schedule(name, model, options);
    EXPECT_EQ(first.assignment, second.assignment);
    EXPECT_EQ(first.cost_usd, second.cost_usd);
    EXPECT_EQ(first.plans_evaluated, second.plans_evaluated);
    for (uint64_t seed : {6, 7, 123456789}) {
      options.seed = seed;
      PricedPlan plan = Schedule(name, model, options);
      ExpectValid(model, plan);
      EXPECT_EQ(plan.plans_evaluated, 150);
    }
  }
}

TEST(SearchSchedulerTest, HonoursTheTimeLimit) {
  std::mt19937_64 rng(8);
  auto instance = MakeRandomInstance(rng, {40, 32, 16});
  cost::CostModel model = CostModelOf(instance);
  for (const std::string& name : kSearchers) {
    SCOPED_TRACE(name);
    SchedulerOptions options;
    options.time_limit_seconds = 0.01;
    options.max_plans = 1000000000;
    const auto start = std::chrono::steady_clock::now();
    PricedPlan plan = Schedule(name, model, options);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    // The limit and one evaluation past it (well under 0.1 s), with a wide margin for a loaded
    // machine; a search that ignored the limit would run to its billion plans.
    EXPECT_LT(took.count(), 0.01 + 2.0);
    EXPECT_LT(plan.search_seconds, 0.01 + 2.0);
    EXPECT_GT(plan.plans_evaluated, 0);
    ExpectValid(model, plan);
  }
}

}  // namespace
}  // namespace heterps::sched
