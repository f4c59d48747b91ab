#include "heterps/cost/cost_model.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "heterps/cost/calibration.h"
#include "heterps/cost/provisioner.h"
#include "heterps/cost/ps_sizing.h"

namespace heterps::cost {
namespace {

// A model small enough to work out by hand (the figures below are derived in the comments).
constexpr char kTinyModel[] = R"(
name: tiny
batch_size: 100
layers:
  - {name: in, kind: input, dense: 8}
  - {name: fc0, kind: fc, in: 8, out: 4, activation: relu}
  - {name: fc1, kind: fc, in: 4, out: 1}
  - {name: loss, kind: logloss}
)";

// F = 1e12 FLOP/s, M = 1e11 B/s, R = 1e8 rows/s, W = 1e9 B/s, o = 10 us, p = $2/h, beta = 0.1.
constexpr char kOneType[] = R"(
name: one
types:
  - {name: box, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, overhead_us: 10, price_per_hour: 2, units: 4, dp_loss: 0.1}
)";

// The stages' model alone (the parameter servers not priced): the figures below are the stages'.
CostModel Tiny(double throughput, double samples) {
  auto model = config::ParseModelSpec(kTinyModel, "tiny.yaml");
  auto cluster = config::ParseClusterSpec(kOneType, "one.yaml");
  EXPECT_TRUE(model.ok() && cluster.ok());
  Workload workload{throughput, samples};
  workload.price_parameter_servers = false;
  auto cm = CostModel::Create(*model, *cluster, workload);
  EXPECT_TRUE(cm.ok()) << cm.status();
  return *cm;
}

TEST(CostModelTest, LayerCharacteristics) {
  CostModel cm = Tiny(1e6, 1e9);
  // fc0: 8x4 weights + 4 biases; 2*8*4 GEMM + 2*4 bias and ReLU FLOPs.
  EXPECT_DOUBLE_EQ(cm.layer(1).dense_params, 36);
  EXPECT_DOUBLE_EQ(cm.layer(1).fwd_flops, 72);
  // 4 * (3*8 + 2*4) activation bytes + 3 * 4 * 36 / 100 weight bytes per sample.
  EXPECT_DOUBLE_EQ(cm.layer(1).mem_bytes, 132.32);
  // In: 8 floats and the label; out: 4 floats and the label; back: the floats' gradients.
  EXPECT_DOUBLE_EQ(cm.layer(1).act_in_bytes, 36);
  EXPECT_DOUBLE_EQ(cm.layer(1).act_out_bytes, 20);
  EXPECT_DOUBLE_EQ(cm.layer(1).grad_in_bytes, 32);
  EXPECT_DOUBLE_EQ(cm.layer(1).grad_out_bytes, 16);
}

// A cut between the input and a multi-hot embedding ships every id of every slot, not one per
// slot: 26 slots of 50 ids are 26 * 50 * 8 bytes per sample, and each slot's offset (4 bytes).
// The label travels too, up to the loss; the gradients coming back are the floats'.
TEST(CostModelTest, MultiHotIdsCrossACutBeforeTheirEmbedding) {
  auto model = config::ParseModelSpec(R"(name: multi
batch_size: 100
layers:
  - {name: input, kind: input, dense: 13, sparse: 26}
  - {name: emb, kind: embedding, rows: 1000, dim: 16, ids_per_slot: 50, pooling: sum}
  - {name: cat, kind: interaction, op: concat}
  - {name: top, kind: fc, in: 429, out: 1}
  - {name: loss, kind: logloss}
)",
                                      "multi.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  auto cluster = config::ParseClusterSpec(kOneType, "one.yaml");
  auto cm = CostModel::Create(*model, *cluster, {1e3, 1e6});
  ASSERT_TRUE(cm.ok()) << cm.status();
  EXPECT_DOUBLE_EQ(cm->layer(0).act_out_bytes, 4 * 13 + 8 * 26 * 50 + 4 * 26 + 4);
  EXPECT_DOUBLE_EQ(cm->layer(0).grad_out_bytes, 4 * 13);
  EXPECT_DOUBLE_EQ(cm->layer(1).act_out_bytes, 4 * (13 + 26 * 16) + 4);
  EXPECT_DOUBLE_EQ(cm->layer(1).grad_out_bytes, 4 * (13 + 26 * 16));
}

