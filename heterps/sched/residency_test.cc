// Data residency (cost::Workload::data_region): every scheduler keeps a job whose data is kept in
// one region on that region's types, stages and servers alike; the optimum under the rule is the
// optimum on the catalog cut down to the region (the oracle); an instance that only other regions
// could serve is reported infeasible, naming the data and its region.
#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/sched/default_schedulers.h"
#include "heterps/sched/schedulers.h"
#include "heterps/sched/testing/plan_checks.h"
#include "heterps/sched/testing/random_instance.h"
#include "nlohmann/json.hpp"

namespace heterps::sched {
namespace {

using testing::ExpectValid;
using ::testing::HasSubstr;
using testing::InstanceShape;
using testing::MakeRandomInstance;
using testing::Schedule;

const std::vector<std::string> kRegions = {"us-east-1", "eu-west-1", "ap-northeast-1"};

// Links between every ordered pair of the cluster's regions, drawn so that crossing one can make a
// plan slower or dearer than staying in one region, or not: bandwidth log-uniform from 100 KB/s
// to 10 GB/s, latency up to a tenth of `e_max` (the limit's seconds per batch), egress up to
// $0.10/GB.
void LinkRegions(std::mt19937_64& rng, double e_max, config::ClusterSpec* cluster) {
  std::uniform_real_distribution<double> unit(0, 1);
  cluster->links.clear();
  for (const std::string& from : cluster->Regions()) {
    for (const std::string& to : cluster->Regions()) {
      if (from == to) continue;
      config::RegionLink link;
      link.from = from;
      link.to = to;
      link.bandwidth = std::pow(10.0, 5 + 5 * unit(rng));
      link.latency = 0.1 * e_max * unit(rng);
      link.egress_per_byte = 0.1e-9 * unit(rng);
      cluster->links.push_back(link);
    }
  }
}

// A random instance of `first` to `first + span - 1` layers and 3 to 5 types, each type in one of
// kRegions at random, the regions linked by LinkRegions.
testing::RandomInstance ThreeRegionInstance(std::mt19937_64& rng, int first, int span) {
  InstanceShape shape{first + static_cast<int>(rng() % span), 3 + static_cast<int>(rng() % 3),
                      1 + static_cast<int>(rng() % 6)};
  auto instance = MakeRandomInstance(rng, shape);
  for (auto& type : instance.cluster.types) type.region = kRegions[rng() % kRegions.size()];
  LinkRegions(rng, instance.model.batch_size / instance.workload.throughput_limit,
              &instance.cluster);
  return instance;
}

// Every feasible plan runs its stages and servers in the data's region.
void ExpectResident(const cost::CostModel& model, const PricedPlan& plan, const std::string& what) {
  if (!plan.feasible) return;
  const std::string& region = model.workload().data_region;
  for (const PricedStage& stage : plan.stages) {
    EXPECT_EQ(model.type(stage.spec.type).region, region)
        << what << ": stage on " << model.type(stage.spec.type).name;
  }
  if (plan.ps.type >= 0) {
    EXPECT_EQ(model.type(plan.ps.type).region, region)
        << what << ": servers on " << model.type(plan.ps.type).name;
  }
}

TEST(ResidencyTest, EverySchedulerKeepsTheJobInTheDataRegionAndExactFindsTheRegionsOptimum) {
  std::mt19937_64 rng(4101);
  int feasible = 0, rule_binds = 0, homeless_reported = 0;
  for (int trial = 0; trial < 120; ++trial) {
    auto instance = ThreeRegionInstance(rng, 3, 4);
    const std::string region = instance.cluster.types[rng() % instance.cluster.types.size()].region;
    const PricedPlan anywhere = Schedule("exact", testing::CostModelOf(instance));
    // The oracle: the same job on the region's types alone, with no rule.
    auto local = instance;
    local.cluster.types.clear();
    for (const auto& type : instance.cluster.types) {
      if (type.region == region) local.cluster.types.push_back(type);
    }
    PricedPlan oracle = Schedule("brute", testing::CostModelOf(local));
    // Where the catalog has CPU types but none in the region, the servers have nowhere to run:
    // the region alone would price none.
    const auto cpu = [](const config::ClusterSpec& cluster) {
      return std::any_of(cluster.types.begin(), cluster.types.end(),
                         [](const auto& type) { return type.kind == config::DeviceKind::kCpu; });
    };
    const bool homeless_servers = cpu(instance.cluster) && !cpu(local.cluster);
    if (homeless_servers) oracle.feasible = false;

    instance.workload.data_region = region;
    instance.workload.data_source = "clicks.tsv";
    const cost::CostModel model = testing::CostModelOf(instance);
    const std::string trace = "trial " + std::to_string(trial) + ", data in " + region + "\n" +
                              instance.model_yaml + instance.cluster_yaml;
    // The random search, drawing without replacement, sees every plan of the region's types that
    // hold their layers, and no other.
    int64_t space = 1;
    for (int l = 0; l < model.num_layers(); ++l) {
      int fit = 0;
      for (int t = 0; t < model.num_types(); ++t) {
        fit +=
            model.type(t).region == region && model.StageMemoryBytes(l, l) <= model.type(t).memory;
      }
      space *= fit > 0 ? fit : model.num_types();
    }
    SchedulerOptions every;
    every.max_plans = space + 1;
    EXPECT_EQ(Schedule("random", model, every).plans_evaluated, space) << trace;
    for (const std::string& name : DefaultSchedulers().Names()) {
      if (name == "brute") continue;
      SchedulerOptions options;
      options.seed = trial + 1;
      options.max_plans = name == "bo" ? 60 : 300;  // keeps rl and bo quick
      const PricedPlan plan = Schedule(name, model, options);
      ExpectValid(model, plan);
      ExpectResident(model, plan, name + ", " + trace);
      if (name == "exact") {
        ASSERT_EQ(plan.feasible, oracle.feasible) << trace;
        if (!plan.feasible) {
          EXPECT_THAT(plan.why.message, HasSubstr("region '" + region + "'")) << trace;
          // Unless a stage fails first (the reason is the first constraint that fails).
          if (homeless_servers && plan.why.constraint == "residency") ++homeless_reported;
          continue;
        }
        EXPECT_TRUE(plan.certified_optimal);
        ASSERT_NEAR(plan.cost_usd, oracle.cost_usd, 1e-9 * oracle.cost_usd) << trace;
        ++feasible;
        if (!anywhere.feasible || anywhere.cost_usd < plan.cost_usd * (1 - 1e-9)) ++rule_binds;
      }
    }
  }
  std::cout << feasible << " feasible, the rule binds in " << rule_binds << ", servers with no "
            << "region to run in reported in " << homeless_reported << "\n";
  EXPECT_GT(feasible, 25);
  // The rule changed the optimum (less often than with free links: crossing a region costs).
  EXPECT_GT(rule_binds, 4);
  EXPECT_GT(homeless_reported, 3);
}

// Without a rule, a plan may cross regions and pays for it: its links' time bounds its bottleneck
// and its egress adds to its cost (docs/cost_model.md, "Links between regions"). The exact
// scheduler stays exact: it equals brute force, which prices every plan through the provisioner,
// on random catalogs of three regions with random links.
TEST(LinksTest, ExactEqualsBruteForceWhenPlansCrossRegions) {
  std::mt19937_64 rng(4103);
  int feasible = 0, crossing = 0, links_bind = 0;
  for (int trial = 0; trial < 120; ++trial) {
    auto instance = ThreeRegionInstance(rng, 3, 4);
    const cost::CostModel model = testing::CostModelOf(instance);
    const std::string trace = "trial " + std::to_string(trial) + "\n" + instance.model_yaml +
                              instance.cluster_yaml;
    const PricedPlan brute = Schedule("brute", model);
    const PricedPlan exact = Schedule("exact", model);
    ExpectValid(model, exact);
    ASSERT_EQ(exact.feasible, brute.feasible) << trace;
    if (!brute.feasible) {
      if (brute.why.constraint == "links") ++links_bind;
      continue;
    }
    ++feasible;
    EXPECT_TRUE(exact.certified_optimal) << trace;
    ASSERT_NEAR(exact.cost_usd, brute.cost_usd, 1e-9 * brute.cost_usd) << trace;
    std::vector<int> regions;
    for (const PricedStage& stage : exact.stages) regions.push_back(model.RegionOf(stage.spec.type));
    if (exact.ps.type >= 0) regions.push_back(model.RegionOf(exact.ps.type));
    if (std::adjacent_find(regions.begin(), regions.end(), std::not_equal_to<>()) !=
        regions.end()) {
      ++crossing;
    }
  }
  std::cout << feasible << " feasible, " << crossing << " optima cross a region, "
            << links_bind << " infeasible for their links\n";
  EXPECT_GT(feasible, 25);
  EXPECT_GT(crossing, 3);
}

constexpr char kModel[] = R"(name: m
batch_size: 1024
layers:
  - {name: in, kind: input, dense: 13, sparse: 4}
  - {name: emb, kind: embedding, rows: 1000, dim: 8}
  - {name: cat, kind: interaction, op: concat}
  - {name: fc, kind: fc, in: 45, out: 64, activation: relu}
  - {name: logit, kind: fc, in: 64, out: 1}
  - {name: loss, kind: logloss}
)";

// A slow CPU in the data's region, a fast GPU and a fast CPU in another.
constexpr char kCluster[] = R"(name: two-regions
region: eu-west-1
types:
  - {name: slow, kind: cpu, tflops: 0.01, mem_gbs: 1, lookup_mrows: 1, memory_gib: 16,
     network_gbps: 1, price_per_hour: 1, units: 2}
  - {name: fast, kind: gpu, tflops: 100, mem_gbs: 1000, lookup_mrows: 1000, memory_gib: 16,
     network_gbps: 100, price_per_hour: 2, units: 8, region: us-east-1}
  - {name: server, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 16,
     network_gbps: 100, price_per_hour: 1, units: 8, region: us-east-1}
links:
  - {from: eu-west-1, to: us-east-1, bandwidth_gbps: 1, latency_ms: 40, egress_per_gb: 0.02}
  - {from: us-east-1, to: eu-west-1, bandwidth_gbps: 1, latency_ms: 40, egress_per_gb: 0.02}
)";

