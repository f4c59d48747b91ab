// The regions' gateways over gRPC on loopback (region_gateway.h) and GEO windows between
// processes' worth of regions (launcher/region_windows.h): a window's message comes back whole
// from many parts, a part posted twice is taken once, a peer that starts late is waited for, one
// that never answers is an error naming it, a wrong token is refused at once; and three regions
// of unequal runs, each on a thread with its own servers, exchanging windows through their
// gateways, end on the same parameters as the same run emulated with TakeDeltaWindow and
// ApplyDeltaWindow in one place, to the bit, also where a region fails part-way and restarts
// from its checkpoint.
#include "heterps/launcher/rpc/region_gateway.h"

#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/env.h"
#include "heterps/base/status_macros.h"
#include "heterps/launcher/rpc/region_gateway_testing.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/worker/stage.h"

namespace heterps::launcher::rpc {
namespace {

TEST(RegionGatewayTest, AWindowComesBackWholeFromManyParts) {
  const std::vector<int> ports = Ports(2);
  RegionGatewayOptions o0 = Options(2, 0, ports), o1 = Options(2, 1, ports);
  o0.part_bytes = 1000;  // about 40 rows a part
  auto a = RegionGateway::Start(o0);
  auto b = RegionGateway::Start(o1);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  const RegionMessage sent = Message(0, 3, 2000);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  ASSERT_TRUE((*a)->Send(1, sent, deadline).ok());
  const int64_t once = (*a)->sent_bytes(1);
  EXPECT_GT(once, 2000 * (8 + 4 * 4));
  // Sent again before it is taken (a retry whose first try arrived): taken once.
  ASSERT_TRUE((*a)->Send(1, sent, deadline).ok());
  absl::StatusOr<RegionMessage> got = (*b)->Receive(0, 3, deadline);
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSame(*got, sent);
  EXPECT_EQ((*b)->received_bytes(), 2 * once);
  // And again after it was taken: dropped, not a second window 3.
  ASSERT_TRUE((*a)->Send(1, sent, deadline).ok());
  absl::StatusOr<RegionMessage> again = (*b)->Receive(0, 3, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kDeadlineExceeded) << again.status();
  EXPECT_THAT(again.status().message(), ::testing::HasSubstr("region-0"));
  // The hello: no tables at all.
  RegionMessage hello;
  hello.window = 0;
  hello.from = 1;
  hello.total_steps = 9;
  ASSERT_TRUE((*b)->Send(0, hello, deadline).ok());
  absl::StatusOr<RegionMessage> heard = (*a)->Receive(1, 0, deadline);
  ASSERT_TRUE(heard.ok()) << heard.status();
  EXPECT_EQ(heard->total_steps, 9);
  EXPECT_TRUE(heard->deltas.sparse.empty());
}

TEST(RegionGatewayTest, APeerThatStartsLateIsWaitedForOneThatNeverDoesIsNamed) {
  const std::vector<int> ports = Ports(3);
  auto a = RegionGateway::Start(Options(3, 0, ports));
  ASSERT_TRUE(a.ok()) << a.status();
  std::optional<absl::StatusOr<std::unique_ptr<RegionGateway>>> b;
  std::thread late([&] {
    absl::SleepFor(absl::Milliseconds(700));
    b.emplace(RegionGateway::Start(Options(3, 1, ports)));
  });
  const RegionMessage m = Message(0, 1, 10);
  EXPECT_TRUE((*a)->Send(1, m, absl::Now() + absl::Seconds(20)).ok());
  late.join();
  ASSERT_TRUE(b->ok()) << b->status();
  absl::StatusOr<RegionMessage> got = (**b)->Receive(0, 1, absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  ExpectSame(*got, m);
  // Region 2 never starts.
  const absl::Status never = (*a)->Send(2, m, absl::Now() + absl::Milliseconds(600));
  EXPECT_FALSE(never.ok());
  EXPECT_THAT(never.message(), ::testing::HasSubstr(absl::StrCat("region-2' (127.0.0.1:", ports[2])));
}

TEST(RegionGatewayTest, ARegionThatEndsEarlyIsNamedAtOnce) {
  const std::vector<int> ports = Ports(2);
  auto a = RegionGateway::Start(Options(2, 0, ports));
  auto b = RegionGateway::Start(Options(2, 1, ports));
  ASSERT_TRUE(a.ok() && b.ok());
  std::thread ends([&] {
    absl::SleepFor(absl::Milliseconds(300));
    (*b)->Abandon("rank 2 died");
  });
  const absl::Time start = absl::Now();
  const absl::StatusOr<RegionMessage> got = (*a)->Receive(1, 4, absl::Now() + absl::Seconds(60));
  ends.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted) << got.status();
  EXPECT_THAT(got.status().message(), ::testing::HasSubstr("region-1"));
  EXPECT_THAT(got.status().message(), ::testing::HasSubstr("rank 2 died"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(RegionGatewayTest, ClosingEndsAWaitAtOnce) {
  const std::vector<int> ports = Ports(2);
  auto a = RegionGateway::Start(Options(2, 0, ports));
  ASSERT_TRUE(a.ok());
  std::thread closes([&] {
    absl::SleepFor(absl::Milliseconds(300));
    (*a)->Close();
  });
  const absl::Time start = absl::Now();
  const absl::StatusOr<RegionMessage> got = (*a)->Receive(1, 2, absl::Now() + absl::Seconds(60));
  closes.join();
  EXPECT_EQ(got.status().code(), absl::StatusCode::kCancelled) << got.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  // A send to a region that is not there gives up at once once closed.
  EXPECT_FALSE((*a)->Send(1, Message(0, 2, 3), absl::Now() + absl::Seconds(60)).ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
}

TEST(RegionGatewayTest, AWrongTokenIsRefusedAtOnce) {
  const std::vector<int> ports = Ports(2);
  RegionGatewayOptions o0 = Options(2, 0, ports), o1 = Options(2, 1, ports);
  o0.token = "not-the-token";
  o1.token = "the-token";
  auto a = RegionGateway::Start(o0);
  auto b = RegionGateway::Start(o1);
  ASSERT_TRUE(a.ok() && b.ok());
  const absl::Time start = absl::Now();
  const absl::Status refused = (*a)->Send(1, Message(0, 1, 3), absl::Now() + absl::Seconds(30));
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnauthenticated) << refused;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not retried to the deadline
}

TEST(RegionGatewayTest, BadListsAreRefused) {
  RegionGatewayOptions o = Options(2, 0, {1, 2});
  o.addresses[0] = "nowhere";
  EXPECT_EQ(RegionGateway::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options(1, 0, {1});
  EXPECT_EQ(RegionGateway::Start(o).status().code(), absl::StatusCode::kInvalidArgument);
}

// --- GEO windows between regions on threads, against the emulation in one place. ---

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

constexpr int kRegions = 3;
const int64_t kSteps[kRegions] = {7, 5, 6};

int64_t Samples(int region) { return 10 * (region + 1); }

// Region `r`'s step `step`: gradients of a few rows and of both dense blocks, pushed (applied at
// once, with the tables' optimizers).
void Step(ps::PsClient& client, int r, int64_t step) {
  std::mt19937_64 rng(r * 1000 + step);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 12; ++i) keys.push_back(rng() % 40);
  std::vector<float> grads(keys.size() * 4);
  for (float& g : grads) g = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
  ASSERT_TRUE(client.Wait(client.PushSparse(0, keys, grads)).ok());
  for (int b = 0; b < 2; ++b) {
    std::vector<float> dense(b == 0 ? 14 * 4 + 4 : 4 + 1);
    for (float& g : dense) g = static_cast<float>(rng() % 2001) / 1000.0f - 1.0f;
    ASSERT_TRUE(client.Wait(client.PushDense(worker::kDenseTable, b, dense)).ok());
  }
}

uint64_t Digest(ps::InProcessPsClient& servers) {
  auto d = ps::DigestTables(servers.Tables(0));
  EXPECT_TRUE(d.ok());
  return d.ok() ? *d : 0;
}

// Every parameter's value (not the optimizers' state, each region's own): each sparse row's
// floats by (table, key), each dense block's by (-1 - table, block).
using Values = std::map<std::pair<int64_t, uint64_t>, std::vector<float>>;
Values ValuesOf(ps::InProcessPsClient& servers) {
  Values out;
  const ps::CheckpointTables tables = servers.Tables(0);
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
  return out;
}

std::unique_ptr<ps::InProcessPsClient> Servers(const config::ModelSpec& spec) {
  auto servers = std::make_unique<ps::InProcessPsClient>(1);
  EXPECT_TRUE(worker::CreateModelTables(spec, servers.get(), worker::ModelOptions()).ok());
  return servers;
}

// The emulation's loop (worker/region_trainer.cc): every region's step s in turn, a region whose
// steps are done training nothing; a window after every K-th step (and, with `eager` > 0, one of
// the rows passing it after each step between), applied `delay` windows later; the flush.
// `windows`: the windows taken before the flush.
struct EmulatedRun {
  std::vector<uint64_t> digests;                // per region
  std::map<std::pair<int, int>, int64_t> bytes;  // per link
  int64_t windows = 0;
};

EmulatedRun Emulated(const config::ModelSpec& spec, int64_t k, int delay, float threshold,
                     int hub, float eager) {
  EmulatedRun out;
  std::vector<std::unique_ptr<ps::InProcessPsClient>> servers;
  std::vector<ps::PsClient*> clients;
  for (int r = 0; r < kRegions; ++r) {
    servers.push_back(Servers(spec));
    EXPECT_TRUE(servers.back()->TrackDeltas().ok());
    clients.push_back(servers.back().get());
  }
  const worker::DeltaTables tables = worker::DeltaTablesOf(*servers[0]);
  const worker::DeltaTables of_spec = worker::ModelDeltaTables(spec);
  EXPECT_EQ(of_spec.sparse, tables.sparse);
  EXPECT_EQ(of_spec.dense, tables.dense);
  std::optional<worker::DeltaWindow> in_flight;
  std::vector<int64_t> window(kRegions, 0), run(kRegions, 0);
  const auto apply = [&] {
    if (!in_flight) return false;
    std::vector<worker::RegionTraffic> traffic;
    EXPECT_TRUE(worker::ApplyDeltaWindow(
                    clients, *in_flight,
                    hub < 0 ? cost::SyncTopology::kPeerToPeer : cost::SyncTopology::kHub,
                    std::max(hub, 0), &traffic)
                    .ok());
    for (const worker::RegionTraffic& t : traffic) out.bytes[{t.from, t.to}] += t.bytes;
    const bool sent = !in_flight->sparse.empty() || !in_flight->dense.empty();
    in_flight.reset();
    return sent;
  };
  const auto take = [&](const std::vector<int64_t>& samples, float t) {
    auto w = worker::TakeDeltaWindow(clients, tables, samples, t);
    EXPECT_TRUE(w.ok()) << w.status();
    in_flight = *std::move(w);
  };
  const int64_t longest = *std::max_element(kSteps, kSteps + kRegions);
  for (int64_t s = 0; s < longest; ++s) {
    for (int r = 0; r < kRegions; ++r) {
      if (s >= kSteps[r]) continue;
      Step(*servers[r], r, s);
      window[r] += Samples(r);
      run[r] += Samples(r);
    }
    if ((s + 1) % k == 0 || eager > 0) {
      apply();
      take(window, (s + 1) % k == 0 ? threshold : eager);
      ++out.windows;
      window.assign(kRegions, 0);
      if (delay == 0) apply();
    }
  }
  apply();
  for (int flush = 0; flush < 9; ++flush) {
    take(run, 0);
    if (!apply()) break;
  }
  for (auto& s : servers) out.digests.push_back(Digest(*s));
  return out;
}

struct GeoCase {
  int64_t k;
  int delay;
  float threshold;
  int hub = -1;
  // Region 0 checkpoints its servers after step 3 and fails after step 6: its new servers load
  // the checkpoint, and its windows rewind to it (RegionWindows::Rewind).
  bool restart = false;
  float eager = 0;  // RegionWindowsOptions::eager_threshold
};

class RegionWindowsTest : public ::testing::TestWithParam<GeoCase> {};

TEST_P(RegionWindowsTest, RegionsThroughTheirGatewaysAreTheEmulation) {
  const GeoCase c = GetParam();
  const config::ModelSpec spec = Spec();
  const EmulatedRun emulated = Emulated(spec, c.k, c.delay, c.threshold, c.hub, c.eager);
  const std::vector<int> ports = Ports(kRegions);
  std::vector<std::unique_ptr<RegionGateway>> gateways;
  std::vector<std::unique_ptr<ps::InProcessPsClient>> servers;
  for (int r = 0; r < kRegions; ++r) {
    RegionGatewayOptions o = Options(kRegions, r, ports);
    o.part_bytes = 256;  // many parts a window
    auto g = RegionGateway::Start(o);
    ASSERT_TRUE(g.ok()) << g.status();
    gateways.push_back(*std::move(g));
    servers.push_back(Servers(spec));
  }
  std::vector<absl::Status> status(kRegions);
  std::vector<int64_t> windows(kRegions);
  std::vector<std::vector<worker::RegionTraffic>> traffic(kRegions);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRegions; ++r) {
    threads.emplace_back([&, r] {
      RegionWindowsOptions o;
      o.self = r;
      o.regions = kRegions;
      o.sync_steps = c.k;
      o.delay = c.delay;
      o.threshold = c.threshold;
      o.eager_threshold = c.eager;
      o.hub = c.hub;
      o.timeout = absl::Seconds(30);
      RegionWindows geo(o, *gateways[r]);
      status[r] = geo.Begin(servers[r].get(), worker::ModelDeltaTables(spec), kSteps[r]);
      const std::string root = absl::StrCat(::testing::TempDir(), "/geo-", c.k, "-", c.hub);
      bool failed = false;
      for (int64_t s = 0; status[r].ok() && s < kSteps[r]; ++s) {
        Step(*servers[r], r, s);
        status[r] = geo.AfterStep(s, Samples(r));
        if (!c.restart || r != 0 || !status[r].ok()) continue;
        if (s + 1 == 3) {
          status[r] = ps::SaveCheckpoint(base::DefaultEnv(), root, 3, servers[r]->Tables(0));
          geo.Checkpointed(3);
        } else if (s + 1 == 6 && !failed) {
          failed = true;
          servers[r] = Servers(spec);
          auto step = ps::LoadLatestCheckpoint(base::DefaultEnv(), root, servers[r]->Tables(0));
          ASSERT_TRUE(step.ok()) << step.status();
          EXPECT_EQ(geo.Rewind(servers[r].get(), 6).code(), absl::StatusCode::kFailedPrecondition);
          status[r] = geo.Rewind(servers[r].get(), *step);
          s = *step - 1;  // steps 3 to 5 again
        }
      }
      EXPECT_EQ(failed, c.restart && r == 0);
      if (status[r].ok()) status[r] = geo.Finish();
      EXPECT_EQ(geo.longest(), 7);
      windows[r] = geo.windows();
      traffic[r] = geo.traffic();
    });
  }
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < kRegions; ++r) {
    ASSERT_TRUE(status[r].ok()) << "region " << r << ": " << status[r];
    EXPECT_EQ(Digest(*servers[r]), emulated.digests[r]) << "region " << r;
    EXPECT_TRUE(ValuesOf(*servers[r]) == ValuesOf(*servers[0]));  // the flush: the same values
    EXPECT_EQ(windows[r], windows[0]);
    // Every link's bytes, in every region, the emulation's.
    ASSERT_EQ(traffic[r].size(), emulated.bytes.size()) << "region " << r;
    for (const worker::RegionTraffic& t : traffic[r]) {
      EXPECT_EQ(t.bytes, emulated.bytes.at({t.from, t.to})) << t.from << " -> " << t.to;
      EXPECT_TRUE(c.hub < 0 || t.from == c.hub || t.to == c.hub);
    }
  }
  EXPECT_GE(windows[0], 7 / c.k);
  // Windows taken after every step with an eager threshold, every K-th without.
  EXPECT_EQ(emulated.windows, c.eager > 0 ? 7 : 7 / c.k);
  EXPECT_EQ(traffic[0].size(),
            static_cast<size_t>(c.hub < 0 ? kRegions * (kRegions - 1) : 2 * (kRegions - 1)));
}

INSTANTIATE_TEST_SUITE_P(Windows, RegionWindowsTest,
                         ::testing::Values(GeoCase{1, 0, 0}, GeoCase{2, 1, 0.01f},
                                           GeoCase{3, 0, 0.5f}, GeoCase{10, 1, 0},
                                           GeoCase{1, 0, 0, 0}, GeoCase{2, 1, 0.01f, 1},
                                           GeoCase{3, 1, 0.5f, 2}, GeoCase{2, 1, 0.01f, -1, true},
                                           GeoCase{3, 0, 0.5f, 0, true},
                                           GeoCase{3, 1, 0, -1, false, 0.05f},
                                           GeoCase{3, 0, 0.01f, 1, false, 0.2f},
                                           GeoCase{3, 1, 0, -1, true, 0.05f}));

TEST(RegionWindowsTest, ARegionNeverHeardFromIsAnErrorNamingIt) {
  const std::vector<int> ports = Ports(2);
  auto g = RegionGateway::Start(Options(2, 0, ports));
  ASSERT_TRUE(g.ok());
  const config::ModelSpec spec = Spec();
  auto servers = Servers(spec);
  RegionWindowsOptions o;
  o.self = 0;
  o.regions = 2;
  o.timeout = absl::Milliseconds(500);
  RegionWindows geo(o, **g);
  const absl::Status s = geo.Begin(servers.get(), worker::ModelDeltaTables(spec), 4);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("region-1"));
  // Both regions' hellos at once, each with its own options, gateway and servers: what each Begin
  // returned, region 0's first.
  const auto hellos = [&](const RegionWindowsOptions& o0, RegionGateway& g0, ps::PsClient* p0,
                          const RegionWindowsOptions& o1, RegionGateway& g1, ps::PsClient* p1) {
    absl::Status s1;
    std::thread t([&] {
      RegionWindows geo1(o1, g1);
      s1 = geo1.Begin(p1, worker::ModelDeltaTables(spec), 4);
    });
    RegionWindows geo0(o0, g0);
    const absl::Status s0 = geo0.Begin(p0, worker::ModelDeltaTables(spec), 4);
    t.join();
    return std::make_pair(s0, s1);
  };
  // Two regions whose settings differ: both refuse at the hello, naming the other.
  {
    auto other = RegionGateway::Start(Options(2, 1, ports));
    ASSERT_TRUE(other.ok());
    auto servers1 = Servers(spec);
    RegionWindowsOptions o1 = o;
    o1.self = 1;
    o1.sync_steps = 10;
    o1.names = {"us", "eu"};
    o.timeout = o1.timeout = absl::Seconds(20);
    o.names = o1.names;
    const auto [s0, s1] = hellos(o, **g, servers.get(), o1, **other, servers1.get());
    EXPECT_EQ(s0.code(), absl::StatusCode::kFailedPrecondition) << s0;
    EXPECT_THAT(s0.message(), ::testing::HasSubstr("region 'eu' takes a window every 10 steps"));
    EXPECT_EQ(s1.code(), absl::StatusCode::kFailedPrecondition) << s1;
  }
  // The same with eager thresholds that differ.
  {
    const std::vector<int> more = Ports(2);
    auto g0 = RegionGateway::Start(Options(2, 0, more));
    auto g1 = RegionGateway::Start(Options(2, 1, more));
    ASSERT_TRUE(g0.ok() && g1.ok());
    auto servers0 = Servers(spec), servers1 = Servers(spec);
    RegionWindowsOptions o0 = o, o1 = o;
    o1.self = 1;
    o0.eager_threshold = 0.1f;
    const auto [s0, s1] = hellos(o0, **g0, servers0.get(), o1, **g1, servers1.get());
    EXPECT_EQ(s0.code(), absl::StatusCode::kFailedPrecondition) << s0;
    EXPECT_THAT(s0.message(), ::testing::HasSubstr("eager threshold 0, hub"));
    EXPECT_THAT(s0.message(), ::testing::HasSubstr("--sync-eager-threshold"));
    EXPECT_EQ(s1.code(), absl::StatusCode::kFailedPrecondition) << s1;
  }
  // An eager threshold not above the threshold: refused before the hello.
  RegionWindowsOptions eager = o;
  eager.threshold = 0.1f;
  eager.eager_threshold = 0.1f;
  RegionWindows not_above(eager, **g);
  EXPECT_EQ(not_above.Begin(servers.get(), worker::ModelDeltaTables(spec), 4).code(),
            absl::StatusCode::kInvalidArgument);
  o.delay = 2;
  RegionWindows bad(o, **g);
  EXPECT_EQ(bad.Begin(servers.get(), worker::ModelDeltaTables(spec), 4).code(),
            absl::StatusCode::kInvalidArgument);
}

// A mailbox that sends window `flip` as the other kind (a flush for a K-th step's, or back).
class FlippingMailbox final : public RegionMailbox {
 public:
  FlippingMailbox(RegionMailbox& inner, int64_t flip) : inner_(inner), flip_(flip) {}
  absl::Status Send(int to, const RegionMessage& message, absl::Time deadline) override {
    RegionMessage m = message;
    if (m.window == flip_) m.flush = !m.flush;
    return inner_.Send(to, m, deadline);
  }
  absl::StatusOr<RegionMessage> Receive(int from, int64_t window, absl::Time deadline) override {
    return inner_.Receive(from, window, deadline);
  }