TEST(CostModelTest, GoldenStageTime) {
  CostModel cm = Tiny(1e6, 1e9);
  // OCT(fc0) = 10us * 6 ops + 100 * (3*72/1e12 + 132.32/1e11) = 6.015392e-5 s.
  EXPECT_NEAR(cm.LayerSeconds(1, 0), 6.015392e-5, 1e-15);
  // OCT(fc1) = 10us * 4 + 100 * (3*10/1e12 + 56.6/1e11) = 4.00596e-5 s.
  EXPECT_NEAR(cm.LayerSeconds(2, 0), 4.00596e-5, 1e-15);
  // Stage fc0..fc1: 100*(36+32) bytes in and back, 100*(8+4) out and back (activations with the
  // label, gradients without), 8*(36+5) of weights = 8328 B at 1e9 B/s.
  StageTime t = cm.Stage(1, 2, 0);
  EXPECT_NEAR(t.comm, 8.328e-6, 1e-18);
  EXPECT_NEAR(t.total(), 1.0854152e-4, 1e-15);
  // ET(2) = X * (1 + 0.1) / 2.
  EXPECT_NEAR(CostModel::ExecSeconds(t.total(), 0.1, 2), 5.9697836e-5, 1e-15);
}

TEST(CostModelTest, EveryMessageCostsTheLatency) {
  auto model = config::ParseModelSpec(kTinyModel, "tiny.yaml");
  std::string cluster_yaml = kOneType;
  cluster_yaml.replace(cluster_yaml.find("overhead_us: 10"), 15, "overhead_us: 10, latency_us: 5");
  auto cluster = config::ParseClusterSpec(cluster_yaml, "one.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  CostModel cm = *CostModel::Create(*model, *cluster, {1e6, 1e9});
  // fc0..fc1: activations in and out (2 messages each) and the weights (2): 6 x 5 us.
  EXPECT_NEAR(cm.Stage(1, 2, 0).comm, 8.328e-6 + 6 * 5e-6, 1e-18);
  // The whole model: only the weights travel.
  EXPECT_NEAR(cm.Stage(0, 3, 0).comm, 3.28e-7 + 2 * 5e-6, 1e-18);
}

TEST(CostModelTest, GoldenThroughputAndCost) {
  // Everything on `box`: X = 1.00664e-5 + 6.015392e-5 + 4.00596e-5 + 2.0019e-5 (compute)
  // + 3.28e-7 (weights) = 1.3062692e-4 s. The limit 1.5e6 samples/s allows E <= 6.6667e-5 s:
  // k = 2 gives 7.18448e-5 (too slow); k = 3 gives 5.224...e-5 at $6/h; k = 4 gives 4.2454e-5 at
  // $8/h, which costs more (4.2454 * 8 > 5.2251 * 6).
  CostModel cm = Tiny(1.5e6, 1e9);
  Provisioning p = Provision(cm, std::vector<StageSpec>{{0, 3, 0}});
  ASSERT_TRUE(p.feasible) << p.why.message;
  ASSERT_EQ(p.units, std::vector<int64_t>{3});
  const double e = 1.3062692e-4 * 1.2 / 3;
  EXPECT_NEAR(p.bottleneck_seconds, e, 1e-15);
  EXPECT_NEAR(p.throughput, 100 / e, 1e-6);                 // 1,913,776 samples/s
  EXPECT_NEAR(p.job_seconds, 1e9 * e / 100, 1e-6);          // 522.5 s
  EXPECT_NEAR(p.cost_usd, 1e9 * e / 100 / 3600 * 6, 1e-9);  // $0.8709
  EXPECT_DOUBLE_EQ(p.usd_per_hour, 6);
}

// The parameter servers, worked by hand. Tables: 2 slots x 1e6 rows x (8 key bytes + 4 x 8 value
// floats x 2 with Adagrad's state) = 144e6 bytes. Per batch of 100: 2 lookups a sample; rows
// pulled and pushed with their keys, 100 x 2 x (2 x 32 + 2 x 8) = 16,000 bytes; the fc's 19 dense
// parameters pulled and pushed, 152 bytes.
constexpr char kPsModel[] = R"(
name: ps
batch_size: 100
layers:
  - {name: in, kind: input, dense: 2, sparse: 2}
  - {name: emb, kind: embedding, rows: 1000000, dim: 8}
  - {name: cat, kind: interaction, op: concat}
  - {name: fc, kind: fc, in: 18, out: 1}
  - {name: loss, kind: logloss}
)";