cost::CostModel ModelOf(const std::string& cluster_text, double limit, const std::string& region,
                        bool activations_may_cross = false) {
  auto model = config::ParseModelSpec(kModel, "m.yaml");
  auto cluster = config::ParseClusterSpec(cluster_text, "c.yaml");
  EXPECT_TRUE(model.ok() && cluster.ok()) << model.status() << cluster.status();
  cost::Workload workload{limit, 1e9};
  workload.data_region = region;
  workload.data_source = "day_0.tsv";
  workload.activations_may_cross = activations_may_cross;
  auto cm = cost::CostModel::Create(*model, *cluster, workload);
  EXPECT_TRUE(cm.ok()) << cm.status();
  return *cm;
}

TEST(ResidencyTest, AJobOnlyAnotherRegionCouldServeIsInfeasibleAndSaysWhy) {
  // Without the rule the fast region serves it; with it, the slow CPU cannot.
  const PricedPlan free = Schedule("exact", ModelOf(kCluster, 1e6, ""));
  ASSERT_TRUE(free.feasible) << free.why.message;
  const cost::CostModel ruled = ModelOf(kCluster, 1e6, "eu-west-1");
  EXPECT_FALSE(ruled.InDataRegion(1));
  EXPECT_FALSE(ruled.HostsPs(2));
  EXPECT_TRUE(ruled.HostsPs(0));
  EXPECT_EQ(ruled.StageSeconds(3, 4, 1), cost::kInfinity);
  for (const std::string& name : DefaultSchedulers().Names()) {
    SchedulerOptions options;
    options.max_plans = name == "bo" ? 60 : name == "brute" ? 0 : 300;
    const PricedPlan plan = Schedule(name, ruled, options);
    EXPECT_FALSE(plan.feasible) << name;
    ExpectValid(ruled, plan);
  }
  const PricedPlan exact = Schedule("exact", ruled);
  EXPECT_THAT(exact.why.message,
              HasSubstr("on the types of region 'eu-west-1', where the data (day_0.tsv) is kept, "
                        "fails: "));
  // A plan that puts a stage in the other region names the stage, its region and the data's.
  const PricedPlan crossing = PricePlan(ruled, {0, 0, 0, 1, 1, 1});
  ASSERT_FALSE(crossing.feasible);
  EXPECT_EQ(crossing.why.constraint, "residency");
  EXPECT_EQ(crossing.why.message,
            "stage 1 (fc..loss on fast) is in region 'us-east-1', but the data (day_0.tsv) is "
            "kept in region 'eu-west-1' and nothing derived from it may leave it");
  // Under --activations-may-cross the layers from 'logit' on may leave: the plan that moves
  // logit..loss to the fast GPU keeps the rule, the one that moves fc too does not, and says
  // where the line is.
  const cost::CostModel may_cross = ModelOf(kCluster, 1e6, "eu-west-1", true);
  EXPECT_EQ(may_cross.away_from_name(), "logit");
  EXPECT_NE(PricePlan(may_cross, {0, 0, 0, 0, 1, 1}).why.constraint, "residency");
  EXPECT_EQ(PricePlan(may_cross, {0, 0, 0, 1, 1, 1}).why.message,
            "stage 1 (fc..loss on fast) is in region 'us-east-1', but the data (day_0.tsv) is "
            "kept in region 'eu-west-1' and nothing derived from it may leave it before layer "
            "'logit' (activations may cross from there on)");
  const PricedPlan fastest = Schedule("exact", may_cross);
  ASSERT_FALSE(fastest.feasible);
  EXPECT_THAT(fastest.why.message,
              HasSubstr("with the stages before layer 'logit' and the servers on the types of "
                        "region 'eu-west-1'"));
  const nlohmann::json json = nlohmann::json::parse(PlanToJson(may_cross, fastest));
  EXPECT_EQ(json["activations_may_cross"], true);
  EXPECT_EQ(nlohmann::json::parse(PlanToJson(ruled, exact))["activations_may_cross"], false);
}

