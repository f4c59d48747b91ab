// The cost model with a GPU tier's profile entry (Profile::tier; docs/cost_model.md, "The GPU
// tier"), against traffic worked out by hand.
#include <vector>

#include "gtest/gtest.h"
#include "heterps/cost/calibration.h"
#include "heterps/cost/cost_model.h"

namespace heterps::cost {
namespace {

// A GPU tier's entry (Profile::tier): under Workload::gpu_tier, a first stage on the type moves
// the rows it loaded (with their optimizer state, and written back) and passed through, and no
// dense weights where the job and the profile held them and the stage is the whole model; a stage
// that starts later, a type without an entry and a job without a tier keep every row and weight.
// Worked by hand: B = 100, 2 slots of rows of 4 floats: 100 * 2 * (2 * 16 + 2 * 8) = 9,600 bytes
// of rows, 8 * (10 + 1) = 88 of dense weights.
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
  workload.tier_holds_dense = true;
  // Of 200 lookups a batch, 40 loaded and 10 passed through.
  Profile profile{"emb", 100, "test", {}, {}, {{"gpu", 200, 40, 10, true, 0}}};
  auto tier = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_TRUE(tier.ok()) << tier.status();
  const int last = tier->num_layers() - 1;
  const double w = tier->type(0).network, lat = tier->type(0).latency;
  ASSERT_EQ(tier->Traffic(0, last).bytes, 9600 + 88);
  // Keys 1,600 bytes and values 3,200 a batch. A load: its key out, the row and its Adagrad state
  // back (2 x 3,200 x 0.2), its write-back the same out: 0.2 x (2 x 1,600 + 4 x 3,200) = 3,200;
  // a pass: 0.05 x (2 x 1,600 + 2 x 3,200) = 480. The tier's type, and the same hardware under
  // another price: those rows, no weights, one pull and one push.
  for (int t : {0, 1}) {
    EXPECT_TRUE(tier->TierFeeds(0, t));
    EXPECT_TRUE(tier->HoldsDense(0, last, t));
    const StageTraffic traffic = tier->Traffic(0, last, t);
    EXPECT_DOUBLE_EQ(traffic.bytes, 3200 + 480);
    EXPECT_EQ(traffic.messages, 2);
    EXPECT_DOUBLE_EQ(tier->Stage(0, last, t).comm, 3680 / w + 2 * lat);
  }
  // Another kind of hardware, a later stage, the traffic of no type: every row and weight.
  EXPECT_EQ(tier->Traffic(0, last, 2).bytes, 9600 + 88);
  EXPECT_EQ(tier->Traffic(2, last, 0).bytes, tier->Traffic(2, last).bytes);
  EXPECT_FALSE(tier->TierFeeds(2, 0));
  // A first stage that is not the whole model: the tier's rows, and the weights (the job holds
  // them only where one stage is the whole model).
  EXPECT_FALSE(tier->HoldsDense(0, last - 1, 0));
  EXPECT_DOUBLE_EQ(tier->Traffic(0, last - 1, 0).bytes,
                   tier->Traffic(0, last - 1).bytes - 9600 + 3680);
  EXPECT_EQ(tier->Traffic(0, last - 1, 0).messages, tier->Traffic(0, last - 1).messages);
  // Dense weights on the servers (in the profile, or by the job's rule): the weights travel, the
  // rows as measured.
  for (bool entry_held : {false, true}) {
    profile.tier[0].dense_held = entry_held;
    workload.tier_holds_dense = !entry_held;
    auto servers = CostModel::Create(*model, *cluster, workload, &profile);
    ASSERT_TRUE(servers.ok()) << servers.status();
    EXPECT_DOUBLE_EQ(servers->Traffic(0, last, 0).bytes, 3680 + 88);
    EXPECT_EQ(servers->Traffic(0, last, 0).messages, 4);
  }
  // Adam's two state floats a value float: a loaded row is three times its value each way.
  workload.tier_holds_dense = true;
  workload.ps_state_floats = 2;
  auto adam = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_TRUE(adam.ok()) << adam.status();
  EXPECT_DOUBLE_EQ(adam->Traffic(0, last, 0).bytes, 0.2 * (2 * 1600 + 6 * 3200) + 480);
  workload.ps_state_floats = 1;
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
  profile.tier = {{"nope", 200, 40, 10, true, 0}};
  auto bad = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tier[0].type: no type 'nope'"), std::string::npos);
  profile.tier = {{"gpu", 200, 40, 10, true, 0}, {"gpu", 200, 10, 0, true, 0}};
  bad = CostModel::Create(*model, *cluster, workload, &profile);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tier[1]: a second tier entry for gpu"), std::string::npos);
}

}  // namespace
}  // namespace heterps::cost