// ssd: 0.1 GiB of memory (0.8 of it for rows), an SSD of 1e5 reads/s, $2/h. mem: 1 GiB, no SSD,
// $3/h. gpu: runs stages, never the servers. R = 1e8 rows/s, W = 1e9 B/s, 5 us per message.
constexpr char kPsTypes[] = R"(
name: ps
types:
  - {name: ssd, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 0.1,
     network_gbps: 8, overhead_us: 10, latency_us: 5, price_per_hour: 2, units: 8, dp_loss: 0.1,
     ssd_gib: 1, ssd_kiops: 100}
  - {name: mem, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, overhead_us: 10, latency_us: 5, price_per_hour: 3, units: 8, dp_loss: 0.1}
  - {name: gpu, kind: gpu, tflops: 10, mem_gbs: 1000, lookup_mrows: 1000, memory_gib: 16,
     network_gbps: 80, overhead_us: 10, price_per_hour: 1, units: 8, dp_loss: 0.1}
)";

CostModel PsModel(double throughput) {
  auto model = config::ParseModelSpec(kPsModel, "ps.yaml");
  auto cluster = config::ParseClusterSpec(kPsTypes, "ps-types.yaml");
  EXPECT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  auto cm = CostModel::Create(*model, *cluster, {throughput, 1e9});
  EXPECT_TRUE(cm.ok()) << cm.status();
  return *cm;
}

// No more shards than the runtime runs (kMaxPsShards), however many units a type has: a limit
// that needs more is out of the servers' reach, and the frontier stops at the limit.
TEST(CostModelTest, ShardsStopAtTheRuntimesLimit) {
  std::string types = kPsTypes;
  const std::string from = "price_per_hour: 3, units: 8";
  types.replace(types.find(from), from.size(), "price_per_hour: 3, units: 200");
  auto model = config::ParseModelSpec(kPsModel, "ps.yaml");
  auto cluster = config::ParseClusterSpec(types, "ps-types.yaml");
  ASSERT_TRUE(model.ok() && cluster.ok());
  auto cm = CostModel::Create(*model, *cluster, {1e6, 1e9});
  ASSERT_TRUE(cm.ok()) << cm.status();
  // ET_ps falls with every shard, so each bottleneck below needs exactly that many.
  ASSERT_LT(cm->Ps(1, 100).seconds_per_batch, cm->Ps(1, 64).seconds_per_batch);
  EXPECT_EQ(cm->MinPsShards(1, cm->Ps(1, 64).seconds_per_batch, 200), kMaxPsShards);
  EXPECT_EQ(cm->MinPsShards(1, cm->Ps(1, 100).seconds_per_batch, 200), 0);
  const PsServers fastest = cm->CheapestPs(cm->Ps(1, 64).seconds_per_batch, {});
  EXPECT_LE(fastest.shards, kMaxPsShards);
  EXPECT_FALSE(std::isfinite(cm->CheapestPsRate(cm->Ps(1, 100).seconds_per_batch)));
}