// The manual baseline (the sparse side on CPUs, the dense side on GPUs) offers the dense layers
// another region's GPU where activations may cross, and only past the line.
TEST(ActivationsMayCrossTest, TheManualBaselineTakesAnotherRegionsGpuPastTheLine) {
  const PricedPlan home = Schedule("manual", ModelOf(kCluster, 1e3, "eu-west-1"));
  ASSERT_TRUE(home.feasible) << home.why.message;
  ASSERT_EQ(home.stages.size(), 1u);
  EXPECT_EQ(home.stages[0].spec.type, 0);
  const cost::CostModel may_cross = ModelOf(kCluster, 1e3, "eu-west-1", true);
  const PricedPlan plan = Schedule("manual", may_cross);
  ASSERT_TRUE(plan.feasible) << plan.why.message;
  ExpectValid(may_cross, plan);
  ASSERT_EQ(plan.stages.size(), 2u);
  EXPECT_EQ(plan.stages[0].spec.type, 0);
  EXPECT_EQ(plan.stages[1].spec.type, 1);
  EXPECT_EQ(plan.stages[1].spec.first, may_cross.away_from());
}

// The first layer past the raw features: behind every embedding and after the dense features'
// first learned layer; none where the loss reads raw features.
TEST(ActivationsMayCrossTest, TheFirstLayerPastTheRawFeatures) {
  const auto away = [](const std::string& yaml) {
    auto model = config::ParseModelSpec(yaml, "m.yaml");
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? cost::FirstLayerAwayFromData(*model) : -1;
  };
  EXPECT_EQ(away(kModel), 4);  // in, emb, cat, fc | logit, loss
  // Sparse features only: right after the embedding.
  EXPECT_EQ(away(R"(name: m
batch_size: 64
layers:
  - {name: in, kind: input, sparse: 4}
  - {name: emb, kind: embedding, rows: 100, dim: 8}
  - {name: cat, kind: interaction, op: concat}
  - {name: fc, kind: fc, in: 32, out: 1}
  - {name: loss, kind: logloss}
)"),
            2);
  // A bottom MLP before the embedding: the embedding is the last raw reader.
  EXPECT_EQ(away(R"(name: m
batch_size: 64
layers:
  - {name: in, kind: input, dense: 13, sparse: 4}
  - {name: bottom, kind: fc, in: 13, out: 8}
  - {name: emb, kind: embedding, rows: 100, dim: 8}
  - {name: dot, kind: interaction, op: dot}
  - {name: top, kind: fc, in: 18, out: 1}
  - {name: loss, kind: logloss}
)"),
            3);
  // The loss reads the raw dense feature: nothing may leave.
  EXPECT_EQ(away(R"(name: m
batch_size: 64
layers:
  - {name: in, kind: input, dense: 1}
  - {name: loss, kind: logloss}
)"),
            2);
}

