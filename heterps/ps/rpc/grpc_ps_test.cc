// The gRPC service against the in-process client: servers on 127.0.0.1, port 0,
// in this process. (tests/ps_server_test.cc runs them as separate processes.)
#include <cstdlib>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/base/token.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/ps/ps_client.h"
#include "heterps/ps/rpc/grpc_ps_client.h"
#include "heterps/ps/rpc/internal/convert.h"
#include "heterps/ps/rpc/ps.grpc.pb.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/rpc/rpc.h"

namespace heterps::ps::rpc {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "s3cret-token";

std::string DataDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/grpc_ps_test_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

// `n` servers on loopback, each with its own data directory.
std::vector<std::unique_ptr<PsServer>> StartServers(int n, const std::string& name,
                                                    const std::string& token = kToken) {
  std::vector<std::unique_ptr<PsServer>> servers;
  for (int s = 0; s < n; ++s) {
    PsServerOptions options;
    options.shard = s;
    options.num_shards = n;
    options.data_dir = DataDir(name + "_" + std::to_string(s));
    options.token = token;
    auto server = PsServer::Start(options);
    EXPECT_TRUE(server.ok()) << server.status();
    if (server.ok()) servers.push_back(std::move(*server));
  }
  return servers;
}

GrpcPsClientOptions ClientOptions(const std::vector<std::unique_ptr<PsServer>>& servers) {
  GrpcPsClientOptions options;
  for (const auto& server : servers) options.servers.push_back(server->address());
  options.token = kToken;
  options.connect_timeout = absl::Seconds(5);
  return options;
}

SparseTableOptions Sparse(OptimizerKind kind, int64_t budget) {
  SparseTableOptions o;
  o.dim = 8;
  o.optimizer.kind = kind;
  o.seed = 5;
  o.memory_budget_bytes = budget;
  return o;
}

DenseTableOptions Dense() {
  DenseTableOptions o;
  o.block_sizes = {3, 70000};  // the second block is streamed in several chunks
  o.optimizer.kind = OptimizerKind::kAdam;
  o.seed = 9;
  return o;
}

TEST(GrpcPsTest, AnswersExactlyLikeTheInProcessClient) {
  auto servers = StartServers(2, "equal");
  GrpcPsClientOptions options = ClientOptions(servers);
  options.max_message_bytes = 16 << 10;  // forces batches into many chunks
  auto remote = GrpcPsClient::Connect(options);
  ASSERT_TRUE(remote.ok()) << remote.status();
  InProcessPsClient local(2);
  for (OptimizerKind kind : {OptimizerKind::kAdagrad, OptimizerKind::kAdam}) {
    const int table = kind == OptimizerKind::kAdam ? 1 : 0;
    // The remote table spills to RocksDB; the local one keeps everything in
    // memory.
    absl::Status created = (*remote)->CreateSparseTable(table, Sparse(kind, 64 << 10));
    ASSERT_TRUE(created.ok()) << created;
    ASSERT_TRUE(local.CreateSparseTable(table, Sparse(kind, 0)).ok());
  }
  ASSERT_TRUE((*remote)->CreateDenseTable(3, Dense()).ok());
  ASSERT_TRUE(local.CreateDenseTable(3, Dense()).ok());

  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 60; ++step) {
    const int table = step % 2;
    std::vector<uint64_t> keys(1 + rng() % 3000);
    for (uint64_t& k : keys) k = rng() % 20000;  // repeats within a batch
    std::vector<float> a(keys.size() * 8), b(keys.size() * 8);
    if (step % 3 != 2) {
      ASSERT_TRUE(local.Wait(local.PullSparse(table, keys, absl::MakeSpan(a))).ok());
      absl::Status status = (*remote)->Wait((*remote)->PullSparse(table, keys, absl::MakeSpan(b)));
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_EQ(a, b) << "step " << step;
    } else {
      for (float& g : a) g = normal(rng);
      ASSERT_TRUE(local.Wait(local.PushSparse(table, keys, a)).ok());
      // Two tickets in flight at once.
      std::vector<uint64_t> none;
      Ticket t1 = (*remote)->PushSparse(table, keys, a);
      Ticket t2 = (*remote)->PullSparse(table, none, {});
      ASSERT_TRUE((*remote)->Wait(t2).ok());
      ASSERT_TRUE((*remote)->Wait(t1).ok());
    }
    if (step % 2 == 0) {
      for (int block : {0, 1}) {
        std::vector<float> x(Dense().block_sizes[block]), y(x.size());
        ASSERT_TRUE(local.Wait(local.PullDense(3, block, absl::MakeSpan(x))).ok());
        ASSERT_TRUE((*remote)->Wait((*remote)->PullDense(3, block, absl::MakeSpan(y))).ok());
        ASSERT_EQ(x, y) << "step " << step << " block " << block;
        for (float& g : x) g = normal(rng);
        ASSERT_TRUE(local.Wait(local.PushDense(3, block, x)).ok());
        ASSERT_TRUE((*remote)->Wait((*remote)->PushDense(3, block, x)).ok());
      }
    } else {
      // Both blocks in one call each way, in either order, the messages' chunks spanning the
      // boundary between the blocks: the same as a call per block.
      const std::vector<int> pull_order = {1, 0}, push_order = {0, 1};
      std::vector<std::vector<float>> x(2), y(2);
      std::vector<DensePull> into;
      for (int i = 0; i < 2; ++i) {
        x[i].resize(Dense().block_sizes[pull_order[i]]);
        y[i].resize(x[i].size());
        ASSERT_TRUE(local.Wait(local.PullDense(3, pull_order[i], absl::MakeSpan(x[i]))).ok());
        into.push_back({pull_order[i], absl::MakeSpan(y[i])});
      }
      const std::vector<Ticket> pulls = (*remote)->PullDenseBlocks(3, into);
      ASSERT_EQ(pulls.size(), 1u);
      absl::Status pulled = (*remote)->Wait(pulls[0]);
      ASSERT_TRUE(pulled.ok()) << pulled;
      ASSERT_EQ(x, y) << "step " << step;
      std::vector<std::vector<float>> g(2);
      std::vector<DensePush> grads;
      for (int i = 0; i < 2; ++i) {
        g[i].resize(Dense().block_sizes[push_order[i]]);
        for (float& v : g[i]) v = normal(rng);
        ASSERT_TRUE(local.Wait(local.PushDense(3, push_order[i], g[i])).ok());
        grads.push_back({push_order[i], g[i]});
      }
      const std::vector<Ticket> pushes = (*remote)->PushDenseBlocks(3, grads);
      ASSERT_EQ(pushes.size(), 1u);
      absl::Status pushed = (*remote)->Wait(pushes[0]);
      ASSERT_TRUE(pushed.ok()) << pushed;
    }
  }
  auto stats = (*remote)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_EQ(stats->size(), 2u);
  int64_t spills = 0;
  for (const ShardStats& shard : *stats) {
    for (const auto& [table, s] : shard.sparse) spills += s.spills;
  }
  EXPECT_GT(spills, 0) << "the SSD tier was not exercised";
  EXPECT_THAT((*stats)[1].dense_tables, ::testing::ElementsAre(3));
}