TEST(CostModelTest, GoldenParameterServers) {
  const CostModel cm = PsModel(1e6);
  ASSERT_TRUE(cm.prices_ps());
  EXPECT_DOUBLE_EQ(cm.table_bytes(), 144e6);
  EXPECT_TRUE(cm.HostsPs(0) && cm.HostsPs(1));
  EXPECT_FALSE(cm.HostsPs(2));
  // One shard on ssd: 0.8 x 0.1 GiB = 85,899,345.92 bytes of rows in memory, the rest on the SSD.
  // The hottest 0.5965 of each table's rows: under Zipf(1), (1 + ln 596,523.2) / (1 + ln 1e6) of
  // the lookups, 0.96513.
  const PsServers one = cm.Ps(0, 1);
  EXPECT_NEAR(one.memory_bytes, 85899345.92, 1e-4);
  EXPECT_NEAR(one.ssd_bytes, 144e6 - 85899345.92, 1e-4);
  const double hit = (1 + std::log(85899345.92 / 144e6 * 1e6)) / (1 + std::log(1e6));
  EXPECT_NEAR(one.hit_rate, hit, 1e-12);
  EXPECT_NEAR(hit, 0.9651286, 1e-7);
  // ET_ps = 2 x 5 us + 100 x 2 lookups x 2 (pull, push) / 1e8 + 100 x 2 x (1 - hit) cold reads
  // / 1e5 + (16,000 + 152) bytes / 1e9 = 9.98947e-5 s (the bytes spread over the shards).
  EXPECT_NEAR(one.seconds_per_batch, 1e-5 + 4e-6 + 200 * (1 - hit) / 1e5 + 16152e-9, 1e-15);
  EXPECT_NEAR(one.seconds_per_batch, 9.98947e-5, 1e-10);
  EXPECT_DOUBLE_EQ(one.usd_per_hour, 2);
  // Two shards hold 72e6 bytes each, all in memory: 1e-5 + 2e-6 + (16,000 + 152) / 2 / 1e9.
  const PsServers two = cm.Ps(0, 2);
  EXPECT_DOUBLE_EQ(two.ssd_bytes, 0);
  EXPECT_DOUBLE_EQ(two.hit_rate, 1);
  EXPECT_NEAR(two.seconds_per_batch, 2.0076e-5, 1e-15);
  // mem has no SSD: one shard holds everything (144e6 <= 0.8 GiB).
  EXPECT_NEAR(cm.Ps(1, 1).seconds_per_batch, 1e-5 + 4e-6 + 16152e-9, 1e-15);
  // The fewest shards for a bottleneck: ET(8) = 1e-5 + 5e-7 + 2,019e-9 > 1e-5.
  EXPECT_EQ(cm.MinPsShards(0, 1e-4, 8), 1);
  EXPECT_EQ(cm.MinPsShards(0, 5e-5, 8), 2);
  EXPECT_EQ(cm.MinPsShards(0, 1e-5, 8), 0);
  EXPECT_EQ(cm.MinPsShards(0, 5e-5, 1), 0);  // one unit left: too slow
  // The memory/SSD trade-off: at 1e-4 s per batch one ssd shard ($2/h) beats one mem shard
  // ($3/h); at 5e-5 s ssd needs two ($4/h) and the all-in-memory mem shard wins.
  EXPECT_EQ(cm.CheapestPs(1e-4, {}).type, 0);
  EXPECT_DOUBLE_EQ(cm.CheapestPsRate(1e-4), 2);
  EXPECT_EQ(cm.CheapestPs(5e-5, {}).type, 1);
  EXPECT_DOUBLE_EQ(cm.CheapestPsRate(5e-5), 3);
  // With mem's units all taken by stages, ssd it is.
  const PsServers left = cm.CheapestPs(5e-5, std::vector<int64_t>{0, 8, 0});
  EXPECT_EQ(left.type, 0);
  EXPECT_EQ(left.shards, 2);
  EXPECT_DOUBLE_EQ(cm.CheapestPsRate(5e-6), kInfinity);

  // A plan: every layer on gpu, the servers beside it (the cheapest at the plan's bottleneck).
  // The job pays for both, and the servers' ET counts in the bottleneck.
  const Provisioning p = Provision(cm, std::vector<StageSpec>{{0, 4, 2}});
  ASSERT_TRUE(p.feasible) << p.why.message;
  const PsServers cheapest = cm.CheapestPs(p.bottleneck_seconds, {});
  EXPECT_EQ(p.ps.type, cheapest.type);
  EXPECT_EQ(p.ps.shards, cheapest.shards);
  EXPECT_NEAR(p.usd_per_hour, p.units[0] * 1.0 + p.ps.usd_per_hour, 1e-12);
  EXPECT_GE(p.bottleneck_seconds, p.ps.seconds_per_batch);
  EXPECT_NEAR(p.cost_usd, 1e9 / 100 * p.bottleneck_seconds / 3600 * p.usd_per_hour, 1e-12);
  // Not priced: the stages alone.
  Workload stages_only{1e6, 1e9};
  stages_only.price_parameter_servers = false;
  auto bare = CostModel::Create(cm.model(), cm.cluster(), stages_only);
  ASSERT_TRUE(bare.ok());
  EXPECT_FALSE(bare->prices_ps());
  const Provisioning q = Provision(*bare, std::vector<StageSpec>{{0, 4, 2}});
  EXPECT_EQ(q.ps.type, -1);
  EXPECT_LT(q.cost_usd, p.cost_usd);
}