// Under --activations-may-cross the stages from cost::FirstLayerAwayFromData on may run in other
// regions and pay for their links; the stages before it and the servers stay. Every scheduler's
// plan keeps that rule, and exact still equals brute force (which prices every plan, the rule
// included, through the provisioner) on random catalogs of three regions with random links.
TEST(ActivationsMayCrossTest, ExactEqualsBruteForceAndEveryPlanKeepsTheRawStagesHome) {
  std::mt19937_64 rng(4107);
  int feasible = 0, crossing = 0, cheaper = 0;
  for (int trial = 0; trial < 120; ++trial) {
    auto instance = ThreeRegionInstance(rng, 5, 3);
    const std::string region = instance.cluster.types[rng() % instance.cluster.types.size()].region;
    // The data's region eight times dearer and egress a thousandth of LinkRegions' (activations
    // are many bytes: at those prices leaving the region seldom pays), so that it pays sometimes.
    for (auto& type : instance.cluster.types) {
      if (type.region == region) type.price_per_hour *= 8;
    }
    for (auto& link : instance.cluster.links) link.egress_per_byte *= 0.001;
    instance.workload.data_region = region;
    instance.workload.data_source = "clicks.tsv";
    const PricedPlan strict = Schedule("exact", testing::CostModelOf(instance));
    instance.workload.activations_may_cross = true;
    const cost::CostModel model = testing::CostModelOf(instance);
    const int away = model.away_from();
    ASSERT_EQ(away, cost::FirstLayerAwayFromData(instance.model));
    ASSERT_LT(away, model.num_layers());
    const std::string trace = "trial " + std::to_string(trial) + ", data in " + region +
                              ", may leave from layer " + std::to_string(away) + "\n" +
                              instance.model_yaml + instance.cluster_yaml;
    const auto keeps_rule = [&](const PricedPlan& plan, const std::string& name) {
      if (!plan.feasible) return;
      for (const PricedStage& stage : plan.stages) {
        if (stage.spec.first >= away) continue;
        EXPECT_EQ(model.type(stage.spec.type).region, region)
            << name << ": stage from layer " << stage.spec.first << " on "
            << model.type(stage.spec.type).name << "\n"
            << trace;
      }
      if (plan.ps.type >= 0) {
        EXPECT_EQ(model.type(plan.ps.type).region, region) << name;
      }
    };
    for (const std::string& name : DefaultSchedulers().Names()) {
      if (name == "brute" || name == "exact") continue;
      SchedulerOptions options;
      options.seed = trial + 1;
      options.max_plans = name == "bo" ? 60 : 300;
      const PricedPlan plan = Schedule(name, model, options);
      ExpectValid(model, plan);
      keeps_rule(plan, name);
    }
    const PricedPlan brute = Schedule("brute", model);
    const PricedPlan exact = Schedule("exact", model);
    ExpectValid(model, exact);
    keeps_rule(exact, "exact");
    keeps_rule(brute, "brute");
    ASSERT_EQ(exact.feasible, brute.feasible) << trace;
    if (strict.feasible) {
      EXPECT_TRUE(exact.feasible) << trace;  // the policy only adds plans
    }
    if (!exact.feasible) continue;
    ++feasible;
    EXPECT_TRUE(exact.certified_optimal) << trace;
    ASSERT_NEAR(exact.cost_usd, brute.cost_usd, 1e-9 * brute.cost_usd) << trace;
    if (strict.feasible) {
      EXPECT_LE(exact.cost_usd, strict.cost_usd * (1 + 1e-9)) << trace;
    }
    if (!strict.feasible || exact.cost_usd < strict.cost_usd * (1 - 1e-9)) ++cheaper;
    for (const PricedStage& stage : exact.stages) {
      if (model.type(stage.spec.type).region != region) {
        ++crossing;
        break;
      }
    }
  }
  std::cout << feasible << " feasible, " << crossing << " optima leave the region, " << cheaper
            << " cheaper (or only feasible) under the policy\n";
  EXPECT_GT(feasible, 25);
  EXPECT_GE(crossing, 3);
  EXPECT_GE(cheaper, 3);
}

