// The cost model with a GPU tier's profile entry (Profile::tier; docs/cost_model.md, "The GPU
// tier"), against traffic worked out by hand.
#include <vector>

#include "gtest/gtest.h"
#include "heterps/cost/calibration.h"
#include "heterps/cost/cost_model.h"

namespace heterps::cost {
namespace {

// A GPU tier's entry (Profile::tier): under Workload::gpu_tier, a first stage on the type moves
// the measured share of its rows to and from the servers, and no dense weights where they were
// held; a stage that starts later, a type without an entry and a job without a tier keep every
// row and weight. Worked by hand: B = 100, 2 slots of rows of 4 floats: 100 * 2 * (2 * 16 + 2 *
// 8) = 9,600 bytes of rows, 8 * (10 + 1) = 88 of dense weights.
TEST(CostModelTest, ATiersEntryChargesItsRowsAndNoHeldWeights) {
  auto model = config::ParseModelSpec(R"(
name: emb
batch_size: 100
layers:
  - {name: in, kind: input, dense: 2, sparse: 2}
  - {name: emb, kind: embedding, rows: 1000, dim: 4}
  - {name: cat, kind: interaction, op: concat}
  - {name: fc, kind: fc, in: 10, out: 1}
  - {name: loss, kind: logloss}
)",
                                      "emb.yaml");
  auto cluster = config::ParseClusterSpec(R"(
name: two
types:
  - {name: gpu, kind: gpu, tflops: 10, mem_gbs: 1000, lookup_mrows: 1000, memory_gib: 8,
     network_gbps: 8, overhead_us: 10, latency_us: 5, price_per_hour: 2, units: 1, dp_loss: 0.1}
  - {name: gpu-spot, kind: gpu, tflops: 10, mem_gbs: 1000, lookup_mrows: 1000, memory_gib: 8,
     network_gbps: 8, overhead_us: 10, latency_us: 5, price_per_hour: 1, units: 1, dp_loss: 0.1}
  - {name: cpu, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 8,
     network_gbps: 8, overhead_us: 10, latency_us: 5, price_per_hour: 1, units: 4, dp_loss: 0.1}
)",
                                          "two.yaml");
  ASSERT_TRUE(model.ok() && cluster.ok()) << model.status() << cluster.status();
  Workload workload = ColocatedWorkload(1e3, 1e6);
  workload.gpu_tier = true;
  Profile profile{"emb", 100, "test", {}, {}, {{"gpu", 200, 50, true}}};
  auto tier = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const int last = tier->num_layers() - 1;
  const double w = tier->type(0).network, lat = tier->type(0).latency;
  ASSERT_EQ(tier->Traffic(0, last).bytes, 9600 + 88);
  // The tier's type, and the same hardware under another price: a quarter of the rows, no
  // weights, one pull and one push.
  for (int t : {0, 1}) {
    EXPECT_DOUBLE_EQ(tier->ServerRowShare(0, t), 0.25);
    EXPECT_TRUE(tier->HoldsDense(0, t));
    const StageTraffic traffic = tier->Traffic(0, last, t);
    EXPECT_DOUBLE_EQ(traffic.bytes, 2400);
    EXPECT_EQ(traffic.messages, 2);
    EXPECT_DOUBLE_EQ(tier->Stage(0, last, t).comm, 2400 / w + 2 * lat);
  }
  // Another kind of hardware, a later stage, the traffic of no type: every row and weight.
  EXPECT_EQ(tier->Traffic(0, last, 2).bytes, 9600 + 88);
  EXPECT_EQ(tier->Traffic(2, last, 0).bytes, tier->Traffic(2, last).bytes);
  EXPECT_EQ(tier->ServerRowShare(2, 0), 1);
  EXPECT_FALSE(tier->HoldsDense(2, 0));
  // Dense weights on the servers: the weights travel, the rows as measured.
  profile.tier[0].dense_held = false;
  auto servers = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_TRUE(servers.ok()) << servers.status();
  EXPECT_DOUBLE_EQ(servers->Traffic(0, last, 0).bytes, 2400 + 88);
  EXPECT_EQ(servers->Traffic(0, last, 0).messages, 4);
  // A job without a tier: the entry changes nothing.
  workload.gpu_tier = false;
  auto none = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->Traffic(0, last, 0).bytes, 9600 + 88);
  // A calibrated profile keeps the entry, so that its plans charge the same traffic.
  const Profile calibrated = Calibrate(*tier, {{0, last, 0, 1, 1e-2}}, "test host");
  ASSERT_EQ(calibrated.tier.size(), 1u);
  EXPECT_EQ(calibrated.tier[0].type, "gpu");
  workload.gpu_tier = true;
  auto again = CostModel::Create(*model, *cluster, workload, &calibrated);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ(again->Stage(0, last, 0).comm, tier->Stage(0, last, 0).comm);
  EXPECT_NEAR(again->StageSeconds(0, last, 0), 1e-2, 1e-12);
  // An entry for a type the cluster lacks, or a second one for a type: named.
  profile.tier = {{"nope", 200, 50, true}};
  auto bad = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tier[0].type: no type 'nope'"), std::string::npos);
  profile.tier = {{"gpu", 200, 50, true}, {"gpu", 200, 10, true}};
  bad = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tier[1]: a second tier entry for gpu"), std::string::npos);
}

}  // namespace
}  // namespace heterps::cost