TEST(CostModelTest, InfeasibleThroughputNamesTheStage) {
  CostModel cm = Tiny(1e8, 1e9);  // 4 units reach at most 100 / 4.2454e-5 = 2.36e6 samples/s
  Provisioning p = Provision(cm, std::vector<StageSpec>{{0, 3, 0}});
  EXPECT_FALSE(p.feasible);
  EXPECT_EQ(p.why.constraint, "throughput");
  EXPECT_NEAR(p.why.shortfall, 1e8 / (100 / (1.3062692e-4 * 1.3 / 4)) - 1, 1e-6);
  EXPECT_NE(p.why.message.find("in..loss on box"), std::string::npos) << p.why.message;
}

TEST(CostModelTest, MinUnitsIsExact) {
  CostModel cm = Tiny(1e6, 1e9);
  const double x = 1e-3;
  for (int64_t k = 1; k <= 4; ++k) {
    double e = CostModel::ExecSeconds(x, 0.1, k);
    EXPECT_EQ(cm.MinUnits(x, 0, e), k);
    EXPECT_EQ(cm.MinUnits(x, 0, std::nextafter(e, 0.0)), k == 4 ? 0 : k + 1);
  }
  EXPECT_EQ(cm.MinUnits(kInfinity, 0, 1.0), 0);
}

TEST(CostModelTest, RejectsBadWorkload) {
  auto model = config::ParseModelSpec(kTinyModel, "tiny.yaml");
  auto cluster = config::ParseClusterSpec(kOneType, "one.yaml");
  EXPECT_FALSE(CostModel::Create(*model, *cluster, {0, 1e9}).ok());
  EXPECT_FALSE(CostModel::Create(*model, *cluster, {1e6, -1}).ok());
}

TEST(CostModelTest, DlrmSmallShapes) {
  auto model = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  auto cluster = config::ParseClusterSpec(kOneType, "one.yaml");
  CostModel cm = *CostModel::Create(*model, *cluster, {1e6, 1e9});
  int interact = model->FindLayer("interact"), top0 = model->FindLayer("top.0");
  ASSERT_GE(interact, 0);
  EXPECT_EQ(model->layers[interact].dense_width_out, 367);
  // 27 vectors of 16: 351 dots of 32 FLOPs.
  EXPECT_DOUBLE_EQ(cm.layer(interact).fwd_flops, 351 * 32);
  EXPECT_DOUBLE_EQ(cm.layer(top0).dense_params, 367 * 256 + 256);
  int emb = model->FindLayer("emb");
  EXPECT_DOUBLE_EQ(cm.layer(emb).rows, 26);
  EXPECT_DOUBLE_EQ(cm.layer(emb).sparse_params, 26.0 * 100000 * 16);
}