// Where no type of the data's region has the memory for a layer, the fastest plan exact reports
// stays in the region and says so: memory, not residency.
TEST(ResidencyTest, ALayerNoTypeOfTheRegionCanHoldIsAMemoryShortfallThere) {
  // The region us-east-1's two types (not the first of the catalog) lose their memory.
  std::string small = kCluster;
  for (int i = 0; i < 2; ++i) {
    small.replace(small.rfind("memory_gib: 16"), 14, "memory_gib: 0.0001");
  }
  const cost::CostModel model = ModelOf(small, 1e3, "us-east-1");
  const PricedPlan plan = Schedule("exact", model);
  ASSERT_FALSE(plan.feasible);
  EXPECT_EQ(plan.why.constraint, "memory");
  EXPECT_THAT(plan.why.message, HasSubstr("on the types of region 'us-east-1'"));
  for (const PricedStage& stage : plan.stages) EXPECT_TRUE(model.InDataRegion(stage.spec.type));
}

TEST(ResidencyTest, TheServersMustBeInTheDataRegionToo) {
  // The data's region has a GPU and no CPU: the servers, which receive its ids, cannot run there.
  // (The CPU is far too slow to run the stages itself.)
  const std::string cluster = R"(name: gpu-only-here
types:
  - {name: gpu, kind: gpu, tflops: 100, mem_gbs: 1000, lookup_mrows: 1000, memory_gib: 16,
     network_gbps: 100, price_per_hour: 2, units: 8, region: eu-west-1}
  - {name: server, kind: cpu, tflops: 0.000001, mem_gbs: 0.001, lookup_mrows: 100, memory_gib: 16,
     network_gbps: 100, price_per_hour: 1, units: 8, region: us-east-1}
links:
  - {from: eu-west-1, to: us-east-1, bandwidth_gbps: 1, latency_ms: 40, egress_per_gb: 0.02}
  - {from: us-east-1, to: eu-west-1, bandwidth_gbps: 1, latency_ms: 40, egress_per_gb: 0.02}
)";
  // Without the rule the stages run on the GPU and the servers across the link: the plan says
  // what crosses, how long it takes and what it costs.
  const cost::CostModel free = ModelOf(cluster, 1e3, "");
  const PricedPlan across = Schedule("exact", free);
  ASSERT_TRUE(across.feasible);
  EXPECT_EQ(free.type(across.ps.type).name, "server");
  EXPECT_GT(across.link_seconds, 0);
  EXPECT_LE(across.link_seconds, 1 / across.throughput * free.batch() * (1 + 1e-12));
  EXPECT_NEAR(across.egress_usd,
              free.workload().samples / free.batch() * free.EgressUsdPerBatch(across.wan),
              1e-9 * across.egress_usd);
  EXPECT_GT(across.egress_usd, 0);
  const nlohmann::json json = nlohmann::json::parse(PlanToJson(free, across));
  ASSERT_EQ(json["links"].size(), 2u);
  EXPECT_EQ(json["links"][0]["from"], "eu-west-1");
  EXPECT_EQ(json["links"][0]["to"], "us-east-1");
  EXPECT_GT(json["links"][0]["bytes_per_batch"].get<double>(), 0);
  EXPECT_DOUBLE_EQ(json["egress_usd"].get<double>(), across.egress_usd);
  const cost::CostModel ruled = ModelOf(cluster, 1e3, "eu-west-1");
  EXPECT_TRUE(ruled.prices_ps());
  EXPECT_EQ(ruled.CheapestPsRate(ruled.max_bottleneck_seconds()), cost::kInfinity);
  const PricedPlan plan = Schedule("exact", ruled);
  ASSERT_FALSE(plan.feasible);
  EXPECT_EQ(plan.why.constraint, "residency");
  EXPECT_THAT(plan.why.message,
              HasSubstr("the data (day_0.tsv) is kept in region 'eu-west-1', which has no CPU "
                        "type for the parameter servers (they receive its ids)"));
}

