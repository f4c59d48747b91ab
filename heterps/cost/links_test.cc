// What a plan sends across the links between regions, worked out by hand.
#include "gtest/gtest.h"
#include "heterps/cost/cost_model.h"
#include "heterps/cost/emb_model_testing.h"

namespace heterps::cost {
namespace {

// A small embedding model on two regions 1 Gbit/s and 20 ms apart one way, 2 Gbit/s back,
// $0.02/GB one way and $0.09/GB back.
TEST(LinksTest, TrafficAcrossRegionsGoesOverTheirLinks) {
  auto model = config::ParseModelSpec(testing::kEmbModelYaml, "emb.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  auto cluster = config::ParseClusterSpec(R"(name: two
types:
  - {name: here, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, price_per_hour: 2, units: 4, region: a}
  - {name: there, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, price_per_hour: 1, units: 4, region: b}
  - {name: also-here, kind: gpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, price_per_hour: 1, units: 4, region: a}
links:
  - {from: a, to: b, bandwidth_gbps: 1, latency_ms: 20, egress_per_gb: 0.02}
  - {from: b, to: a, bandwidth_gbps: 2, latency_ms: 20, egress_per_gb: 0.09}
)",
                                          "two.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  // A job whose dense weights go through the servers every step (asynchronous, or
  // --dense-on-servers).
  Workload through{1e3, 1e6};
  through.dense_through_servers = true;
  auto cm = CostModel::Create(*model, *cluster, through);
  ASSERT_TRUE(cm.ok()) << cm.status();
  EXPECT_EQ(cm->num_regions(), 2);
  EXPECT_EQ(cm->RegionOf(0), 0);
  EXPECT_EQ(cm->RegionOf(1), 1);
  EXPECT_EQ(cm->RegionOf(2), 0);
  // Within one region nothing crosses.
  WanLoad load = cm->NoWanLoad();
  cm->AddBoundaryLoad(1, 0, 2, &load);
  cm->AddServerLoad(0, 3, 0, 2, &load);
  EXPECT_TRUE(load.empty());
  EXPECT_EQ(cm->LinkSeconds(load), 0);
  EXPECT_EQ(cm->EgressUsdPerBatch(load), 0);
  // The cut after emb from a to b: 100 samples x (2 slots x 4 floats and the label) = 3600 bytes
  // out, 100 x 2 x 4 floats of gradients = 3200 back.
  cm->AddBoundaryLoad(1, 0, 1, &load);
  EXPECT_DOUBLE_EQ(load.bytes[0 * 2 + 1], 3600);
  EXPECT_DOUBLE_EQ(load.bytes[1 * 2 + 0], 3200);
  // a -> b: 3600 / 1.25e8 + 20 ms; b -> a: 3200 / 2.5e8 + 20 ms.
  EXPECT_DOUBLE_EQ(cm->LinkSeconds(load), 3600 / 1.25e8 + 0.020);
  EXPECT_DOUBLE_EQ(cm->EgressUsdPerBatch(load), 3600 * 0.02e-9 + 3200 * 0.09e-9);
  // Stage emb..top in a, its servers in b: per batch 200 rows of 16 bytes with 8-byte keys out
  // and back (keys 1600 and gradients with keys 4800 out, rows 3200 back), and top's 9 weights
  // (36 bytes) each way; two messages each way for the rows and two for the weights.
  WanLoad servers = cm->NoWanLoad();
  cm->AddServerLoad(1, 3, 0, 1, &servers);
  EXPECT_DOUBLE_EQ(servers.bytes[0 * 2 + 1], 1600 + 4800 + 36);
  EXPECT_DOUBLE_EQ(servers.bytes[1 * 2 + 0], 3200 + 36);
  EXPECT_DOUBLE_EQ(servers.messages[0 * 2 + 1], 4);
  EXPECT_DOUBLE_EQ(servers.messages[1 * 2 + 0], 4);
  EXPECT_DOUBLE_EQ(cm->LinkSeconds(servers), 6436 / 1.25e8 + 4 * 0.020);
  // Together the plan's sparse and dense bytes, as DT_s counts them.
  EXPECT_DOUBLE_EQ(servers.bytes[1] + servers.bytes[2],
                   cm->Traffic(1, 3).bytes -
                       100 * (cm->layer(1).act_in_bytes + cm->layer(1).grad_in_bytes) -
                       100 * (cm->layer(3).act_out_bytes + cm->layer(3).grad_out_bytes));
  // A synchronous job's replicas hold their dense weights (the runtime's default): only the rows
  // cross to the servers, two messages each way.
  auto held = CostModel::Create(*model, *cluster, {1e3, 1e6});
  ASSERT_TRUE(held.ok()) << held.status();
  WanLoad rows = held->NoWanLoad();
  held->AddServerLoad(1, 3, 0, 1, &rows);
  EXPECT_DOUBLE_EQ(rows.bytes[0 * 2 + 1], 1600 + 4800);
  EXPECT_DOUBLE_EQ(rows.bytes[1 * 2 + 0], 3200);
  EXPECT_DOUBLE_EQ(rows.messages[0 * 2 + 1], 2);
  EXPECT_DOUBLE_EQ(rows.messages[1 * 2 + 0], 2);
  // The stage's own time still counts its weights' traffic (its network profile's bytes).
  EXPECT_DOUBLE_EQ(held->Traffic(1, 3).bytes, cm->Traffic(1, 3).bytes);
}

}  // namespace
}  // namespace heterps::cost