// ExportDense and ImportDense against the block's whole data (DenseTable::Read): the range of
// the values and of each state array, the update count; a slice written back replaces that range
// alone, through the service as in process.
TEST(GrpcPsTest, DenseSlicesReadAndWriteTheirRangeAndNothingElse) {
  auto servers = StartServers(2, "slices");
  auto remote = GrpcPsClient::Connect(ClientOptions(servers));
  ASSERT_TRUE(remote.ok()) << remote.status();
  InProcessPsClient local(2);
  ASSERT_TRUE((*remote)->CreateDenseTable(3, Dense()).ok());
  ASSERT_TRUE(local.CreateDenseTable(3, Dense()).ok());
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 3; ++step) {  // a state that is not the initial one
    std::vector<float> g(Dense().block_sizes[1]);
    for (float& x : g) x = normal(rng);
    ASSERT_TRUE(local.Wait(local.PushDense(3, 1, g)).ok());
    ASSERT_TRUE((*remote)->Wait((*remote)->PushDense(3, 1, g)).ok());
  }
  const int64_t size = Dense().block_sizes[1], offset = 1234, count = 40000;
  auto whole = local.dense(3)->Read(1);
  ASSERT_TRUE(whole.ok()) << whole.status();
  DenseSlice a, b;
  ASSERT_TRUE(local.Wait(local.ExportDense(3, 1, offset, count, &a)).ok());
  absl::Status exported = (*remote)->Wait((*remote)->ExportDense(3, 1, offset, count, &b));
  ASSERT_TRUE(exported.ok()) << exported;
  ASSERT_EQ(a.value.size(), static_cast<size_t>(count));
  ASSERT_EQ(a.state.size(), static_cast<size_t>(2 * count));  // Adam: m, then v
  for (int64_t i = 0; i < count; ++i) {
    ASSERT_EQ(a.value[i], whole->value[offset + i]) << i;
    ASSERT_EQ(a.state[i], whole->state[offset + i]) << i;
    ASSERT_EQ(a.state[count + i], whole->state[size + offset + i]) << i;
  }
  EXPECT_EQ(a.steps, 3);
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(a.state, b.state);
  EXPECT_EQ(a.steps, b.steps);

  for (float& x : a.value) x += 1;
  for (float& x : a.state) x *= 2;
  a.steps = 7;
  ASSERT_TRUE(local.Wait(local.ImportDense(3, 1, offset, a)).ok());
  absl::Status imported = (*remote)->Wait((*remote)->ImportDense(3, 1, offset, a));
  ASSERT_TRUE(imported.ok()) << imported;
  auto after = local.dense(3)->Read(1);
  ASSERT_TRUE(after.ok());
  for (int64_t i = 0; i < size; ++i) {
    const bool in = i >= offset && i < offset + count;
    ASSERT_EQ(after->value[i], in ? whole->value[i] + 1 : whole->value[i]) << i;
    ASSERT_EQ(after->state[i], in ? 2 * whole->state[i] : whole->state[i]) << i;
    ASSERT_EQ(after->state[size + i], in ? 2 * whole->state[size + i] : whole->state[size + i]);
  }
  EXPECT_EQ(after->steps, 7);
  std::vector<float> x(size), y(size);
  ASSERT_TRUE(local.Wait(local.PullDense(3, 1, absl::MakeSpan(x))).ok());
  ASSERT_TRUE((*remote)->Wait((*remote)->PullDense(3, 1, absl::MakeSpan(y))).ok());
  EXPECT_EQ(x, y);
  DenseSlice c;
  ASSERT_TRUE((*remote)->Wait((*remote)->ExportDense(3, 1, 0, 1, &c)).ok());
  EXPECT_EQ(c.steps, 7);

  // A range outside the block, a slice of the wrong shape: clear errors, nothing written.
  absl::Status outside = (*remote)->Wait((*remote)->ExportDense(3, 1, size - 5, 6, &c));
  EXPECT_EQ(outside.code(), absl::StatusCode::kInvalidArgument) << outside;
  EXPECT_THAT(outside.message(), HasSubstr("70000 floats"));
  DenseSlice bad = a;
  bad.state.pop_back();
  absl::Status shape = (*remote)->Wait((*remote)->ImportDense(3, 1, offset, bad));
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument) << shape;
  EXPECT_FALSE(local.Wait(local.ImportDense(3, 1, size - 10, a)).ok());
  ASSERT_TRUE((*remote)->Wait((*remote)->PullDense(3, 1, absl::MakeSpan(y))).ok());
  EXPECT_EQ(x, y);
}