TEST(ResidencyTest, ADataRegionTheCatalogLacksIsAnError) {
  auto model = config::ParseModelSpec(kModel, "m.yaml");
  auto cluster = config::ParseClusterSpec(kCluster, "c.yaml");
  ASSERT_TRUE(model.ok() && cluster.ok());
  cost::Workload workload{1e3, 1e9};
  workload.data_region = "sa-east-1";
  workload.data_source = "day_0.tsv";
  auto cm = cost::CostModel::Create(*model, *cluster, workload);
  ASSERT_FALSE(cm.ok());
  EXPECT_EQ(cm.status().message(),
            "the data (day_0.tsv) is kept in region 'sa-east-1', where cluster 'two-regions' "
            "(c.yaml) has no type; its regions: eu-west-1, us-east-1");
  cluster->name = "plain";
  cluster->source = "p.yaml";
  for (auto& type : cluster->types) type.region.clear();
  workload.data_source.clear();
  cm = cost::CostModel::Create(*model, *cluster, workload);
  ASSERT_FALSE(cm.ok());
  EXPECT_EQ(cm.status().message(),
            "the data is kept in region 'sa-east-1', where cluster 'plain' (p.yaml) has no type; "
            "its types name no region");
}

}  // namespace
}  // namespace heterps::sched
