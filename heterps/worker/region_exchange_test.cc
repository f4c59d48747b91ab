// Regions in lockstep (region_exchange.h) against one job holding every region's blocks: three
// regions of 2, 3 and 1 servers, each training its range of every step's blocks on its own
// servers and taking the others' parts before its commit, end with the one job's parameters, bit
// for bit (the servers' digests), for SGD, Adagrad and Adam, peer to peer and through a hub; the
// traffic each link carried is what the topology sends.
#include "heterps/worker/region_exchange.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {
namespace {

constexpr int64_t kBlock = 8, kBlocks = 4, kSteps = 4;

config::ModelSpec Spec() {
  auto spec = config::ParseModelSpec(R"(
name: regions
batch_size: 32
layers:
  - {name: input, kind: input, dense: 2, sparse: 3}
  - {name: emb, kind: embedding, rows: 1000, dim: 4}
  - {name: cat, kind: interaction, op: concat}
  - {name: hidden, kind: fc, in: 14, out: 4}
  - {name: top, kind: fc, in: 4, out: 1}
  - {name: loss, kind: logloss}
data:
  columns:
    - {role: label}
    - {role: dense}
    - {role: dense}
    - {name: a, role: sparse}
    - {name: b, role: sparse}
    - {name: c, role: sparse}
)",
                                     "regions.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Samples [first, first + n) of step `step`'s batch (the same whoever reads them).
Activations Samples(int step, int64_t first, int64_t n) {
  Activations in;
  in.size = n;
  in.dense.resize(n, 2);
  for (int64_t r = 0; r < n; ++r) {
    std::mt19937_64 rng(step * 1000 + first + r);
    std::uniform_real_distribution<float> unit(0, 1);
    in.labels.push_back(unit(rng) < 0.3f ? 1.0f : 0.0f);
    in.dense(r, 0) = unit(rng);
    in.dense(r, 1) = unit(rng);
    for (int s = 0; s < 3; ++s) in.keys.push_back(100 * s + rng() % 40);
  }
  return in;
}

// One group of servers and the stage that trains its blocks [first, end) of every step.
struct Region {
  std::unique_ptr<ps::InProcessPsClient> servers;
  std::unique_ptr<Stage> stage;
  int64_t first = 0, end = 0;
};

Region MakeRegion(const config::ModelSpec& spec, const ModelOptions& options, int servers,
                  int64_t first, int64_t end) {
  Region r;
  r.servers = std::make_unique<ps::InProcessPsClient>(servers);
  EXPECT_TRUE(CreateModelTables(spec, r.servers.get(), options).ok());
  auto stage = Stage::Create(spec, 0, static_cast<int>(spec.layers.size()) - 1, r.servers.get());
  EXPECT_TRUE(stage.ok()) << stage.status();
  r.stage = std::move(*stage);
  r.stage->set_block_rows(kBlock);
  r.first = first;
  r.end = end;
  return r;
}

// Region r's part of step `step`: its blocks forward and backward, their parts on its servers.
void Accumulate(Region& r, int step) {
  ASSERT_TRUE(r.stage->PullParameters().ok());
  ParameterGrads grads = r.stage->NewGrads();
  const Activations in = Samples(step, r.first * kBlock, (r.end - r.first) * kBlock);
  ASSERT_TRUE(r.stage->ForwardBackward(0, in, 1.0f / (kBlock * kBlocks), nullptr, &grads).ok());
  StepGrads sums = r.stage->NewStepGrads();
  sums.Add(r.first, grads);
  ASSERT_TRUE(r.stage->Accumulate(sums).ok());
}

uint64_t Digest(ps::InProcessPsClient& servers) {
  uint64_t digest = 0;
  for (int s = 0; s < servers.num_servers(); ++s) {
    auto d = ps::DigestTables(servers.Tables(s));
    EXPECT_TRUE(d.ok());
    digest += d.ok() ? *d : 0;
  }
  return digest;
}

struct Case {
  ps::OptimizerKind optimizer;
  cost::SyncTopology topology;
};

class RegionExchangeTest : public ::testing::TestWithParam<Case> {};

TEST_P(RegionExchangeTest, RegionsInLockstepEndAsOneJob) {
  const config::ModelSpec spec = Spec();
  ModelOptions options;
  options.sparse_optimizer.kind = options.dense_optimizer.kind = GetParam().optimizer;
  Region one = MakeRegion(spec, options, 2, 0, kBlocks);
  std::vector<Region> regions;
  regions.push_back(MakeRegion(spec, options, 2, 0, 1));
  regions.push_back(MakeRegion(spec, options, 3, 1, 3));
  regions.push_back(MakeRegion(spec, options, 1, 3, 4));
  std::vector<ps::PsClient*> clients;
  for (Region& r : regions) clients.push_back(r.servers.get());
  std::vector<RegionTraffic> traffic;
  for (int step = 0; step < kSteps; ++step) {
    Accumulate(one, step);
    ASSERT_TRUE(one.servers->Commit().ok());
    for (Region& r : regions) Accumulate(r, step);
    ASSERT_TRUE(ExchangeParts(clients, GetParam().topology, 1, &traffic).ok());
    for (ps::PsClient* c : clients) ASSERT_TRUE(c->Commit().ok());
  }
  const uint64_t reference = Digest(*one.servers);
  for (Region& r : regions) EXPECT_EQ(Digest(*r.servers), reference);
  // The last step's links.
  if (GetParam().topology == cost::SyncTopology::kPeerToPeer) {
    EXPECT_EQ(traffic.size(), 6u);  // every ordered pair
  } else {
    ASSERT_EQ(traffic.size(), 4u);  // 0 -> 1, 1 -> 0, 1 -> 2, 2 -> 1
    for (const RegionTraffic& t : traffic) EXPECT_TRUE(t.from == 1 || t.to == 1);
    // The hub forwards region 0's parts to region 2 and 2's to 0 along with its own.
    const auto bytes = [&](int from, int to) {
      for (const RegionTraffic& t : traffic) {
        if (t.from == from && t.to == to) return t.bytes;
      }
      return int64_t{0};
    };
    EXPECT_EQ(bytes(1, 2), bytes(1, 0) - bytes(2, 1) + bytes(0, 1));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, RegionExchangeTest,
    ::testing::Values(Case{ps::OptimizerKind::kSgd, cost::SyncTopology::kPeerToPeer},
                      Case{ps::OptimizerKind::kAdagrad, cost::SyncTopology::kPeerToPeer},
                      Case{ps::OptimizerKind::kAdam, cost::SyncTopology::kPeerToPeer},
                      Case{ps::OptimizerKind::kAdam, cost::SyncTopology::kHub}));

// Without the exchange, a region commits its own blocks alone: another run (the test can fail).
TEST(RegionExchangeRulesTest, WithoutTheOthersPartsARegionIsNotTheJob) {
  const config::ModelSpec spec = Spec();
  const ModelOptions options;
  Region one = MakeRegion(spec, options, 2, 0, kBlocks);
  Region alone = MakeRegion(spec, options, 2, 0, 2);
  Accumulate(one, 0);
  ASSERT_TRUE(one.servers->Commit().ok());
  Accumulate(alone, 0);
  ASSERT_TRUE(alone.servers->Commit().ok());
  EXPECT_NE(Digest(*alone.servers), Digest(*one.servers));
  ps::PsClient* both[] = {one.servers.get(), alone.servers.get()};
  EXPECT_EQ(ExchangeParts(both, cost::SyncTopology::kHub, 2, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace heterps::worker