TEST(GrpcPsTest, AccumulatedPushesCommitLikeTheInProcessClient) {
  auto servers = StartServers(2, "accumulate");
  GrpcPsClientOptions options = ClientOptions(servers);
  options.max_message_bytes = 16 << 10;  // forces batches into many chunks
  auto remote = GrpcPsClient::Connect(options);
  ASSERT_TRUE(remote.ok()) << remote.status();
  InProcessPsClient local(2);
  ASSERT_TRUE((*remote)->CreateSparseTable(0, Sparse(OptimizerKind::kAdam, 0)).ok());
  ASSERT_TRUE(local.CreateSparseTable(0, Sparse(OptimizerKind::kAdam, 0)).ok());
  ASSERT_TRUE((*remote)->CreateDenseTable(3, Dense()).ok());
  ASSERT_TRUE(local.CreateDenseTable(3, Dense()).ok());
  std::mt19937_64 rng(8);
  std::normal_distribution<float> normal;
  std::vector<uint64_t> all;
  for (int step = 0; step < 5; ++step) {
    for (int part : {1, 0}) {
      std::vector<uint64_t> keys(2000);
      for (uint64_t& k : keys) k = rng() % 3000;
      all.insert(all.end(), keys.begin(), keys.end());
      std::vector<float> grads(keys.size() * 8);
      std::vector<double> block(70000);
      for (float& g : grads) g = normal(rng);
      for (double& g : block) g = normal(rng);
      ASSERT_TRUE(local.Wait(local.AccumulateSparse(0, keys, grads, part)).ok());
      ASSERT_TRUE(local.Wait(local.AccumulateDense(3, 1, block, part)).ok());
      ASSERT_TRUE((*remote)->Wait((*remote)->AccumulateSparse(0, keys, grads, part)).ok());
      ASSERT_TRUE((*remote)->Wait((*remote)->AccumulateDense(3, 1, block, part)).ok());
    }
    ASSERT_TRUE(local.Commit().ok());
    ASSERT_TRUE((*remote)->Commit().ok());
  }
  std::vector<float> a(all.size() * 8), b(all.size() * 8), da(70000), db(70000);
  ASSERT_TRUE(local.Wait(local.PullSparse(0, all, absl::MakeSpan(a))).ok());
  ASSERT_TRUE((*remote)->Wait((*remote)->PullSparse(0, all, absl::MakeSpan(b))).ok());
  EXPECT_EQ(a, b);
  ASSERT_TRUE(local.Wait(local.PullDense(3, 1, absl::MakeSpan(da))).ok());
  ASSERT_TRUE((*remote)->Wait((*remote)->PullDense(3, 1, absl::MakeSpan(db))).ok());
  EXPECT_EQ(da, db);
}

// A region's training, as the tests between regions push it: 300 random keys of sparse table 0
// (dim 8) and block 1 (70,000 floats) of dense table 3, drawn from the caller's generator.
struct RegionPushes {
  std::vector<uint64_t> keys;
  std::vector<float> grads, block;
  void To(PsClient* c) const {
    ASSERT_TRUE(c->Wait(c->PushSparse(0, keys, grads)).ok());
    ASSERT_TRUE(c->Wait(c->PushDense(3, 1, block)).ok());
  }
};
RegionPushes DrawRegionPushes(std::mt19937_64& rng, std::normal_distribution<float>& normal) {
  RegionPushes p;
  p.keys.resize(300);
  for (uint64_t& k : p.keys) k = rng() % 1000;
  p.grads.resize(p.keys.size() * 8);
  p.block.resize(70000);
  for (float& g : p.grads) g = normal(rng);
  for (float& g : p.block) g = normal(rng);
  return p;
}

// Between regions: deltas exported over gRPC are the in-process client's, to the bit, and go
// into a region of another number of servers; two regions in lockstep, each adding the other's
// pending parts, commit what one server group holding every part commits.
TEST(GrpcPsTest, RegionsExchangeDeltasAndPartsLikeTheInProcessClient) {
  auto servers = StartServers(2, "regions");
  GrpcPsClientOptions options = ClientOptions(servers);
  options.max_message_bytes = 4 << 10;  // the deltas added in many messages
  auto remote = GrpcPsClient::Connect(options);
  ASSERT_TRUE(remote.ok()) << remote.status();
  PsClient& a = **remote;
  InProcessPsClient reference(2), b(3), all(2);
  const std::vector<PsClient*> clients = {&a, &reference, &b, &all};
  for (PsClient* c : clients) {
    ASSERT_TRUE(c->CreateSparseTable(0, Sparse(OptimizerKind::kAdagrad, 0)).ok());
    ASSERT_TRUE(c->CreateDenseTable(3, Dense()).ok());
  }
  std::vector<uint64_t> keys;
  std::vector<float> deltas;
  EXPECT_THAT(a.ExportDeltas(0, 0, &keys, &deltas).message(), HasSubstr("does not track them"));
  for (PsClient* c : clients) ASSERT_TRUE(c->TrackDeltas().ok());
  std::mt19937_64 rng(4);
  std::normal_distribution<float> normal;
  const RegionPushes pushes = DrawRegionPushes(rng, normal);
  for (PsClient* c : {&a, static_cast<PsClient*>(&reference)}) pushes.To(c);
  std::vector<uint64_t> ref_keys;
  std::vector<float> ref_deltas, dense, ref_dense;
  ASSERT_TRUE(a.ExportDeltas(0, 0, &keys, &deltas).ok());
  ASSERT_TRUE(reference.ExportDeltas(0, 0, &ref_keys, &ref_deltas).ok());
  EXPECT_EQ(keys, ref_keys);
  EXPECT_EQ(deltas, ref_deltas);
  ASSERT_TRUE(a.ExportDenseDeltas(3, 1, 0, &dense).ok());
  ASSERT_TRUE(reference.ExportDenseDeltas(3, 1, 0, &ref_dense).ok());
  EXPECT_EQ(dense.size(), 70000u);
  EXPECT_EQ(dense, ref_dense);
  ASSERT_TRUE(a.ExportDenseDeltas(3, 0, 0, &ref_dense).ok());
  EXPECT_TRUE(ref_dense.empty());  // block 0 never changed
  // Into region b (three servers): its rows move by the deltas, and it has nothing to send.
  ASSERT_TRUE(b.AddDeltas(0, keys, deltas).ok());
  ASSERT_TRUE(b.AddDenseDeltas(3, 1, dense).ok());
  ASSERT_TRUE(a.AddDeltas(0, keys, deltas).ok());  // and over gRPC
  std::vector<float> in_a(keys.size() * 8), in_b(keys.size() * 8), in_ref(keys.size() * 8);
  ASSERT_TRUE(b.Wait(b.PullSparse(0, keys, absl::MakeSpan(in_b))).ok());
  ASSERT_TRUE(reference.Wait(reference.PullSparse(0, keys, absl::MakeSpan(in_ref))).ok());
  ASSERT_TRUE(a.Wait(a.PullSparse(0, keys, absl::MakeSpan(in_a))).ok());
  EXPECT_EQ(in_b, in_ref);  // fresh rows plus their change: the change's rows
  for (size_t i = 0; i < in_a.size(); ++i) EXPECT_EQ(in_a[i], in_ref[i] + deltas[i]) << i;
  std::vector<uint64_t> none;
  ASSERT_TRUE(b.ExportDeltas(0, 0, &none, &deltas).ok());
  EXPECT_TRUE(none.empty());

  // Lockstep, on tables of their own: a holds parts 0 and 1 of a step, b parts 2 and 3; `all`
  // every part.
  for (PsClient* c : {&a, static_cast<PsClient*>(&b), static_cast<PsClient*>(&all)}) {
    ASSERT_TRUE(c->CreateSparseTable(1, Sparse(OptimizerKind::kAdam, 0)).ok());
    ASSERT_TRUE(c->CreateDenseTable(4, Dense()).ok());
  }
  for (int64_t leaf = 0; leaf < 4; ++leaf) {
    std::vector<uint64_t> step(500);
    for (uint64_t& k : step) k = rng() % 2000;
    std::sort(step.begin(), step.end());
    step.erase(std::unique(step.begin(), step.end()), step.end());
    std::vector<float> g(step.size() * 8);
    std::vector<double> d(70000);
    for (float& x : g) x = normal(rng);
    for (double& x : d) x = normal(rng);
    for (PsClient* c : {leaf < 2 ? static_cast<PsClient*>(&a) : &b, static_cast<PsClient*>(&all)}) {
      ASSERT_TRUE(c->Wait(c->AccumulateSparse(1, step, g, static_cast<int>(leaf))).ok());
      ASSERT_TRUE(c->Wait(c->AccumulateDense(4, 1, d, static_cast<int>(leaf))).ok());
    }
  }
  PendingParts from_a, from_b;
  ASSERT_TRUE(a.ExportPending(&from_a).ok());
  ASSERT_TRUE(b.ExportPending(&from_b).ok());
  EXPECT_EQ(from_a.sparse.size(), 2u);  // one entry per part, the servers' keys together
  for (auto [into, parts] : {std::pair{static_cast<PsClient*>(&a), &from_b},
                             std::pair{static_cast<PsClient*>(&b), &from_a}}) {
    for (const PendingParts::Sparse& p : parts->sparse) {
      ASSERT_TRUE(into->Wait(into->AccumulateSparse(p.table, p.keys, p.grads, p.part)).ok());
    }
    for (const PendingParts::Dense& p : parts->dense) {
      ASSERT_TRUE(into->Wait(into->AccumulateDense(p.table, p.block, p.grads, p.part)).ok());
    }
  }
  for (PsClient* c : {&a, static_cast<PsClient*>(&b), static_cast<PsClient*>(&all)}) {
    ASSERT_TRUE(c->Commit().ok());
  }
  std::vector<uint64_t> every(2000);
  std::iota(every.begin(), every.end(), 0);
  std::vector<float> ra(every.size() * 8), rb(every.size() * 8), rall(every.size() * 8);
  ASSERT_TRUE(a.Wait(a.PullSparse(1, every, absl::MakeSpan(ra))).ok());
  ASSERT_TRUE(b.Wait(b.PullSparse(1, every, absl::MakeSpan(rb))).ok());
  ASSERT_TRUE(all.Wait(all.PullSparse(1, every, absl::MakeSpan(rall))).ok());
  EXPECT_EQ(ra, rall);
  EXPECT_EQ(rb, rall);
  std::vector<float> da(70000), dall(70000);
  ASSERT_TRUE(a.Wait(a.PullDense(4, 1, absl::MakeSpan(da))).ok());
  ASSERT_TRUE(all.Wait(all.PullDense(4, 1, absl::MakeSpan(dall))).ok());
  EXPECT_EQ(da, dall);
  // Without b's parts, a's commit would differ (the test can fail).
  InProcessPsClient half(2);
  ASSERT_TRUE(half.CreateSparseTable(1, Sparse(OptimizerKind::kAdam, 0)).ok());
  for (const PendingParts::Sparse& p : from_a.sparse) {
    ASSERT_TRUE(half.Wait(half.AccumulateSparse(p.table, p.keys, p.grads, p.part)).ok());
  }
  ASSERT_TRUE(half.Commit().ok());
  std::vector<float> rhalf(every.size() * 8);
  ASSERT_TRUE(half.Wait(half.PullSparse(1, every, absl::MakeSpan(rhalf))).ok());
  EXPECT_NE(rhalf, rall);
}

