// The price of syncing across regions (docs/cost_model.md, "Training across regions"), against
// sums and figures worked out by hand.
#include "heterps/cost/region_sync.h"

#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/cost/emb_model_testing.h"

namespace heterps::cost {
namespace {

// sum_i 1 - (1 - p_i)^m, p_i = i^-a / sum_j j^-a, over every row.
double DistinctRowsSum(double m, int64_t rows, double a) {
  double mass = 0, touched = 0;
  for (int64_t i = 1; i <= rows; ++i) mass += std::pow(static_cast<double>(i), -a);
  for (int64_t i = 1; i <= rows; ++i) {
    touched += -std::expm1(m * std::log1p(-std::pow(static_cast<double>(i), -a) / mass));
  }
  return touched;
}

TEST(RegionSyncTest, DistinctRowsIsTheExpectedCountOfTouchedRows) {
  // Uniform: R (1 - (1 - 1/R)^m) exactly.
  EXPECT_NEAR(DistinctRows(1000, 1000, 0), 1000 * (1 - std::pow(0.999, 1000)), 1e-6);
  for (double a : {0.0, 0.6, 1.0, 1.3}) {
    for (int64_t rows : {50, 5000, 200000}) {
      for (double m : {1.0, 300.0, 20000.0, 1e6}) {
        const double expected = DistinctRowsSum(m, rows, a);
        EXPECT_NEAR(DistinctRows(m, static_cast<double>(rows), a), expected, 0.01 * expected)
            << "m " << m << ", rows " << rows << ", skew " << a;
      }
    }
  }
  EXPECT_EQ(DistinctRows(0, 1000, 1), 0);
  EXPECT_EQ(DistinctRows(10, 0, 1), 0);
  EXPECT_NEAR(DistinctRows(3, 1e9, 0), 3, 1e-6);
  EXPECT_NEAR(DistinctRows(1e12, 1e9, 1), 1e9, 1e7);  // every row, about
}

TEST(RegionSyncTest, DistinctRowsMatchesDrawsFromZipf) {
  // The expectation against rows actually drawn: Zipf(1) over 20,000 rows, 5,000 draws, 20 times.
  constexpr int kRows = 20000, kDraws = 5000, kTrials = 20;
  std::vector<double> weights(kRows);
  for (int i = 0; i < kRows; ++i) weights[i] = 1.0 / (i + 1);
  std::mt19937_64 random(11);
  std::discrete_distribution<int> zipf(weights.begin(), weights.end());
  double mean = 0;
  for (int t = 0; t < kTrials; ++t) {
    std::vector<bool> seen(kRows);
    int distinct = 0;
    for (int d = 0; d < kDraws; ++d) {
      const int row = zipf(random);
      if (!seen[row]) ++distinct;
      seen[row] = true;
    }
    mean += static_cast<double>(distinct) / kTrials;
  }
  EXPECT_NEAR(DistinctRows(kDraws, kRows, 1), mean, 0.02 * mean);
}

class SyncPriceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two slots of 1000 rows of 4 floats (a row's delta: an 8-byte key and 16 bytes), and an fc
    // of 8 x 1 weights and a bias (36 bytes), batch 100.
    auto model = config::ParseModelSpec(testing::kEmbModelYaml, "emb.yaml");
    ASSERT_TRUE(model.ok()) << model.status();
    model_ = *model;
    // Three regions; a -> b 1 Gbit/s, 20 ms, $0.02/GB; every other link 2 Gbit/s, 40 ms,
    // $0.09/GB.
    auto cluster = config::ParseClusterSpec(R"(name: three
types:
  - {name: a1, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, price_per_hour: 2, units: 4, region: a}
  - {name: b1, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, price_per_hour: 1, units: 4, region: b}
  - {name: c1, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, price_per_hour: 1, units: 4, region: c}
links:
  - {from: a, to: b, bandwidth_gbps: 1, latency_ms: 20, egress_per_gb: 0.02}
  - {from: b, to: a, bandwidth_gbps: 2, latency_ms: 40, egress_per_gb: 0.09}
  - {from: a, to: c, bandwidth_gbps: 2, latency_ms: 40, egress_per_gb: 0.09}
  - {from: c, to: a, bandwidth_gbps: 2, latency_ms: 40, egress_per_gb: 0.09}
  - {from: b, to: c, bandwidth_gbps: 2, latency_ms: 40, egress_per_gb: 0.09}
  - {from: c, to: b, bandwidth_gbps: 2, latency_ms: 40, egress_per_gb: 0.09}
)",
                                            "three.yaml");
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *cluster;
  }

