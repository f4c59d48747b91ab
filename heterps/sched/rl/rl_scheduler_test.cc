#include "heterps/sched/rl/rl_scheduler.h"

#include <cmath>
#include <initializer_list>
#include <iostream>
#include <limits>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/status_macros.h"
#include "heterps/sched/schedulers.h"
#include "heterps/sched/testing/random_instance.h"

namespace heterps::sched::rl {
namespace {

using testing::CostModelOf;
using testing::MakeRandomInstance;

PricedPlan RunScheduler(std::unique_ptr<Scheduler> scheduler, const cost::CostModel& model,
                        const SchedulerOptions& options = {}) {
  auto plan = scheduler->Schedule(model, options);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *plan;
}

TEST(RlSchedulerTest, FindsTheOptimumWhereItIsUnique) {
  std::mt19937_64 rng(2024);
  int unique = 0, found = 0;
  for (int trial = 0; trial < 40; ++trial) {
    auto instance = MakeRandomInstance(
        rng, {3 + static_cast<int>(rng() % 4), 2 + static_cast<int>(rng() % 3), 6});
    cost::CostModel model = CostModelOf(instance);
    PricedPlan optimum = RunScheduler(NewExactScheduler(), model);
    if (!optimum.feasible) continue;
    // Unique: no other assignment comes within 1e-6 of the optimum.
    SchedulerOptions all;
    int near = 0;
    std::vector<int> a(model.num_layers(), 0);
    while (true) {
      PricedPlan p = PricePlan(model, a);
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
    PricedPlan plan = RunScheduler(NewRlScheduler(), model, options);
    ASSERT_TRUE(plan.feasible) << "trial " << trial;
    EXPECT_GE(plan.cost_usd, optimum.cost_usd * (1 - 1e-9));
    if (plan.cost_usd <= optimum.cost_usd * (1 + 1e-9)) ++found;
  }
  EXPECT_GE(unique, 15);
  EXPECT_EQ(found, unique);
}

// The cheapest plan of at most two stages, by enumeration: every type alone and every cut of the
// model between two types.
PricedPlan BestTwoStagePlan(const cost::CostModel& model) {
  const int L = model.num_layers(), T = model.num_types();
  PricedPlan best;
  for (int a = 0; a < T; ++a) {
    for (int b = 0; b < T; ++b) {
      for (int cut = a == b ? L : 1; cut <= L; ++cut) {
        std::vector<int> assignment(L, b);
        std::fill(assignment.begin(), assignment.begin() + cut, a);
        PricedPlan plan = PricePlan(model, assignment);
        if (Better(plan, best) || best.assignment.empty()) best = std::move(plan);
      }
    }
  }
  return best;
}

// The scheduler zoo's 46-layer model (benchmarks/zoo_instances.cc) on `cluster_yaml` at the zoo's
// loose limit, as sched_suite sets it.
absl::StatusOr<cost::CostModel> Deep46(const std::string& cluster_yaml) {
  std::string model_yaml =
      "name: deep-46\nbatch_size: 1024\nlayers:\n"
      "  - {name: in, kind: input, dense: 64, sparse: 16}\n"
      "  - {name: emb, kind: embedding, rows: 2000000, dim: 16}\n"
      "  - {name: cat, kind: interaction, op: concat}\n"
      "  - {name: tower, kind: mlp, sizes: [320";
  for (int i = 0; i < 41; ++i) model_yaml += ", 256";
  model_yaml += ", 1], last_activation: none}\n  - {name: loss, kind: logloss}\n";
  HETERPS_ASSIGN_OR_RETURN(config::ModelSpec model,
                           config::ParseModelSpec(model_yaml, "deep-46.yaml"));
  HETERPS_ASSIGN_OR_RETURN(config::ClusterSpec cluster,
                           config::ParseClusterSpec(cluster_yaml, "catalog.yaml"));
  return testing::WithRelativeLimit(model, cluster, 0.25);
}

// rl's plans at a budget of 1000 with each of `seeds`: each feasible and at most `bound` USD.
void ExpectRlAtMost(const cost::CostModel& model, double bound,
                    std::initializer_list<uint64_t> seeds) {
  SchedulerOptions options;
  options.max_plans = 1000;
  for (uint64_t seed : seeds) {
    options.seed = seed;
    PricedPlan plan = RunScheduler(NewRlScheduler(), model, options);
    ASSERT_TRUE(plan.feasible) << "seed " << seed;
    EXPECT_LE(plan.cost_usd, bound) << "seed " << seed;
  }
}

// rl's plans as ExpectRlAtMost, at most `within` times exact's certified optimum.
void ExpectRlNearTheOptimum(const cost::CostModel& model, double within,
                            std::initializer_list<uint64_t> seeds) {
  SchedulerOptions exact_options;
  exact_options.time_limit_seconds = 120;
  const PricedPlan optimum = RunScheduler(NewExactScheduler(), model, exact_options);
  ASSERT_TRUE(optimum.certified_optimal);
  ExpectRlAtMost(model, optimum.cost_usd * within, seeds);
}

// A 46-layer model on 16 types of random figures: its cheapest plan puts layers 0..39 on the cheap
// CPU type (20 of its 23 units, the other 3 holding the parameter servers) and the rest on a second
// type. The cost of that pair is not monotone in the cut (one layer more on the first type needs
// 22 of its units and moves the servers elsewhere: 51% dearer), and cuts spread evenly over the
// model missed the cheapest one: rl returned a plan 6% above it.
TEST(RlSchedulerTest, FindsTheCheapestCutOfATwoTypePlan) {
  const std::string cluster_yaml =
      "name: random-16\ntypes:\n"
      "  - {name: c5.4xl-random0, kind: cpu, tflops: 1.9433, mem_gbs: 99.1705, lookup_mrows: "
      "153.093, memory_gib: 11.9092, network_gbps: 47.4844, overhead_us: 0.567033, latency_us: "
      "15.7597, price_per_hour: 1.14524, units: 17, dp_loss: 0.1442}\n"
      "  - {name: m5.8xl-random0, kind: cpu, tflops: 1.46371, mem_gbs: 123.533, lookup_mrows: "
      "39.0707, memory_gib: 94.3041, network_gbps: 265.635, overhead_us: 1.42125, latency_us: "
      "29.1512, price_per_hour: 1.20339, units: 13, dp_loss: 0.001044}\n"
      "  - {name: r5.16xl-random0, kind: cpu, tflops: 0.281456, mem_gbs: 76.2553, lookup_mrows: "
      "112.763, memory_gib: 102.604, network_gbps: 30.6141, overhead_us: 13.8715, latency_us: "
      "67.1348, price_per_hour: 0.563711, units: 27, dp_loss: 0.001521}\n"
      "  - {name: c6i.32xl-random0, kind: cpu, tflops: 3.17527, mem_gbs: 85.2441, lookup_mrows: "
      "40.6308, memory_gib: 6.33335, network_gbps: 10.1653, overhead_us: 12.3146, latency_us: "
      "29.0057, price_per_hour: 0.519097, units: 20, dp_loss: 0.002478}\n"
      "  - {name: i4i.8xl-random0, kind: cpu, tflops: 0.568357, mem_gbs: 197.653, lookup_mrows: "
      "45.9901, memory_gib: 4.59287, network_gbps: 13.0063, overhead_us: 5.31697, latency_us: "
      "20.0143, price_per_hour: 0.651431, units: 21, dp_loss: 0.002898, ssd_gib: 6984, ssd_kiops: "
      "800}\n"
      "  - {name: t4-random0, kind: gpu, tflops: 4.55386, mem_gbs: 1530.02, lookup_mrows: 1130.53, "
      "memory_gib: 59.5053, network_gbps: 8.41886, overhead_us: 4.2905, latency_us: 15.7159, "
      "price_per_hour: 9.45691, units: 4, dp_loss: 0.05162}\n"
      "  - {name: l4-random0, kind: gpu, tflops: 22.1617, mem_gbs: 989.842, lookup_mrows: 2229.48, "
      "memory_gib: 233.522, network_gbps: 334.366, overhead_us: 0.506949, latency_us: 8.88487, "
      "price_per_hour: 4.93766, units: 31, dp_loss: 0.03661}\n"
      "  - {name: a10g-random0, kind: gpu, tflops: 27.9841, mem_gbs: 203.43, lookup_mrows: "
      "3201.26, memory_gib: 22.3324, network_gbps: 69.7525, overhead_us: 0.872322, latency_us: "
      "11.7474, price_per_hour: 14.8281, units: 13, dp_loss: 0.01337}\n"
      "  - {name: a100-random0, kind: gpu, tflops: 3.09216, mem_gbs: 264.496, lookup_mrows: "
      "782.648, memory_gib: 299.522, network_gbps: 142.772, overhead_us: 5.0237, latency_us: "
      "21.4335, price_per_hour: 1.0799, units: 3, dp_loss: 0.2575}\n"
      "  - {name: h100-random0, kind: gpu, tflops: 3.98414, mem_gbs: 508.093, lookup_mrows: "
      "2623.24, memory_gib: 80.7053, network_gbps: 136.746, overhead_us: 3.78341, latency_us: "
      "11.6383, price_per_hour: 2.27432, units: 13, dp_loss: 0.07706}\n"
      "  - {name: c5.4xl-random1, kind: cpu, tflops: 2.34038, mem_gbs: 50.9221, lookup_mrows: "
      "88.4704, memory_gib: 5.72188, network_gbps: 33.0604, overhead_us: 2.91883, latency_us: "
      "31.6108, price_per_hour: 1.79459, units: 3, dp_loss: 0.03908}\n"
      "  - {name: m5.8xl-random1, kind: cpu, tflops: 0.385024, mem_gbs: 143.713, lookup_mrows: "
      "63.9204, memory_gib: 19.8007, network_gbps: 31.7647, overhead_us: 2.93996, latency_us: "
      "79.6707, price_per_hour: 1.38426, units: 1, dp_loss: 0.07736}\n"
      "  - {name: r5.16xl-random1, kind: cpu, tflops: 1.06692, mem_gbs: 180.006, lookup_mrows: "
      "50.2712, memory_gib: 20.0265, network_gbps: 12.22, overhead_us: 0.538529, latency_us: "
      "31.4372, price_per_hour: 1.26333, units: 23, dp_loss: 0.003468}\n"
      "  - {name: c6i.32xl-random1, kind: cpu, tflops: 2.39514, mem_gbs: 177.836, lookup_mrows: "
      "308.262, memory_gib: 16.0121, network_gbps: 229.611, overhead_us: 2.36235, latency_us: "
      "35.3604, price_per_hour: 0.124918, units: 23, dp_loss: 0.0017}\n"
      "  - {name: i4i.8xl-random1, kind: cpu, tflops: 0.371649, mem_gbs: 24.0777, lookup_mrows: "
      "172.268, memory_gib: 152.939, network_gbps: 15.079, overhead_us: 1.86274, latency_us: "
      "10.4597, price_per_hour: 0.207538, units: 31, dp_loss: 0.004322, ssd_gib: 6984, ssd_kiops: "
      "800}\n"
      "  - {name: t4-random1, kind: gpu, tflops: 18.7654, mem_gbs: 790.062, lookup_mrows: 333.503, "
      "memory_gib: 11.4843, network_gbps: 24.2397, overhead_us: 0.590391, latency_us: 44.493, "
      "price_per_hour: 21.9274, units: 1, dp_loss: 0.1796}\n";
  auto cm = Deep46(cluster_yaml);
  ASSERT_TRUE(cm.ok()) << cm.status();
  const PricedPlan two = BestTwoStagePlan(*cm);
  ASSERT_TRUE(two.feasible);
  ExpectRlAtMost(*cm, two.cost_usd * (1 + 1e-9), {1, 2, 3});
}

// The same model on a catalog of spot pools of one or two units: the optimum chains four of them
// (T4, T4, L4, A10G); rl's plans of two stages (L4, T4) were 4.2% dearer until it re-solved pairs
// of adjacent stages, and single stages as two, over every type and cut.
TEST(RlSchedulerTest, ChainsSmallPoolsNearTheOptimum) {
  const std::string cluster_yaml =
      "name: spot-16\ntypes:\n"
      "  - {name: c5.4xl-spot0, kind: cpu, tflops: 1.74, mem_gbs: 57, lookup_mrows: 60, "
      "memory_gib: 32, network_gbps: 5, overhead_us: 2, latency_us: 50, price_per_hour: 0.68, "
      "units: 32, dp_loss: 0.04}\n"
      "  - {name: m5.8xl-spot0, kind: cpu, tflops: 3.5, mem_gbs: 110, lookup_mrows: 100, "
      "memory_gib: 128, network_gbps: 10, overhead_us: 2, latency_us: 40, price_per_hour: "
      "0.540837, units: 8, dp_loss: 0.12}\n"
      "  - {name: r5.16xl-spot0, kind: cpu, tflops: 7, mem_gbs: 200, lookup_mrows: 150, "
      "memory_gib: 512, network_gbps: 20, overhead_us: 2, latency_us: 40, price_per_hour: 4.03, "
      "units: 12, dp_loss: 0.05}\n"
      "  - {name: c6i.32xl-spot0, kind: cpu, tflops: 14, mem_gbs: 300, lookup_mrows: 250, "
      "memory_gib: 256, network_gbps: 50, overhead_us: 2, latency_us: 30, price_per_hour: 1.72221, "
      "units: 2, dp_loss: 0.13}\n"
      "  - {name: i4i.8xl-spot0, kind: cpu, tflops: 4, mem_gbs: 120, lookup_mrows: 100, "
      "memory_gib: 256, network_gbps: 25, overhead_us: 2, latency_us: 40, price_per_hour: 2.75, "
      "units: 12, dp_loss: 0.04, ssd_gib: 6984, ssd_kiops: 800}\n"
      "  - {name: t4-spot0, kind: gpu, tflops: 8, mem_gbs: 300, lookup_mrows: 800, memory_gib: 16, "
      "network_gbps: 25, overhead_us: 8, latency_us: 30, price_per_hour: 0.187161, units: 1, "
      "dp_loss: 0.14}\n"
      "  - {name: l4-spot0, kind: gpu, tflops: 30, mem_gbs: 300, lookup_mrows: 1000, memory_gib: "
      "24, network_gbps: 50, overhead_us: 6, latency_us: 25, price_per_hour: 0.8, units: 8, "
      "dp_loss: 0.06}\n"
      "  - {name: a10g-spot0, kind: gpu, tflops: 31, mem_gbs: 600, lookup_mrows: 1500, memory_gib: "
      "24, network_gbps: 50, overhead_us: 6, latency_us: 25, price_per_hour: 0.451508, units: 1, "
      "dp_loss: 0.14}\n"
      "  - {name: a100-spot0, kind: gpu, tflops: 40, mem_gbs: 1555, lookup_mrows: 3000, "
      "memory_gib: 40, network_gbps: 400, overhead_us: 5, latency_us: 15, price_per_hour: 4.1, "
      "units: 4, dp_loss: 0.05}\n"
      "  - {name: h100-spot0, kind: gpu, tflops: 67, mem_gbs: 3350, lookup_mrows: 5000, "
      "memory_gib: 80, network_gbps: 400, overhead_us: 5, latency_us: 10, price_per_hour: 3.45968, "
      "units: 2, dp_loss: 0.13}\n"
      "  - {name: c5.4xl-spot1, kind: cpu, tflops: 1.74, mem_gbs: 57, lookup_mrows: 60, "
      "memory_gib: 32, network_gbps: 5, overhead_us: 2, latency_us: 50, price_per_hour: 0.191096, "
      "units: 5, dp_loss: 0.12}\n"
      "  - {name: m5.8xl-spot1, kind: cpu, tflops: 3.5, mem_gbs: 110, lookup_mrows: 100, "
      "memory_gib: 128, network_gbps: 10, overhead_us: 2, latency_us: 40, price_per_hour: "
      "0.492487, units: 8, dp_loss: 0.12}\n"
      "  - {name: r5.16xl-spot1, kind: cpu, tflops: 7, mem_gbs: 200, lookup_mrows: 150, "
      "memory_gib: 512, network_gbps: 20, overhead_us: 2, latency_us: 40, price_per_hour: 1.43742, "
      "units: 3, dp_loss: 0.13}\n"
      "  - {name: c6i.32xl-spot1, kind: cpu, tflops: 14, mem_gbs: 300, lookup_mrows: 250, "
      "memory_gib: 256, network_gbps: 50, overhead_us: 2, latency_us: 30, price_per_hour: 2.53059, "
      "units: 2, dp_loss: 0.13}\n"
      "  - {name: i4i.8xl-spot1, kind: cpu, tflops: 4, mem_gbs: 120, lookup_mrows: 100, "
      "memory_gib: 256, network_gbps: 25, overhead_us: 2, latency_us: 40, price_per_hour: "
      "0.914562, units: 3, dp_loss: 0.12, ssd_gib: 6984, ssd_kiops: 800}\n"
      "  - {name: t4-spot1, kind: gpu, tflops: 8, mem_gbs: 300, lookup_mrows: 800, memory_gib: 16, "
      "network_gbps: 25, overhead_us: 8, latency_us: 30, price_per_hour: 0.157999, units: 2, "
      "dp_loss: 0.14}\n";
  auto cm = Deep46(cluster_yaml);
  ASSERT_TRUE(cm.ok()) << cm.status();
  ExpectRlNearTheOptimum(*cm, 1.03, {1, 2});
}

// sched_scaling's 64-layer chain on 16 types of the fleet, a tight limit and a quarter of the
// units, the stages priced only: the optimum chains four stages at a bottleneck far below the
// limit's, each type's few units used in full. rl's plans were 4.8% dearer (two-type mixes near the
// limit's bottleneck) until it was seeded with the beam's plans (BeamAssignments).
TEST(RlSchedulerTest, ChainsStagesAtAFastBottleneck) {
  auto cm = testing::ScalingInstance("examples/clusters/fleet-64.yaml", 64, 16, 1, 0.9, 0.25,
                                     /*stages_only=*/true);
  ASSERT_TRUE(cm.ok()) << cm.status();
  ExpectRlNearTheOptimum(*cm, 1.02, {1, 2});
}

TEST(RlSchedulerTest, SameSeedSamePlan) {
  std::mt19937_64 rng(5);
  auto instance = MakeRandomInstance(rng, {12, 8, 8});
  cost::CostModel model = CostModelOf(instance);
  SchedulerOptions options;
  options.seed = 42;
  options.max_plans = 400;
  PricedPlan a = RunScheduler(NewRlScheduler(), model, options);
  PricedPlan b = RunScheduler(NewRlScheduler(), model, options);
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
  PricedPlan plan = RunScheduler(NewRlScheduler(), model, options);
  EXPECT_LE(plan.plans_evaluated, 100);
  EXPECT_GT(plan.plans_evaluated, 0);

  auto big = MakeRandomInstance(rng, {64, 64, 16});
  SchedulerOptions quick;
  quick.time_limit_seconds = 0.05;
  quick.max_plans = 1000000;
  PricedPlan fast = RunScheduler(NewRlScheduler(), CostModelOf(big), quick);
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
      PricedPlan optimum = RunScheduler(NewExactScheduler(), model);
      PricedPlan homogeneous = RunScheduler(NewHomogeneousScheduler(), model);
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
  PricedPlan trained = RunScheduler(NewRlScheduler(policy_only), first, train);
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
  PricedPlan cold = run("", &cold_trace);
  PricedPlan warm = run(policy_file, &warm_trace);
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