// A GEO window over gRPC: the export is the in-process client's and moves nothing (asked twice,
// the same answer); the merge, in many messages, takes the rows and the block where the
// in-process client's takes them, to the bit; what is left to send is the same.
TEST(GrpcPsTest, AWindowOverGrpcIsTheInProcessClients) {
  auto servers = StartServers(2, "window");
  GrpcPsClientOptions options = ClientOptions(servers);
  options.max_message_bytes = 4 << 10;  // the merge applied in many messages
  auto remote = GrpcPsClient::Connect(options);
  ASSERT_TRUE(remote.ok()) << remote.status();
  PsClient& a = **remote;
  InProcessPsClient reference(2);
  const std::vector<PsClient*> clients = {&a, &reference};
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  const RegionPushes pushes = DrawRegionPushes(rng, normal);
  for (PsClient* c : clients) {
    ASSERT_TRUE(c->CreateSparseTable(0, Sparse(OptimizerKind::kAdagrad, 0)).ok());
    ASSERT_TRUE(c->CreateDenseTable(3, Dense()).ok());
    ASSERT_TRUE(c->TrackDeltas().ok());
    pushes.To(c);
  }
  std::vector<uint64_t> keys, again, ref_keys;
  std::vector<float> deltas, twice, ref_deltas, dense, ref_dense;
  ASSERT_TRUE(a.ExportWindow(0, 0, &keys, &deltas).ok());
  ASSERT_TRUE(a.ExportWindow(0, 0, &again, &twice).ok());
  ASSERT_TRUE(reference.ExportWindow(0, 0, &ref_keys, &ref_deltas).ok());
  EXPECT_EQ(keys, again);
  EXPECT_EQ(deltas, twice);
  EXPECT_EQ(keys, ref_keys);
  EXPECT_EQ(deltas, ref_deltas);
  ASSERT_TRUE(a.ExportDenseWindow(3, 1, 0, &dense).ok());
  ASSERT_TRUE(reference.ExportDenseWindow(3, 1, 0, &ref_dense).ok());
  ASSERT_EQ(dense.size(), 70000u);
  EXPECT_EQ(dense, ref_dense);
  // The merge of this region's deltas with another's (here: half of them), keys sorted.
  std::vector<size_t> order(keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t x, size_t y) { return keys[x] < keys[y]; });
  std::vector<uint64_t> sorted;
  std::vector<float> own, merged;
  for (size_t i : order) {
    sorted.push_back(keys[i]);
    for (int d = 0; d < 8; ++d) {
      own.push_back(deltas[i * 8 + d]);
      merged.push_back(0.5f * deltas[i * 8 + d] + 0.125f);
    }
  }
  std::vector<float> dense_merged(dense.size());
  for (size_t i = 0; i < dense.size(); ++i) dense_merged[i] = 0.75f * dense[i];
  for (PsClient* c : clients) {
    ASSERT_TRUE(c->ApplyWindow(0, sorted, merged, own).ok());
    ASSERT_TRUE(c->ApplyDenseWindow(3, 1, dense_merged, dense).ok());
  }
  EXPECT_EQ(a.ApplyWindow(0, sorted, merged, std::vector<float>(own.size() - 1)).code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<float> in_a(sorted.size() * 8), in_ref(sorted.size() * 8), block_a(70000),
      block_ref(70000);
  ASSERT_TRUE(a.Wait(a.PullSparse(0, sorted, absl::MakeSpan(in_a))).ok());
  ASSERT_TRUE(reference.Wait(reference.PullSparse(0, sorted, absl::MakeSpan(in_ref))).ok());
  EXPECT_EQ(in_a, in_ref);
  ASSERT_TRUE(a.Wait(a.PullDense(3, 1, absl::MakeSpan(block_a))).ok());
  ASSERT_TRUE(reference.Wait(reference.PullDense(3, 1, absl::MakeSpan(block_ref))).ok());
  EXPECT_EQ(block_a, block_ref);
  keys.clear();
  deltas.clear();
  ref_keys.clear();
  ref_deltas.clear();
  ASSERT_TRUE(a.ExportWindow(0, 0, &keys, &deltas).ok());
  ASSERT_TRUE(reference.ExportWindow(0, 0, &ref_keys, &ref_deltas).ok());
  EXPECT_EQ(keys, ref_keys);
  EXPECT_EQ(deltas, ref_deltas);
  EXPECT_LT(keys.size(), sorted.size());  // most rows caught up with their base
}