  // A delta after `batches` batches, rows uniform: 36 + 2 tables x 1000 (1 - 0.999^(100 b)) x 24.
  static double Delta(double batches) {
    return 36 + 2 * 1000 * (1 - std::pow(0.999, 100 * batches)) * 24;
  }

  config::ModelSpec model_;
  config::ClusterSpec cluster_;
};

TEST_F(SyncPriceTest, DeltaBytesAreTheDenseWeightsAndTheTouchedRows) {
  EXPECT_NEAR(DeltaBytes(model_, 1, 0), Delta(1), 1e-6);
  EXPECT_NEAR(DeltaBytes(model_, 10, 0), Delta(10), 1e-6);
  // However long, never more than every row.
  EXPECT_NEAR(DeltaBytes(model_, 1e6, 0), 36 + 2 * 1000 * 24, 1e-6);
}

TEST_F(SyncPriceTest, PeerToPeerSendsEachDeltaToEveryOtherRegion) {
  SyncJob job{{{"a", 0.75}, {"b", 0.25}}, 10, 1000, 1e6, 0};
  auto price = PriceSync(model_, cluster_, job, SyncTopology::kPeerToPeer);
  ASSERT_TRUE(price.ok()) << price.status();
  ASSERT_EQ(price->flows.size(), 2u);
  const SyncFlow& ab = price->flows[0];
  const SyncFlow& ba = price->flows[1];
  EXPECT_EQ(ab.from, "a");
  EXPECT_EQ(ab.to, "b");
  EXPECT_EQ(ba.cadence, "b");
  // Every region takes 1e6 / 100 steps, a's of 75 samples and b's of 25: 1e6 / (100 x 10) =
  // 1000 windows, every 10 x 100 / 1000 = 1 s; a's delta the rows of 10 x 75 lookups a table
  // (7.5 of the model's batches), b's of 10 x 25.
  EXPECT_NEAR(ab.bytes_per_sync, Delta(7.5), 1e-6);
  EXPECT_NEAR(ba.bytes_per_sync, Delta(2.5), 1e-6);
  EXPECT_DOUBLE_EQ(ab.syncs, 1000);
  EXPECT_DOUBLE_EQ(ba.syncs, 1000);
  EXPECT_DOUBLE_EQ(ab.seconds_between_syncs, 1);
  EXPECT_DOUBLE_EQ(ba.seconds_between_syncs, 1);
  EXPECT_NEAR(ab.seconds_per_sync, Delta(7.5) / 1.25e8 + 0.020, 1e-12);
  EXPECT_NEAR(ba.seconds_per_sync, Delta(2.5) / 2.5e8 + 0.040, 1e-12);
  EXPECT_NEAR(ab.egress_usd, 1000 * Delta(7.5) * 0.02e-9, 1e-12);
  EXPECT_NEAR(price->egress_usd, 1000 * (0.02e-9 * Delta(7.5) + 0.09e-9 * Delta(2.5)), 1e-12);
  EXPECT_NEAR(price->bytes, 1000 * (Delta(7.5) + Delta(2.5)), 1e-6);
  EXPECT_TRUE(price->keeps_up());
  EXPECT_EQ(price->name(), "peer to peer");
}