TEST(CostModelTest, ProfileOverridesAndCalibrates) {
  auto model = config::ParseModelSpec(kTinyModel, "tiny.yaml");
  auto cluster = config::ParseClusterSpec(kOneType, "one.yaml");
  CostModel plain = *CostModel::Create(*model, *cluster, {1e6, 1e9});
  Profile profile{"tiny", 100, "test", {{"fc0", "box", 2 * plain.LayerSeconds(1, 0)}}, {}, {}};
  CostModel profiled = *CostModel::Create(*model, *cluster, {1e6, 1e9}, &profile);
  EXPECT_TRUE(profiled.IsProfiled(1, 0));
  EXPECT_NEAR(profiled.LayerSeconds(1, 0), 2 * plain.LayerSeconds(1, 0), 1e-15);
  // The one measured ratio (2x) calibrates the other layers of the type.
  EXPECT_NEAR(profiled.LayerSeconds(2, 0), 2 * plain.LayerSeconds(2, 0), 1e-15);

  Profile wrong_layer{"tiny", 100, "", {{"nope", "box", 1e-3}}, {}, {}};
  auto bad = CostModel::Create(*model, *cluster, {1e6, 1e9}, &wrong_layer);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("entries[0].layer: no layer 'nope'"), std::string::npos);
  Profile wrong_batch{"tiny", 64, "", {}, {}, {}};
  EXPECT_FALSE(CostModel::Create(*model, *cluster, {1e6, 1e9}, &wrong_batch).ok());
  Profile wrong_type{"tiny", 100, "", {}, {{"nope", 1e8, 1e-4}}, {}};
  bad = CostModel::Create(*model, *cluster, {1e6, 1e9}, &wrong_type);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("network[0].type: no type 'nope'"), std::string::npos);
}

// Two markets of one machine (spot beside on-demand) are predicted alike: the measured type's
// measurements and network figures are the other's; a type of other hardware keeps its own model.
TEST(CostModelTest, ATypeOfTheSameHardwareTakesTheMeasuredOnesFigures) {
  auto model = config::ParseModelSpec(kTinyModel, "tiny.yaml");
  auto cluster = config::ParseClusterSpec(R"(
name: markets
types:
  - {name: box, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, overhead_us: 10, price_per_hour: 2, units: 4, dp_loss: 0.1}
  - {name: box-spot, kind: cpu, tflops: 1, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, overhead_us: 10, price_per_hour: 0.7, units: 9, dp_loss: 0.1}
  - {name: bigger, kind: cpu, tflops: 2, mem_gbs: 100, lookup_mrows: 100, memory_gib: 1,
     network_gbps: 8, overhead_us: 10, price_per_hour: 2, units: 4, dp_loss: 0.1}
)",
                                          "markets.yaml");
  ASSERT_TRUE(model.ok() && cluster.ok()) << cluster.status();
  CostModel plain = *CostModel::Create(*model, *cluster, {1e6, 1e9});
  Profile profile{
      "tiny", 100, "test", {{"fc0", "box", 3 * plain.LayerSeconds(1, 0)}}, {{"box", 2.5e8, 3e-4}},
      {}};
  CostModel measured = *CostModel::Create(*model, *cluster, {1e6, 1e9}, &profile);
  for (int l = 0; l < measured.num_layers(); ++l) {
    EXPECT_EQ(measured.LayerSeconds(l, 1), measured.LayerSeconds(l, 0)) << l;
    EXPECT_EQ(measured.IsProfiled(l, 1), measured.IsProfiled(l, 0)) << l;
    EXPECT_EQ(measured.LayerSeconds(l, 2), plain.LayerSeconds(l, 2)) << l;
  }
  EXPECT_NEAR(measured.LayerSeconds(2, 1), 3 * plain.LayerSeconds(2, 1), 1e-15);  // calibrated
  EXPECT_DOUBLE_EQ(measured.type(1).network, 2.5e8);
  EXPECT_DOUBLE_EQ(measured.type(1).latency, 3e-4);
  EXPECT_DOUBLE_EQ(measured.type(2).network, plain.type(2).network);
  EXPECT_EQ(measured.Stage(0, 3, 1).comm, measured.Stage(0, 3, 0).comm);
  EXPECT_EQ(measured.network().size(), 1u);  // what the profile says, not what was lent
  // A type measured itself keeps its own measurements.
  profile.entries.push_back({"fc0", "box-spot", 5 * plain.LayerSeconds(1, 1)});
  CostModel both = *CostModel::Create(*model, *cluster, {1e6, 1e9}, &profile);
  EXPECT_NEAR(both.LayerSeconds(1, 1), 5 * plain.LayerSeconds(1, 1), 1e-15);
  EXPECT_NEAR(both.LayerSeconds(1, 0), 3 * plain.LayerSeconds(1, 0), 1e-15);
}