TEST(GrpcPsTest, CallsWithoutTheTokenAreRefused) {
  auto servers = StartServers(1, "auth");
  GrpcPsClientOptions options = ClientOptions(servers);
  for (const std::string token : {"", "wrong"}) {
    options.token = token;
    auto client = GrpcPsClient::Connect(options);
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
    EXPECT_THAT(client.status().message(), HasSubstr("ps shard 0 (" + servers[0]->address()));
  }
  EXPECT_EQ(servers[0]->counters().refused, 2);
  options.token = kToken;
  EXPECT_TRUE(GrpcPsClient::Connect(options).ok());
}

TEST(GrpcPsTest, MisorderedServersAndBadCallsAreClearErrors) {
  auto servers = StartServers(2, "order");
  GrpcPsClientOptions options = ClientOptions(servers);
  std::swap(options.servers[0], options.servers[1]);
  auto swapped = GrpcPsClient::Connect(options);
  ASSERT_FALSE(swapped.ok());
  EXPECT_THAT(swapped.status().message(), HasSubstr("but the client has it as shard"));

  std::swap(options.servers[0], options.servers[1]);
  auto client = GrpcPsClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->CreateSparseTable(0, Sparse(OptimizerKind::kSgd, 0)).ok());
  // Creating again with the same options is a no-op; with others, an error.
  EXPECT_TRUE((*client)->CreateSparseTable(0, Sparse(OptimizerKind::kSgd, 0)).ok());
  absl::Status again = (*client)->CreateSparseTable(0, Sparse(OptimizerKind::kAdam, 0));
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;

  std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> wrong_dim(3 * 4);
  absl::Status status = (*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(wrong_dim)));
  EXPECT_THAT(status.message(), HasSubstr("4 floats per key but the table's rows have 8"));
  std::vector<float> ragged(7);
  status = (*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(ragged)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> row(3 * 8);
  status = (*client)->Wait((*client)->PullSparse(5, keys, absl::MakeSpan(row)));
  EXPECT_THAT(status.message(), HasSubstr("no sparse table 5"));
  EXPECT_EQ((*client)->Wait(12345).code(), absl::StatusCode::kNotFound);

  // Dense blocks in one call: a block the table lacks, buffers that do not match the blocks.
  ASSERT_TRUE((*client)->CreateDenseTable(3, Dense()).ok());
  const auto wait_one = [&](const std::vector<Ticket>& tickets) {
    EXPECT_EQ(tickets.size(), 1u);
    return tickets.empty() ? absl::InternalError("no ticket") : (*client)->Wait(tickets[0]);
  };
  std::vector<float> small(3), large(70000), before(70000), after(70000);
  ASSERT_TRUE((*client)->Wait((*client)->PullDense(3, 1, absl::MakeSpan(before))).ok());
  const auto pull = [&](int a, int b) {
    return std::vector<DensePull>{{a, absl::MakeSpan(small)}, {b, absl::MakeSpan(large)}};
  };
  status = wait_one((*client)->PullDenseBlocks(3, pull(0, 7)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("dense table 3 has no block 7 (it has 2)"));
  status = wait_one((*client)->PullDenseBlocks(3, pull(1, 1)));
  EXPECT_THAT(status.message(), HasSubstr("dense table 3: block 1 named twice in one call"));
  status = wait_one((*client)->PullDenseBlocks(
      3, {{0, absl::MakeSpan(small)}, {1, absl::MakeSpan(large)}, {0, absl::MakeSpan(small)}}));
  EXPECT_THAT(status.message(), HasSubstr("dense table 3: a call names 3 blocks, the table has 2"));
  // Buffers swapped between the blocks: the total is right, each block's size is not.
  status = wait_one((*client)->PullDenseBlocks(3, pull(1, 0)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("dense table 3 block 1 has 70000 floats, the call passed 3"));
  std::vector<float> short_block(69999);
  status = wait_one((*client)->PullDenseBlocks(
      3, {{0, absl::MakeSpan(small)}, {1, absl::MakeSpan(short_block)}}));
  EXPECT_THAT(status.message(),
              HasSubstr("dense table 3 block 1 has 70000 floats, the call passed 69999"));
  // A push whose gradients do not fit its blocks applies nothing, not even to the block it fits;
  // swapped gradients likewise.
  status = wait_one((*client)->PushDenseBlocks(
      3, {{1, absl::MakeConstSpan(large)}, {0, absl::MakeConstSpan(small.data(), 2)}}));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("dense table 3 block 0 has 3 floats, the call passed 2"));
  status = wait_one((*client)->PushDenseBlocks(
      3, {{0, absl::MakeConstSpan(large)}, {1, absl::MakeConstSpan(small)}}));
  EXPECT_THAT(status.message(),
              HasSubstr("dense table 3 block 0 has 3 floats, the call passed 70000"));
  ASSERT_TRUE((*client)->Wait((*client)->PullDense(3, 1, absl::MakeSpan(after))).ok());
  EXPECT_EQ(before, after);
}

TEST(GrpcPsTest, ARetriedPushIsAppliedOnce) {
  auto servers = StartServers(1, "dedup");
  auto client = GrpcPsClient::Connect(ClientOptions(servers));
  ASSERT_TRUE(client.ok());
  SparseTableOptions o = Sparse(OptimizerKind::kSgd, 0);
  o.optimizer.learning_rate = 1;
  ASSERT_TRUE((*client)->CreateSparseTable(0, o).ok());
  std::vector<uint64_t> key = {77};
  std::vector<float> before(8), after(8);
  ASSERT_TRUE((*client)->Wait((*client)->PullSparse(0, key, absl::MakeSpan(before))).ok());

  // The same push id twice, as a client that lost the first answer would send
  // it.
  auto stub = ParameterServer::NewStub(
      grpc::CreateChannel(servers[0]->address(), grpc::InsecureChannelCredentials()));
  PushSparseRequest request;
  request.set_table(0);
  *request.mutable_keys() = internal::ToBytes<uint64_t>(absl::MakeConstSpan(key));
  std::vector<float> grads(8, 1.0f);
  *request.mutable_grads() = internal::ToBytes<float>(absl::MakeConstSpan(grads));
  request.mutable_id()->set_client(42);
  request.mutable_id()->set_sequence(1);
  for (int attempt = 0; attempt < 2; ++attempt) {
    grpc::ClientContext context;
    context.AddMetadata(base::kTokenHeader, kToken);
    PushReply reply;
    ASSERT_TRUE(stub->PushSparse(&context, request, &reply).ok());
  }
  ASSERT_TRUE((*client)->Wait((*client)->PullSparse(0, key, absl::MakeSpan(after))).ok());
  for (int d = 0; d < 8; ++d) EXPECT_FLOAT_EQ(after[d], before[d] - 1) << d;
  EXPECT_EQ(servers[0]->counters().duplicate_pushes, 1);
}

// The client counts each method's messages, as serialized (rpc::ChannelOptions::bytes): a pull
// of 1,000 keys sends their 8,000 bytes and gets 1,000 rows of 8 floats back; a dense block of
// 70,000 floats streamed in several chunks comes back whole; a push sends keys and gradients.
TEST(GrpcPsTest, TheClientCountsWhatEachMethodSentAndReceived) {
  auto servers = StartServers(1, "bytes");
  auto client = GrpcPsClient::Connect(ClientOptions(servers));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->CreateSparseTable(0, Sparse(OptimizerKind::kSgd, 0)).ok());
  ASSERT_TRUE((*client)->CreateDenseTable(1, Dense()).ok());
  std::vector<uint64_t> keys(1000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = 3 * i + 1;
  std::vector<float> rows(keys.size() * 8), block(70000), grads(keys.size() * 8, 0.5f);
  ASSERT_TRUE((*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(rows))).ok());
  ASSERT_TRUE((*client)->Wait((*client)->PushSparse(0, keys, grads)).ok());
  ASSERT_TRUE((*client)->Wait((*client)->PullDense(1, 1, absl::MakeSpan(block))).ok());
  std::map<std::string, base::MethodStats> by_method;
  for (const base::MethodStats& m : (*client)->CallStats()) by_method[m.method] = m;
  ASSERT_TRUE(by_method.count("PullSparse") && by_method.count("PushSparse") &&
              by_method.count("PullDense"));
  // Each message's own fields and a few bytes of tags and lengths.
  const auto near = [](int64_t got, int64_t payload) {
    return got >= payload && got <= payload + 64;
  };
  EXPECT_PRED2(near, by_method["PullSparse"].sent_bytes, 8000);
  EXPECT_PRED2(near, by_method["PullSparse"].received_bytes, 8000 * 4);
  EXPECT_PRED2(near, by_method["PushSparse"].sent_bytes, 8000 + 8000 * 4);
  EXPECT_PRED2(near, by_method["PullDense"].received_bytes, 70000 * 4);
  EXPECT_LE(by_method["PullDense"].sent_bytes, 64);
  // A client's counts stay its own.
  auto other = GrpcPsClient::Connect(ClientOptions(servers));
  ASSERT_TRUE(other.ok());
  for (const base::MethodStats& m : (*other)->CallStats()) {
    EXPECT_TRUE(m.method == "Info" || m.sent_bytes + m.received_bytes < 1024) << m.method;
  }
}