 private:
  RegionMailbox& inner_;
  const int64_t flip_;
};

// Two regions whose windows of one number are of different kinds (one region's last K-th step,
// the other's first flush: a region that miscounted its windows) both stop, naming the other.
TEST(RegionWindowsTest, AWindowOfAnotherKindIsAnError) {
  const std::vector<int> ports = Ports(2);
  auto g0 = RegionGateway::Start(Options(2, 0, ports));
  auto g1 = RegionGateway::Start(Options(2, 1, ports));
  ASSERT_TRUE(g0.ok() && g1.ok());
  const config::ModelSpec spec = Spec();
  auto servers0 = Servers(spec), servers1 = Servers(spec);
  RegionWindowsOptions o;
  o.regions = 2;
  o.names = {"region-0", "region-1"};
  o.sync_steps = 2;
  o.delay = 0;
  o.timeout = absl::Seconds(20);
  const auto run = [&](int self, RegionMailbox& mailbox, ps::PsClient* servers) -> absl::Status {
    RegionWindowsOptions mine = o;
    mine.self = self;
    RegionWindows geo(mine, mailbox);
    HETERPS_RETURN_IF_ERROR(geo.Begin(servers, worker::ModelDeltaTables(spec), 4));
    for (int64_t step = 0; step < 4; ++step) HETERPS_RETURN_IF_ERROR(geo.AfterStep(step, 8));
    return geo.Finish();
  };
  FlippingMailbox flipping(**g1, 2);  // region 1's window 2, after step 4, sent as a flush
  absl::Status s1;
  std::thread t([&] { s1 = run(1, flipping, servers1.get()); });
  const absl::Status s0 = run(0, **g0, servers0.get());
  if (!s0.ok()) (*g0)->Abandon(std::string(s0.message()));  // as a region's job does
  t.join();
  EXPECT_EQ(s0.code(), absl::StatusCode::kFailedPrecondition) << s0;
  EXPECT_THAT(s0.message(), ::testing::HasSubstr("region 'region-1''s window 2 is of the final "
                                                 "flush, this region's of a K-th step"));
  // Region 1 saw region 0's window 2 as it expected it, and hears that region 0 stopped.
  EXPECT_EQ(s1.code(), absl::StatusCode::kAborted) << s1;
  EXPECT_THAT(s1.message(), ::testing::HasSubstr("the regions disagree on the windows"));
  // Unflipped, the same run ends well in both.
  const std::vector<int> again = Ports(2);
  auto h0 = RegionGateway::Start(Options(2, 0, again));
  auto h1 = RegionGateway::Start(Options(2, 1, again));
  ASSERT_TRUE(h0.ok() && h1.ok());
  auto fresh0 = Servers(spec), fresh1 = Servers(spec);
  std::thread u([&] { s1 = run(1, **h1, fresh1.get()); });
  EXPECT_TRUE(run(0, **h0, fresh0.get()).ok());
  u.join();
  EXPECT_TRUE(s1.ok()) << s1;
}

}  // namespace
}  // namespace heterps::launcher::rpc