// With eager windows between the K-th steps': the K-th steps' flows as before, each with one
// step to cross, and a flow per link of the 9 windows between, each at its bound (one step's
// delta), 9000 over the job.
TEST_F(SyncPriceTest, EagerWindowsArePricedAtTheirBoundAfterEveryStep) {
  SyncJob job{{{"a", 0.75}, {"b", 0.25}}, 10, 1000, 1e6, 0, /*eager=*/true};
  auto price = PriceSync(model_, cluster_, job, SyncTopology::kPeerToPeer);
  ASSERT_TRUE(price.ok()) << price.status();
  ASSERT_EQ(price->flows.size(), 4u);  // a -> b, b -> a; then the same, eager
  const SyncFlow& ab = price->flows[0];
  const SyncFlow& eager_ab = price->flows[2];
  EXPECT_FALSE(ab.eager);
  EXPECT_TRUE(eager_ab.eager);
  EXPECT_EQ(eager_ab.from, "a");
  EXPECT_EQ(eager_ab.to, "b");
  EXPECT_NEAR(ab.bytes_per_sync, Delta(7.5), 1e-6);
  EXPECT_DOUBLE_EQ(ab.syncs, 1000);
  EXPECT_DOUBLE_EQ(ab.syncs_per_step, 0.1);
  EXPECT_DOUBLE_EQ(ab.seconds_between_syncs, 0.1);  // a step: 100 / 1000 s
  EXPECT_NEAR(eager_ab.bytes_per_sync, Delta(0.75), 1e-6);
  EXPECT_DOUBLE_EQ(eager_ab.syncs, 9000);
  EXPECT_DOUBLE_EQ(eager_ab.syncs_per_step, 0.9);
  EXPECT_DOUBLE_EQ(eager_ab.seconds_between_syncs, 0.1);
  EXPECT_NEAR(eager_ab.seconds_per_sync, Delta(0.75) / 1.25e8 + 0.020, 1e-12);
  EXPECT_NEAR(eager_ab.egress_usd, 9000 * Delta(0.75) * 0.02e-9, 1e-12);
  EXPECT_NEAR(price->bytes,
              1000 * (Delta(7.5) + Delta(2.5)) + 9000 * (Delta(0.75) + Delta(0.25)), 1e-6);
  // b -> a's 40 ms of latency in a 100 ms step: it keeps up; at 1e4 samples/s (10 ms steps) no
  // link does, though without eager windows (100 ms between syncs) both would.
  EXPECT_TRUE(price->keeps_up());
  job.throughput_limit = 1e4;
  auto fast = PriceSync(model_, cluster_, job, SyncTopology::kPeerToPeer);
  ASSERT_TRUE(fast.ok());
  EXPECT_FALSE(fast->keeps_up());
  job.eager = false;
  auto windows = PriceSync(model_, cluster_, job, SyncTopology::kPeerToPeer);
  ASSERT_TRUE(windows.ok());
  EXPECT_TRUE(windows->keeps_up());
  // K = 1: every step is a K-th step; eager adds nothing.
  job = {{{"a", 0.75}, {"b", 0.25}}, 1, 1000, 1e6, 0, /*eager=*/true};
  auto every = PriceSync(model_, cluster_, job, SyncTopology::kPeerToPeer);
  ASSERT_TRUE(every.ok());
  EXPECT_EQ(every->flows.size(), 2u);
}

TEST_F(SyncPriceTest, AHubSendsEachRegionTheOthersDeltas) {
  SyncJob job{{{"a", 0.5}, {"b", 0.25}, {"c", 0.25}}, 10, 1000, 1e6, 0};
  auto price = PriceSync(model_, cluster_, job, SyncTopology::kHub, "a");
  ASSERT_TRUE(price.ok()) << price.status();
  ASSERT_EQ(price->flows.size(), 4u);  // b -> a, a -> b, c -> a, a -> c
  EXPECT_EQ(price->name(), "hub a");
  const SyncFlow& to_b = price->flows[1];
  EXPECT_EQ(to_b.from, "a");
  EXPECT_EQ(to_b.to, "b");
  EXPECT_EQ(to_b.cadence, "b");
  // Back to b, the merge of a's and c's 10 steps of 50 and 25 samples: the rows 750 lookups a
  // table touch, 1000 (1 - 0.999^750), in each of the 2 tables.
  EXPECT_NEAR(to_b.bytes_per_sync, Delta(7.5), 1e-6);
  EXPECT_DOUBLE_EQ(to_b.syncs, 1e6 / 1000);
  EXPECT_NEAR(price->flows[0].bytes_per_sync, Delta(2.5), 1e-6);  // b's own 10 x 25
  // Nothing goes from a region to itself, and every flow's egress is in the total.
  double egress = 0;
  for (const SyncFlow& f : price->flows) {
    EXPECT_NE(f.from, f.to);
    egress += f.egress_usd;
  }
  EXPECT_NEAR(price->egress_usd, egress, 1e-12);
}