// A client cannot make a server allocate or hold what it will refuse.
TEST(GrpcPsTest, ServersRefuseWhatTheyWouldNotHoldBeforeHoldingIt) {
  auto servers = StartServers(1, "limits");
  auto stub = ParameterServer::NewStub(
      grpc::CreateChannel(servers[0]->address(), grpc::InsecureChannelCredentials()));
  auto create = [&](const CreateTableRequest& request) {
    grpc::ClientContext context;
    context.AddMetadata(base::kTokenHeader, kToken);
    CreateTableReply reply;
    return stub->CreateTable(&context, request, &reply);
  };
  CreateTableRequest wide;
  wide.set_table(0);
  wide.mutable_sparse()->set_dim(1 << 28);
  grpc::Status s = create(wide);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("dim 268,435,456 is over the limit of 4,096"));
  CreateTableRequest shards;
  shards.set_table(0);
  shards.mutable_sparse()->set_dim(8);
  shards.mutable_sparse()->set_lock_shards(100000000);
  EXPECT_THAT(create(shards).error_message(),
              HasSubstr("lock_shards 100,000,000 is over the limit"));
  CreateTableRequest huge;
  huge.set_table(0);
  huge.mutable_dense()->add_block_sizes(int64_t{1} << 40);
  s = create(huge);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("is over the limit of 1,073,741,824"));

  auto push = [&](int table, int chunks) {
    grpc::ClientContext context;
    context.AddMetadata(base::kTokenHeader, kToken);
    PushReply reply;
    auto writer = stub->PushDense(&context, &reply);
    PushDenseChunk chunk;
    chunk.set_table(table);
    chunk.set_block(0);
    chunk.set_grads(std::string(4 << 20, '\0'));
    for (int i = 0; i < chunks && writer->Write(chunk); ++i) {
    }
    writer->WritesDone();
    return writer->Finish();
  };
  // A table that does not exist: refused at the first chunk.
  s = push(7, 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("no dense table 7"));
  // More gradient bytes than the block has floats: refused once it is more.
  auto client = GrpcPsClient::Connect(ClientOptions(servers));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->CreateDenseTable(0, Dense()).ok());
  s = push(0, 100);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("more than 12 bytes of gradients"));
}