// A network entry replaces the type's network figures: DT = bytes / W + messages lat, with the
// measured W and lat, for the stages and for the parameter servers alike.
TEST(CostModelTest, NetworkEntryReplacesTheNetworkFigures) {
  CostModel plain = Tiny(1e6, 1e9);
  Profile profile{"tiny", 100, "test", {}, {{"box", 2.5e8, 3e-4}}, {}};
  auto measured = CostModel::Create(plain.model(), plain.cluster(), {1e6, 1e9}, &profile);
  ASSERT_TRUE(measured.ok()) << measured.status();
  EXPECT_EQ(measured->network().size(), 1u);
  EXPECT_DOUBLE_EQ(measured->type(0).network, 2.5e8);
  EXPECT_DOUBLE_EQ(measured->type(0).latency, 3e-4);
  for (const auto& [first, last] : std::vector<std::pair<int, int>>{{0, 3}, {0, 1}, {2, 3}}) {
    const StageTraffic traffic = measured->Traffic(first, last);
    EXPECT_GT(traffic.bytes, 0);
    EXPECT_DOUBLE_EQ(measured->Stage(first, last, 0).comm,
                     traffic.bytes / 2.5e8 + traffic.messages * 3e-4);
    // The same traffic at the cluster's own figures.
    EXPECT_DOUBLE_EQ(
        plain.Stage(first, last, 0).comm,
        traffic.bytes / plain.type(0).network + traffic.messages * plain.type(0).latency);
    // Compute is untouched.
    EXPECT_DOUBLE_EQ(measured->Stage(first, last, 0).compute, plain.Stage(first, last, 0).compute);
  }
  // A calibrated profile keeps the network figures, so that its plans compute the same DT.
  const Profile calibrated = Calibrate(*measured, {{0, 3, 0, 1, 1e-2}}, "test host");
  ASSERT_EQ(calibrated.network.size(), 1u);
  EXPECT_EQ(calibrated.network[0].type, "box");
  auto again = CostModel::Create(plain.model(), plain.cluster(), {1e6, 1e9}, &calibrated);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_DOUBLE_EQ(again->Stage(0, 3, 0).comm, measured->Stage(0, 3, 0).comm);
  EXPECT_NEAR(again->StageSeconds(0, 3, 0), 1e-2, 1e-12);
}

// A profile calibrated from measured stage times makes the model predict those times.
TEST(CostModelTest, CalibrationPredictsWhatWasMeasured) {
  CostModel plain = Tiny(1e6, 1e9);
  const std::vector<MeasuredStage> measured = {{0, 1, 0, 3, 2e-3}, {2, 3, 0, 1, 5e-4}};
  const Profile profile = Calibrate(plain, measured, "test host");
  EXPECT_EQ(profile.model, "tiny");
  EXPECT_EQ(profile.batch_size, 100);
  auto calibrated = CostModel::Create(plain.model(), plain.cluster(), {1e6, 1e9}, &profile);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  for (const MeasuredStage& m : measured) {
    const double x = calibrated->StageSeconds(m.first, m.last, 0);
    EXPECT_NEAR(CostModel::ExecSeconds(x, 0.1, m.units), m.seconds_per_batch, 1e-12);
    // The communication part stays the model's.
    EXPECT_DOUBLE_EQ(calibrated->Stage(m.first, m.last, 0).comm,
                     plain.Stage(m.first, m.last, 0).comm);
  }
}