TEST_F(SyncPriceTest, ALinkTooSlowForItsSyncsIsSaid) {
  // A sync every step: at 1e6 samples/s the job takes 10,000 steps a second, each sync with 20 ms
  // (a -> b) or 40 ms (b -> a) of latency: far more than either link can carry, b -> a the most.
  SyncJob job{{{"a", 0.75}, {"b", 0.25}}, 1, 1e6, 1e9, 0};
  auto price = PriceSync(model_, cluster_, job, SyncTopology::kPeerToPeer);
  ASSERT_TRUE(price.ok()) << price.status();
  EXPECT_FALSE(price->keeps_up());
  EXPECT_EQ(price->flows[price->busiest()].from, "b");
  EXPECT_GT(price->flows[0].load(), 1);
  EXPECT_GT(price->flows[price->busiest()].load(), 200);
}

TEST_F(SyncPriceTest, TheCheapestSyncHasTheLeastEgressOfThoseThatKeepUp) {
  std::mt19937_64 random(5);
  for (int trial = 0; trial < 40; ++trial) {
    std::uniform_real_distribution<double> unit(0.05, 1);
    const double x = unit(random), y = unit(random), z = unit(random);
    const int64_t k = 1 + static_cast<int64_t>(random() % 200);
    const double tl = std::pow(10, 2 + 4 * unit(random));
    SyncJob job{{{"a", x / (x + y + z)}, {"b", y / (x + y + z)}, {"c", z / (x + y + z)}},
                k,
                tl,
                1e9,
                trial % 2 == 0 ? 1.0 : 0.0};
    auto best = CheapestSync(model_, cluster_, job);
    ASSERT_TRUE(best.ok()) << best.status();
    std::vector<SyncPrice> all;
    all.push_back(*PriceSync(model_, cluster_, job, SyncTopology::kPeerToPeer));
    for (const char* hub : {"a", "b", "c"}) {
      all.push_back(*PriceSync(model_, cluster_, job, SyncTopology::kHub, hub));
    }
    for (const SyncPrice& other : all) {
      if (other.keeps_up()) {
        EXPECT_TRUE(best->keeps_up()) << other.name() << " keeps up";
        EXPECT_LE(best->egress_usd, other.egress_usd * (1 + 1e-12)) << other.name();
      } else if (!best->keeps_up()) {
        EXPECT_LE(best->flows[best->busiest()].load(), other.flows[other.busiest()].load());
      }
    }
  }
}

TEST_F(SyncPriceTest, BadJobsAreRefusedNamingTheField) {
  auto refused = [&](const SyncJob& job, const std::string& topology_hub = "") {
    auto price = topology_hub.empty()
                     ? PriceSync(model_, cluster_, job, SyncTopology::kPeerToPeer)
                     : PriceSync(model_, cluster_, job, SyncTopology::kHub, topology_hub);
    EXPECT_EQ(price.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(price.status().message());
  };
  using ::testing::HasSubstr;
  EXPECT_THAT(refused({{{"a", 1}}, 10, 1000, 1e6}), HasSubstr("two regions or more"));
  EXPECT_THAT(refused({{{"a", 0.5}, {"x", 0.5}}, 10, 1000, 1e6}),
              HasSubstr("region 'x' is not a region of cluster three (its regions: a, b, c)"));
  EXPECT_THAT(refused({{{"a", 0.5}, {"a", 0.5}}, 10, 1000, 1e6}),
              HasSubstr("region 'a' is given twice"));
  EXPECT_THAT(refused({{{"a", 0.5}, {"b", 0.4}}, 10, 1000, 1e6}),
              HasSubstr("add up to 0.9, not 1"));
  EXPECT_THAT(refused({{{"a", 1.5}, {"b", -0.5}}, 10, 1000, 1e6}),
              HasSubstr("the share of region 'a' is 1.5"));
  EXPECT_THAT(refused({{{"a", 0.5}, {"b", 0.5}}, 0, 1000, 1e6}), HasSubstr("sync_steps: 0"));
  EXPECT_THAT(refused({{{"a", 0.5}, {"b", 0.5}}, 10, 0, 1e6}), HasSubstr("throughput_limit (0)"));
  EXPECT_THAT(refused({{{"a", 0.5}, {"b", 0.5}}, 10, 1000, -1}), HasSubstr("samples (-1)"));
  EXPECT_THAT(refused({{{"a", 0.5}, {"b", 0.5}}, 10, 1000, 1e6, -2}), HasSubstr("access_skew: -2"));
  EXPECT_THAT(refused({{{"a", 0.5}, {"b", 0.5}}, 10, 1000, 1e6}, "c"),
              HasSubstr("hub: 'c' is not one of the job's data regions"));
}

}  // namespace
}  // namespace heterps::cost