// One limit over everything a server holds: resident rows, dense tables, pending updates. Past it,
// calls that would add are refused with the limit named, and the server goes on answering.
TEST(GrpcPsTest, AServerStaysWithinItsMemoryLimitAndKeepsServing) {
  PsServerOptions options;
  options.data_dir = DataDir("memory_limit");
  options.token = kToken;
  options.memory_limit_bytes = 1 << 20;
  auto server = PsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<std::unique_ptr<PsServer>> servers;
  servers.push_back(std::move(*server));
  GrpcPsClientOptions client_options = ClientOptions(servers);
  client_options.max_attempts = 1;
  auto client = GrpcPsClient::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  // A dense table beyond the limit is refused before it is allocated: 300,000 floats with Adam's
  // two state floats each are 3.4 MiB.
  DenseTableOptions big;
  big.block_sizes = {300000};
  big.optimizer.kind = OptimizerKind::kAdam;
  absl::Status status = (*client)->CreateDenseTable(1, big);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("memory limit of 1.0 MiB is reached"));
  EXPECT_THAT(status.message(), HasSubstr("the call adds 3.4 MiB"));

  ASSERT_TRUE((*client)->CreateSparseTable(0, Sparse(OptimizerKind::kAdagrad, 0)).ok());
  std::vector<float> values(1000 * 8);
  int64_t pulled = 0;
  for (int batch = 0; batch < 100; ++batch) {
    std::vector<uint64_t> keys(1000);
    std::iota(keys.begin(), keys.end(), uint64_t{1000} * batch);
    status = (*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(values)));
    if (!status.ok()) break;
    pulled += 1000;
    absl::SleepFor(absl::Milliseconds(60));  // past the server's 50 ms between sums
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_THAT(status.message(), HasSubstr("memory limit of 1.0 MiB is reached (its tables hold"));
  // It stopped within one call of the limit.
  const ShardStats stats = servers[0]->stats();
  ASSERT_EQ(stats.sparse.size(), 1u);
  const int64_t row_bytes =
      stats.sparse[0].second.memory_bytes / stats.sparse[0].second.memory_rows;
  EXPECT_GE(stats.sparse[0].second.memory_bytes, (1 << 20) - 1000 * row_bytes);
  EXPECT_LE(stats.sparse[0].second.memory_bytes, (1 << 20) + 1000 * row_bytes);
  EXPECT_EQ(stats.sparse[0].second.memory_rows, pulled);
  // Still serving what adds nothing.
  auto shard_stats = (*client)->Stats();
  ASSERT_TRUE(shard_stats.ok()) << shard_stats.status();
  EXPECT_EQ((*shard_stats)[0].sparse[0].second.memory_rows, pulled);
}

TEST(GrpcPsTest, CheckpointsRoundTripThroughTheService) {
  auto servers = StartServers(2, "ckpt");
  auto client = GrpcPsClient::Connect(ClientOptions(servers));
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->CreateSparseTable(0, Sparse(OptimizerKind::kAdam, 16 << 10)).ok());
  ASSERT_TRUE((*client)->CreateDenseTable(1, Dense()).ok());
  std::vector<uint64_t> keys(2000);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i * 7919;
  std::vector<float> grads(keys.size() * 8, 0.5f), saved(keys.size() * 8), now(saved.size());
  std::vector<float> dense_saved(Dense().block_sizes[1]), dense_now(dense_saved.size());
  std::vector<float> dense_grads(dense_saved.size(), 0.25f);
  auto& c = **client;
  ASSERT_TRUE(c.Wait(c.PushSparse(0, keys, grads)).ok());
  ASSERT_TRUE(c.Wait(c.PushDense(1, 1, dense_grads)).ok());
  ASSERT_TRUE(c.Wait(c.PullSparse(0, keys, absl::MakeSpan(saved))).ok());
  ASSERT_TRUE(c.Wait(c.PullDense(1, 1, absl::MakeSpan(dense_saved))).ok());
  ASSERT_TRUE(c.SaveCheckpoint(10).ok());

  ASSERT_TRUE(c.Wait(c.PushSparse(0, keys, grads)).ok());
  ASSERT_TRUE(c.Wait(c.PushDense(1, 1, dense_grads)).ok());
  ASSERT_TRUE(c.Wait(c.PullSparse(0, keys, absl::MakeSpan(now))).ok());
  ASSERT_NE(now, saved);

  auto step = c.LoadCheckpoint();
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 10);
  ASSERT_TRUE(c.Wait(c.PullSparse(0, keys, absl::MakeSpan(now))).ok());
  EXPECT_EQ(now, saved);
  ASSERT_TRUE(c.Wait(c.PullDense(1, 1, absl::MakeSpan(dense_now))).ok());
  EXPECT_EQ(dense_now, dense_saved);
}

TEST(GrpcPsTest, AStoppedServerGivesAClearErrorNotAHang) {
  auto servers = StartServers(2, "stopped");
  GrpcPsClientOptions options = ClientOptions(servers);
  options.rpc_timeout = absl::Seconds(5);
  auto client = GrpcPsClient::Connect(options);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->CreateSparseTable(0, Sparse(OptimizerKind::kSgd, 0)).ok());
  servers[1]->Shutdown(absl::ZeroDuration());
  std::vector<uint64_t> keys(100);
  for (size_t i = 0; i < keys.size(); ++i) keys[i] = i;
  std::vector<float> values(keys.size() * 8);
  const absl::Time start = absl::Now();
  absl::Status status = (*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(values)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("ps shard 1 (" + servers[1]->address() + ")"));
  EXPECT_THAT(status.message(), HasSubstr("after 4 attempts"));
}