// A stage measured faster than the model's communication alone (a GPU tier serving the rows that
// the model sends over the wire): the layers keep their time, the type's network takes the rest.
TEST(CostModelTest, CalibrationLowersANetworkTheRunDidNotPay) {
  config::ClusterSpec slow = Tiny(1e6, 1e9).cluster();
  slow.types[0].network = 1e3;  // bytes/s: the model's network far dearer than the layers
  auto made = CostModel::Create(Tiny(1e6, 1e9).model(), slow, {1e6, 1e9});
  ASSERT_TRUE(made.ok()) << made.status();
  const CostModel& plain = *made;
  const StageTime before = plain.Stage(0, 3, 0);
  ASSERT_GT(before.comm, 0);
  ASSERT_LT(before.compute, 0.25 * before.comm);  // the X / 2 cap does not bind
  const std::vector<MeasuredStage> measured = {{0, 3, 0, 1, 0.5 * before.comm}};
  const Profile profile = Calibrate(plain, measured, "test host");
  ASSERT_EQ(profile.network.size(), 1u);
  EXPECT_EQ(profile.network[0].type, plain.type(0).name);
  auto calibrated = CostModel::Create(plain.model(), plain.cluster(), {1e6, 1e9}, &profile);
  ASSERT_TRUE(calibrated.ok()) << calibrated.status();
  const StageTime after = calibrated->Stage(0, 3, 0);
  EXPECT_NEAR(after.total(), 0.5 * before.comm, 1e-12);
  EXPECT_NEAR(after.compute, std::max(before.compute, 0.05 * before.comm), 1e-12);
  EXPECT_LT(after.comm, before.comm);
}

}  // namespace
}  // namespace heterps::cost

namespace heterps::cost {
namespace {

// Shards for the tables' memory: the optimizer's state is counted as the optimizer keeps it.
TEST(PsSizingTest, CountsTheOptimizersState) {
  auto model = config::LoadModelSpec("examples/models/dlrm-large.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  double rows = 0, floats = 0;
  for (const config::LayerSpec& layer : model->layers) {
    if (layer.kind != config::LayerKind::kEmbedding) continue;
    rows += static_cast<double>(layer.rows) * layer.slots;
    floats += static_cast<double>(layer.rows) * layer.slots * layer.dim;
  }
  ASSERT_GT(rows, 0);
  config::ResourceType type;
  // A unit that holds exactly the SGD tables (key and value) in half its memory.
  type.memory = 2 * (8 * rows + 4 * floats);
  EXPECT_EQ(SizeParameterServers(*model, &type, {0, 0}), 1);  // sgd
  EXPECT_EQ(SizeParameterServers(*model, &type, {1, 0}), 2);  // adagrad: one state float
  EXPECT_EQ(SizeParameterServers(*model, &type, {2, 0}), 3);  // adam: two
  // Lookups: every row pulled and pushed once per sample, half the unit's row rate per shard.
  config::ResourceType fast = type;
  fast.memory = 1e15;
  double per_sample = 0;
  for (const config::LayerSpec& layer : model->layers) {
    if (layer.kind == config::LayerKind::kEmbedding) per_sample += layer.slots * layer.ids_per_slot;
  }
  fast.lookup_rate = 2 * per_sample * 1000 / 0.5 / 4;  // four shards' worth at 1000 samples/s
  EXPECT_EQ(SizeParameterServers(*model, &fast, {1, 1000}), 4);
  EXPECT_EQ(SizeParameterServers(*model, nullptr, {1, 1000}), 1);
}

}  // namespace
}  // namespace heterps::cost
