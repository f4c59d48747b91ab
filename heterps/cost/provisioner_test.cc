#include "heterps/cost/provisioner.h"

#include <cmath>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "heterps/sched/priced_plan.h"
#include "heterps/sched/testing/random_instance.h"

namespace heterps::cost {
namespace {

using sched::testing::InstanceShape;
using sched::testing::MakeRandomInstance;

// The oracle: every vector of units, k_s in [1, units of its type] (stage 0's at most the
// workload's cap on it; none where stage 0 ends before the layer the workload names).
struct Oracle {
  bool feasible = false;
  double cost = kInfinity;
};

Oracle BruteForce(const CostModel& model, const std::vector<StageSpec>& stages) {
  const size_t n = stages.size();
  std::vector<int64_t> k(n, 1);
  Oracle best;
  if (stages[0].last < model.workload().first_stage_through) return best;
  while (true) {
    std::vector<int64_t> used(model.num_types(), 0);
    double bottleneck = 0, rate = 0;
    bool ok = true;
    for (size_t s = 0; s < n; ++s) {
      const auto& type = model.type(stages[s].type);
      used[stages[s].type] += k[s];
      ok = ok && used[stages[s].type] <= type.units;
      double x = model.StageSeconds(stages[s].first, stages[s].last, stages[s].type);
      bottleneck = std::max(bottleneck, CostModel::ExecSeconds(x, type.dp_loss, k[s]));
      rate += static_cast<double>(k[s]) * type.price_per_hour;
    }
    // And every parameter-server choice beside the stages.
    for (int t = 0; ok && t < model.num_types(); ++t) {
      for (int64_t shards = 1; model.HostsPs(t) && shards <= model.type(t).units; ++shards) {
        const PsServers ps = model.Ps(t, shards);
        const double e = std::max(bottleneck, ps.seconds_per_batch);
        if (used[t] + shards <= model.type(t).units && e <= model.max_bottleneck_seconds()) {
          best.feasible = true;
          best.cost = std::min(best.cost, model.JobCost(e, rate + ps.usd_per_hour));
        }
      }
    }
    if (ok && !model.prices_ps() && bottleneck <= model.max_bottleneck_seconds()) {
      best.feasible = true;
      best.cost = std::min(best.cost, model.JobCost(bottleneck, rate));
    }
    const int64_t cap = model.workload().first_stage_max_units;
    auto most = [&](size_t s) {
      const int64_t units = model.type(stages[s].type).units;
      return s == 0 && cap > 0 ? std::min(units, cap) : units;
    };
    size_t s = 0;
    while (s < n && ++k[s] > most(s)) k[s++] = 1;
    if (s == n) break;
  }
  return best;
}

// A job with a GPU tier runs its first stage on one replica, through its first embedding layer
// (Workload::first_stage_max_units, first_stage_through): the provisioning is still the cheapest
// that keeps the rules, and says which it breaks when none does.
TEST(ProvisionerTest, KeepsTheFirstStagesCapAndMatchesBruteForce) {
  std::mt19937_64 rng(20261127);
  int feasible = 0, capped_away = 0, infeasible_by_cap = 0, short_first = 0;
  for (int trial = 0; trial < 600; ++trial) {
    InstanceShape shape{3 + static_cast<int>(rng() % 4), 1 + static_cast<int>(rng() % 3), 6};
    auto instance = MakeRandomInstance(rng, shape);
    const int64_t cap = 1 + static_cast<int64_t>(rng() % 2);
    instance.workload.first_stage_max_units = cap;
    // Half the time the first stage must also reach a given layer.
    const int through = rng() % 2 ? static_cast<int>(rng() % instance.model.layers.size()) : -1;
    instance.workload.first_stage_through = through;
    CostModel model = sched::testing::CostModelOf(instance);
    auto free = instance;
    free.workload.first_stage_max_units = 0;
    free.workload.first_stage_through = -1;
    CostModel uncapped = sched::testing::CostModelOf(free);
    std::vector<int> assignment(model.num_layers());
    for (int& t : assignment) t = static_cast<int>(rng() % model.num_types());
    std::vector<StageSpec> stages = sched::StagesOf(assignment);
    const Provisioning got = Provision(model, stages);
    const Provisioning without = Provision(uncapped, stages);
    const Oracle want = BruteForce(model, stages);
    ASSERT_EQ(got.feasible, want.feasible) << "trial " << trial << "\n"
                                           << instance.model_yaml << instance.cluster_yaml;
    if (without.feasible && without.units[0] > cap) ++capped_away;
    if (stages[0].last < through) {
      ++short_first;
      EXPECT_FALSE(got.feasible);
      EXPECT_EQ(got.why.constraint, "first stage");
      continue;
    }
    if (!got.feasible) {
      if (without.feasible) {
        ++infeasible_by_cap;
        EXPECT_NE(got.why.message.find("the most the first stage may have"), std::string::npos)
            << got.why.message;
      }
      continue;
    }
    ++feasible;
    ASSERT_NEAR(got.cost_usd, want.cost, 1e-9 * want.cost) << "trial " << trial;
    EXPECT_LE(got.units[0], cap);
  }
  // Cases where the cap changed the answer, both ways.
  EXPECT_GT(feasible, 100);
  EXPECT_GT(capped_away, 10);
  EXPECT_GT(infeasible_by_cap, 5);
  EXPECT_GT(short_first, 10);
}

TEST(ProvisionerTest, MatchesBruteForceOnRandomPlans) {
  std::mt19937_64 rng(20261122);
  int feasible = 0, not_fewest_units = 0, priced = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    InstanceShape shape{3 + static_cast<int>(rng() % 5), 1 + static_cast<int>(rng() % 4), 6};
    auto instance = MakeRandomInstance(rng, shape);
    CostModel model = sched::testing::CostModelOf(instance);
    std::vector<int> assignment(model.num_layers());
    for (int& t : assignment) t = static_cast<int>(rng() % model.num_types());
    std::vector<StageSpec> stages = sched::StagesOf(assignment);
    Provisioning got = Provision(model, stages);
    Oracle want = BruteForce(model, stages);
    ASSERT_EQ(got.feasible, want.feasible) << "trial " << trial << "\n"
                                           << instance.model_yaml << instance.cluster_yaml;
    if (!want.feasible) {
      EXPECT_FALSE(got.why.message.empty());
      continue;
    }
    ++feasible;
    ASSERT_NEAR(got.cost_usd, want.cost, 1e-9 * want.cost) << "trial " << trial;
    // The answer is what it says it is.
    std::vector<int64_t> used(model.num_types(), 0);
    double rate = 0;
    for (size_t s = 0; s < stages.size(); ++s) {
      used[stages[s].type] += got.units[s];
      rate += got.units[s] * model.type(stages[s].type).price_per_hour;
      if (got.units[s] >
          model.MinUnits(model.StageSeconds(stages[s].first, stages[s].last, stages[s].type),
                         stages[s].type, model.max_bottleneck_seconds())) {
        ++not_fewest_units;
      }
    }
    // The servers, where priced (an instance with CPU types).
    ASSERT_EQ(got.ps.type >= 0, model.prices_ps());
    if (got.ps.type >= 0) {
      ++priced;
      used[got.ps.type] += got.ps.shards;
      rate += got.ps.usd_per_hour;
      EXPECT_LE(got.ps.seconds_per_batch, got.bottleneck_seconds);
    }
    for (int t = 0; t < model.num_types(); ++t) EXPECT_LE(used[t], model.type(t).units);
    EXPECT_DOUBLE_EQ(got.usd_per_hour, rate);
    EXPECT_GE(got.throughput, model.workload().throughput_limit * (1 - 1e-12));
  }
  // The sample must exercise both outcomes and the case that makes provisioning a search.
  EXPECT_GT(feasible, 200);
  EXPECT_LT(feasible, 1000);
  EXPECT_GT(not_fewest_units, 0);
  EXPECT_GT(priced, feasible / 2);
}

TEST(ProvisionerTest, ExplainsEachConstraint) {
  std::mt19937_64 rng(7);
  std::set<std::string> seen;
  for (int trial = 0; trial < 400; ++trial) {
    auto instance = MakeRandomInstance(rng, {6, 3, 3});
    CostModel model = sched::testing::CostModelOf(instance);
    std::vector<int> assignment(model.num_layers());
    for (int& t : assignment) t = static_cast<int>(rng() % model.num_types());
    Provisioning p = Provision(model, sched::StagesOf(assignment));
    if (p.feasible) continue;
    seen.insert(p.why.constraint);
    EXPECT_GT(p.why.shortfall, 0) << p.why.message;
    // A stage's constraint names the stage; the servers' name them.
    const bool servers = p.why.message.find("parameter servers") != std::string::npos;
    EXPECT_TRUE(servers || p.why.message.find(" on t") != std::string::npos) << p.why.message;
  }
  EXPECT_EQ(seen, (std::set<std::string>{"memory", "throughput", "units", "parameter servers"}));
}

}  // namespace
}  // namespace heterps::cost