TEST(GrpcPsTest, ServerOptionsAreChecked) {
  PsServerOptions options;
  options.data_dir = DataDir("options");
  options.host = "0.0.0.0";
  auto open = PsServer::Start(options);
  EXPECT_THAT(open.status().message(), HasSubstr("without a token"));
  options.host = "127.0.0.1";
  options.shard = 2;
  options.num_shards = 2;
  EXPECT_EQ(PsServer::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.shard = 0;
  auto first = PsServer::Start(options);
  ASSERT_TRUE(first.ok());
  options.port = (*first)->port();
  auto second = PsServer::Start(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat(":", options.port)));
  // A certificate or key that is not PEM is said to be so, not "address in use".
  options.port = 0;
  options.tls_cert_pem = "garbage";
  options.tls_key_pem = "garbage";
  auto garbage = PsServer::Start(options);
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(garbage.status().message(), HasSubstr("the TLS certificate is not PEM"));
  options.tls_cert_pem = "-----BEGIN CERTIFICATE-----\nxx\n-----END CERTIFICATE-----\n";
  EXPECT_THAT(PsServer::Start(options).status().message(),
              HasSubstr("the TLS key is not a PEM private key"));
}

TEST(GrpcPsTest, TlsServersSpeakOnlyTls) {
  // A self-signed certificate for 127.0.0.1, made for this test.
  const std::string dir = DataDir("tls_certs");
  std::filesystem::create_directories(dir);
  const std::string command =
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost "
      "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem 2>" + dir + "/openssl.log";
  ASSERT_EQ(std::system(command.c_str()), 0) << *base::ReadTextFile(dir + "/openssl.log");
  auto cert = base::ReadTextFile(dir + "/cert.pem");
  auto key = base::ReadTextFile(dir + "/key.pem");
  ASSERT_TRUE(cert.ok() && key.ok());

  PsServerOptions options;
  options.data_dir = DataDir("tls");
  options.token = kToken;
  options.tls_cert_pem = *cert;
  options.tls_key_pem = *key;
  auto server = PsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();

  GrpcPsClientOptions client_options;
  client_options.servers = {(*server)->address()};
  client_options.token = kToken;
  client_options.connect_timeout = absl::Seconds(2);
  client_options.tls_ca_pem = *cert;
  client_options.tls_cert_pem = *cert;
  client_options.tls_key_pem = *key;
  auto client = GrpcPsClient::Connect(client_options);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->CreateSparseTable(0, Sparse(OptimizerKind::kSgd, 0)).ok());
  std::vector<uint64_t> keys = {1, 2};
  std::vector<float> values(16);
  EXPECT_TRUE((*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(values))).ok());

  // Mutual TLS: a client that trusts the server but shows no certificate, or another one, gets
  // nowhere, token or not.
  client_options.tls_cert_pem.clear();
  client_options.tls_key_pem.clear();
  EXPECT_FALSE(GrpcPsClient::Connect(client_options).ok());
  absl::StatusOr<heterps::rpc::JobTls> stranger = heterps::rpc::NewJobTls();
  ASSERT_TRUE(stranger.ok());
  client_options.tls_cert_pem = stranger->cert_pem;
  client_options.tls_key_pem = stranger->key_pem;
  EXPECT_FALSE(GrpcPsClient::Connect(client_options).ok());

  client_options.tls_ca_pem.clear();  // plaintext to a TLS server: no connection
  auto plaintext = GrpcPsClient::Connect(client_options);
  ASSERT_FALSE(plaintext.ok());
  EXPECT_THAT(plaintext.status().message(), HasSubstr("not reachable within 2s"));
}

// A job's own certificate (rpc::NewJobTls): trusted by the job's name, not the address dialled;
// plaintext, another job's certificate and a check against the address's host get nowhere.
TEST(GrpcPsTest, AJobsOwnCertificateLetsInItsRolesAndNoOneElse) {
  absl::StatusOr<heterps::rpc::JobTls> tls = heterps::rpc::NewJobTls();
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_THAT(tls->cert_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
  EXPECT_THAT(tls->key_pem, HasSubstr("PRIVATE KEY-----"));
  absl::StatusOr<heterps::rpc::JobTls> other = heterps::rpc::NewJobTls();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->cert_pem, tls->cert_pem);  // one per job

  PsServerOptions options;
  options.data_dir = DataDir("job_tls");
  options.token = kToken;
  options.tls_cert_pem = tls->cert_pem;
  options.tls_key_pem = tls->key_pem;
  auto server = PsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  auto connect = [&](const std::string& address, const heterps::rpc::ChannelOptions& channel) {
    GrpcPsClientOptions o;
    o.servers = {address};
    o.token = kToken;
    o.connect_timeout = absl::Seconds(1);
    o.tls_ca_pem = channel.tls_ca_pem;
    o.tls_target_name = channel.tls_target_name;
    o.tls_cert_pem = channel.tls_cert_pem;
    o.tls_key_pem = channel.tls_key_pem;
    return GrpcPsClient::Connect(o);
  };
  auto client = connect((*server)->address(), heterps::rpc::JobChannel(*tls));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->CreateSparseTable(0, Sparse(OptimizerKind::kSgd, 0)).ok());
  std::vector<uint64_t> keys = {1, 2};
  std::vector<float> values(16);
  EXPECT_TRUE((*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(values))).ok());
  // (Dialled by address only: resolving "localhost" goes through c-ares, which leaks 10 bytes
  // that LeakSanitizer reports in the sanitizer run.)
  EXPECT_FALSE(connect((*server)->address(), heterps::rpc::ChannelOptions()).ok());
  EXPECT_FALSE(connect((*server)->address(), heterps::rpc::JobChannel(*other)).ok());
  heterps::rpc::ChannelOptions by_host;  // trusted, but checked against 127.0.0.1
  by_host.tls_ca_pem = tls->cert_pem;
  EXPECT_FALSE(connect((*server)->address(), by_host).ok());
  // Trusting the job's certificate is not enough: a client must show it (mutual TLS). Neither
  // no certificate nor another job's, which the server cannot chain to its own, gets in.
  heterps::rpc::ChannelOptions anonymous = heterps::rpc::JobChannel(*tls);
  anonymous.tls_cert_pem.clear();
  anonymous.tls_key_pem.clear();
  EXPECT_FALSE(connect((*server)->address(), anonymous).ok());
  heterps::rpc::ChannelOptions impostor = heterps::rpc::JobChannel(*tls);
  impostor.tls_cert_pem = other->cert_pem;
  impostor.tls_key_pem = other->key_pem;
  EXPECT_FALSE(connect((*server)->address(), impostor).ok());
}

}  // namespace
}  // namespace heterps::ps::rpc
