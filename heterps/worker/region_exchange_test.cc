// Regions in lockstep (region_exchange.h) against one job holding every region's blocks: three
// regions of 2, 3 and 1 servers, each training its range of every step's blocks on its own
// servers and taking the others' parts before its commit, end with the one job's parameters, bit
// for bit (the servers' digests), for SGD, Adagrad and Adam, peer to peer and through a hub; the
// traffic each link carried is what the topology sends. GEO windows (TakeDeltaWindow,
// ApplyDeltaWindow): at every step with plain SGD, the synchronous job to 1e-6; with Adagrad, a
// threshold and a delay, every region on the same parameters to the bit after the final flush,
// each the start plus every window's merge; the bytes between regions falling with K.
#include "heterps/worker/region_exchange.h"

#include <functional>
#include <map>
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

// Region r's part of step `step`: its blocks forward and backward, their parts on its servers,
// the loss's gradient scaled by `scale` (default: 1 / the whole step's samples).
void Accumulate(Region& r, int step, float scale = 1.0f / (kBlock * kBlocks)) {
  ASSERT_TRUE(r.stage->PullParameters().ok());
  ParameterGrads grads = r.stage->NewGrads();
  const Activations in = Samples(step, r.first * kBlock, (r.end - r.first) * kBlock);
  ASSERT_TRUE(r.stage->ForwardBackward(0, in, scale, nullptr, &grads).ok());
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

// Every parameter's value: each sparse row's floats by (table, key), each dense block's by
// (-1 - table, block).
using Values = std::map<std::pair<int64_t, uint64_t>, std::vector<float>>;
Values ValuesOf(ps::InProcessPsClient& servers) {
  Values out;
  for (int s = 0; s < servers.num_servers(); ++s) {
    const ps::CheckpointTables tables = servers.Tables(s);
    for (const auto& [id, table] : tables.sparse) {
      EXPECT_TRUE(table
                      ->ForEachRow([&, id = id](uint64_t key, const ps::RowData& row) {
                        out[{id, key}] = row.value;
                        return absl::OkStatus();
                      })
                      .ok());
    }
    for (const auto& [id, table] : tables.dense) {
      for (int b = 0; b < table->num_blocks(); ++b) {
        auto block = table->Read(b);
        EXPECT_TRUE(block.ok());
        if (block.ok()) out[{-1 - id, static_cast<uint64_t>(b)}] = block->value;
      }
    }
  }
  return out;
}

// Three regions of 2, 3 and 1 servers training blocks [0, 1), [1, 3) and [3, 4) of every step as
// jobs of their own (each scaled by its own samples), tracking their changes.
struct Geo {
  std::vector<Region> regions;
  std::vector<ps::PsClient*> clients;
  std::vector<int64_t> samples;
  DeltaTables tables;

  Geo(const config::ModelSpec& spec, const ModelOptions& options) {
    regions.push_back(MakeRegion(spec, options, 2, 0, 1));
    regions.push_back(MakeRegion(spec, options, 3, 1, 3));
    regions.push_back(MakeRegion(spec, options, 1, 3, 4));
    for (Region& r : regions) {
      clients.push_back(r.servers.get());
      samples.push_back((r.end - r.first) * kBlock);
      EXPECT_TRUE(r.servers->TrackDeltas().ok());
    }
    tables = DeltaTablesOf(*regions[0].servers);
  }
  void Step(int step) {
    for (Region& r : regions) {
      Accumulate(r, step, 1.0f / ((r.end - r.first) * kBlock));
      ASSERT_TRUE(r.servers->Commit().ok());
    }
  }
  // Takes a window and applies it (no delay); the window's traffic appended to `traffic`.
  DeltaWindow Sync(float threshold, cost::SyncTopology topology,
                   std::vector<RegionTraffic>* traffic) {
    absl::StatusOr<DeltaWindow> window = TakeDeltaWindow(clients, tables, samples, threshold);
    EXPECT_TRUE(window.ok()) << window.status();
    if (!window.ok()) return {};
    std::vector<RegionTraffic> links;
    EXPECT_TRUE(ApplyDeltaWindow(clients, *window, topology, 1, &links).ok());
    if (traffic != nullptr) traffic->insert(traffic->end(), links.begin(), links.end());
    return *window;
  }
  // Windows at threshold 0 until one finds nothing to send (at most 4); each passed to `seen`.
  // Returns the windows that sent anything.
  int Flush(cost::SyncTopology topology = cost::SyncTopology::kPeerToPeer,
            const std::function<void(const DeltaWindow&)>& seen = nullptr) {
    int flushes = 0;
    for (; flushes < 4; ++flushes) {
      const DeltaWindow w = Sync(0, topology, nullptr);
      if (seen) seen(w);
      if (w.sparse.empty() && w.dense.empty()) break;
    }
    return flushes;
  }
};

int64_t Bytes(const std::vector<RegionTraffic>& traffic) {
  int64_t bytes = 0;
  for (const RegionTraffic& t : traffic) bytes += t.bytes;
  return bytes;
}

// K = 1, no threshold, no delay, plain SGD: each region's step is -lr times its gradient over its
// own samples, and the merge weights it by its share of the step's, so every region holds what
// the synchronous job holds, to float rounding (1e-6), and after a flush all three the same floats.
TEST(RegionGeoTest, AWindowAtEveryStepIsSynchronousSgd) {
  const config::ModelSpec spec = Spec();
  ModelOptions options;
  options.sparse_optimizer.kind = options.dense_optimizer.kind = ps::OptimizerKind::kSgd;
  Region one = MakeRegion(spec, options, 2, 0, kBlocks);
  Geo geo(spec, options);
  for (int step = 0; step < kSteps; ++step) {
    Accumulate(one, step);
    ASSERT_TRUE(one.servers->Commit().ok());
    geo.Step(step);
    geo.Sync(0, cost::SyncTopology::kPeerToPeer, nullptr);
  }
  const Values reference = ValuesOf(*one.servers);
  ASSERT_GT(reference.size(), 10u);
  const Values first = ValuesOf(*geo.regions[0].servers);
  ASSERT_EQ(first.size(), reference.size());
  for (const auto& [at, value] : reference) {
    const auto it = first.find(at);
    ASSERT_NE(it, first.end()) << at.first << " " << at.second;
    for (size_t i = 0; i < value.size(); ++i) {
      EXPECT_NEAR(it->second[i], value[i], 1e-6) << at.first << " " << at.second << " " << i;
    }
  }
  // A window's rounding (a delta that, added to its base, is not the value) stays as a residual
  // of 1e-10 here and there, sent by the next window: after the flush, the same floats.
  EXPECT_LT(geo.Flush(), 4);
  for (Region& r : geo.regions) EXPECT_EQ(ValuesOf(*r.servers), ValuesOf(*geo.regions[0].servers));
}

// Adagrad, a threshold of 1% and a delay of one window (each window taken after every K-th step
// and applied before the K-th step after it): the regions differ while they train, and after the
// final flush (windows at threshold 0 until none is left) they hold the same floats, each the
// start plus every window's merge (to float rounding), with nothing left to send.
TEST(RegionGeoTest, AfterTheFinalFlushEveryRegionHoldsTheSameParameters) {
  const config::ModelSpec spec = Spec();
  ModelOptions options;
  options.sparse_optimizer.kind = options.dense_optimizer.kind = ps::OptimizerKind::kAdagrad;
  Geo geo(spec, options);
  const Values start = ValuesOf(*geo.regions[1].servers);  // the dense blocks; rows come later
  std::map<std::pair<int64_t, uint64_t>, std::vector<double>> merged;
  const auto add = [&](const DeltaWindow& w) {
    for (const DeltaWindow::Sparse& t : w.sparse) {
      for (size_t i = 0; i < t.keys.size(); ++i) {
        std::vector<double>& sum = merged[{t.table, t.keys[i]}];
        sum.resize(t.dim, 0.0);
        for (int d = 0; d < t.dim; ++d) sum[d] += t.merged[i * t.dim + d];
      }
    }
    for (const DeltaWindow::Dense& b : w.dense) {
      std::vector<double>& sum = merged[{-1 - b.table, static_cast<uint64_t>(b.block)}];
      sum.resize(b.merged.size(), 0.0);
      for (size_t i = 0; i < b.merged.size(); ++i) sum[i] += b.merged[i];
    }
  };
  constexpr int kK = 2, kWindows = 4;
  std::optional<DeltaWindow> in_flight;
  for (int step = 0; step < kK * kWindows; ++step) {
    if (step % kK == 0 && in_flight.has_value()) {  // due before this step
      ASSERT_TRUE(ApplyDeltaWindow(geo.clients, *in_flight, cost::SyncTopology::kHub, 1, nullptr)
                      .ok());
      add(*in_flight);
      in_flight.reset();
    }
    geo.Step(step);
    if (step % kK == kK - 1) {
      auto window = TakeDeltaWindow(geo.clients, geo.tables, geo.samples, 0.01f);
      ASSERT_TRUE(window.ok()) << window.status();
      in_flight = std::move(*window);
    }
  }
  EXPECT_NE(ValuesOf(*geo.regions[0].servers), ValuesOf(*geo.regions[2].servers));
  ASSERT_TRUE(
      ApplyDeltaWindow(geo.clients, *in_flight, cost::SyncTopology::kHub, 1, nullptr).ok());
  add(*in_flight);
  EXPECT_LT(geo.Flush(cost::SyncTopology::kHub, add), 4);
  const Values first = ValuesOf(*geo.regions[0].servers);
  for (Region& r : geo.regions) EXPECT_EQ(ValuesOf(*r.servers), first);
  ASSERT_FALSE(merged.empty());
  for (const auto& [at, sum] : merged) {
    const auto now = first.find(at);
    ASSERT_NE(now, first.end());
    // A row's start is its initial value (the same in every region, whatever its servers).
    const auto was = start.find(at);
    const std::vector<float> initial =
        at.first < 0 ? (was == start.end() ? std::vector<float>() : was->second)
                     : geo.regions[1].servers->sparse(static_cast<int>(at.first), 0)
                           ->InitialValue(at.second);
    ASSERT_EQ(initial.size(), sum.size()) << at.first << " " << at.second;
    for (size_t i = 0; i < sum.size(); ++i) {
      EXPECT_NEAR(now->second[i], initial[i] + sum[i], 1e-5) << at.first << " " << at.second;
    }
  }
  for (Region& r : geo.regions) {
    for (const auto& [id, table] : r.servers->Tables(0).sparse) EXPECT_EQ(table->tracked_rows(), 0);
  }
}

// The same steps synced every step and every fourth: fewer bytes between regions (the rows a
// window sends are the distinct rows its steps touched), and a hub's links all touch the hub.
TEST(RegionGeoTest, BytesBetweenRegionsFallWithTheWindow) {
  const config::ModelSpec spec = Spec();
  const ModelOptions options;
  std::vector<int64_t> bytes;
  for (int k : {1, 4}) {
    Geo geo(spec, options);
    std::vector<RegionTraffic> traffic;
    for (int step = 0; step < 8; ++step) {
      geo.Step(step);
      if (step % k == k - 1) geo.Sync(0, cost::SyncTopology::kHub, &traffic);
    }
    for (const RegionTraffic& t : traffic) EXPECT_TRUE(t.from == 1 || t.to == 1);
    bytes.push_back(Bytes(traffic));
  }
  EXPECT_GT(bytes[1], 0);
  EXPECT_LT(bytes[1] * 2, bytes[0]);
}

// A region with no samples in a window sends nothing of it: its changes stay, to be sent in a
// window it has weight in (merged at weight 0 they would be lost).
TEST(RegionGeoTest, ARegionOfNoSamplesKeepsItsChanges) {
  const config::ModelSpec spec = Spec();
  Geo geo(spec, ModelOptions());
  geo.Step(0);
  const std::vector<int64_t> none_in_2 = {8, 16, 0};
  auto window = TakeDeltaWindow(geo.clients, geo.tables, none_in_2, 0);
  ASSERT_TRUE(window.ok()) << window.status();
  ASSERT_FALSE(window->sparse.empty());
  EXPECT_EQ(window->sparse[0].rows[2], 0);
  for (float f : window->sparse[0].own[2]) EXPECT_EQ(f, 0.0f);
  ASSERT_TRUE(ApplyDeltaWindow(geo.clients, *window, cost::SyncTopology::kPeerToPeer, 0, nullptr)
                  .ok());
  int64_t tracked = 0;
  for (const auto& [id, table] : geo.regions[2].servers->Tables(0).sparse) {
    tracked += table->tracked_rows();
  }
  EXPECT_GT(tracked, 0);
  EXPECT_LT(geo.Flush(), 4);  // weighted by every region's samples, all sent
  EXPECT_EQ(ValuesOf(*geo.regions[2].servers), ValuesOf(*geo.regions[0].servers));
}

TEST(RegionGeoTest, BadWindowsAreRefused) {
  const config::ModelSpec spec = Spec();
  Geo geo(spec, ModelOptions());
  const std::vector<int64_t> two = {1, 2}, none = {0, 0, 0}, negative = {1, -1, 1};
  for (const auto& samples : {two, none, negative}) {
    EXPECT_EQ(TakeDeltaWindow(geo.clients, geo.tables, samples, 0).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  geo.Step(0);
  auto window = TakeDeltaWindow(geo.clients, geo.tables, geo.samples, 0);
  ASSERT_TRUE(window.ok());
  EXPECT_EQ(ApplyDeltaWindow(geo.clients, *window, cost::SyncTopology::kHub, 3, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  // A region that does not track its changes says so, with its number.
  Region untracked = MakeRegion(spec, ModelOptions(), 1, 0, 1);
  std::vector<ps::PsClient*> clients = geo.clients;
  clients.push_back(untracked.servers.get());
  const std::vector<int64_t> four = {8, 16, 8, 8};
  EXPECT_THAT(TakeDeltaWindow(clients, geo.tables, four, 0).status().message(),
              ::testing::HasSubstr("region 3: "));
}

}  // namespace
}  // namespace heterps::worker
