// Deltas between regions (sparse_table.h, dense_table.h: TrackDeltas, ExportDeltas, AddDeltas,
// and a GEO window's ExportWindow and ApplyWindow) against their definitions worked out here from
// the tables' own values, and pending parts
// exported from one server and added to another (pending.h): the commit of the whole step, to the
// bit.
#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/block_tree.h"
#include "heterps/ps/cold_store.h"
#include "heterps/ps/dense_table.h"
#include "heterps/ps/pending.h"
#include "heterps/ps/sparse_table.h"

namespace heterps::ps {
namespace {

constexpr int kDim = 4;

std::unique_ptr<SparseTable> Table(int64_t budget = 0) {
  SparseTableOptions o;
  o.dim = kDim;
  o.optimizer = {OptimizerKind::kAdagrad, 0.1f};
  o.seed = 3;
  o.init_range = 0.5f;
  o.lock_shards = 4;
  o.memory_budget_bytes = budget;
  auto t = SparseTable::Create(o, budget > 0 ? std::make_unique<MemoryColdStore>() : nullptr);
  EXPECT_TRUE(t.ok()) << t.status();
  return std::move(*t);
}

std::vector<float> Value(SparseTable& t, uint64_t key) {
  std::vector<float> v(kDim);
  EXPECT_TRUE(t.Pull({key}, absl::MakeSpan(v)).ok());
  return v;
}

TEST(SparseDeltasTest, ChangedRowsSendTheirChangeAndUntouchedOnesNothing) {
  auto t = Table();
  std::vector<float> out(5 * kDim);
  ASSERT_TRUE(t->Pull({1, 2, 3, 4, 5}, absl::MakeSpan(out)).ok());  // before tracking
  std::vector<uint64_t> keys;
  std::vector<float> deltas;
  EXPECT_EQ(t->ExportDeltas(0, &keys, &deltas).code(), absl::StatusCode::kFailedPrecondition);
  t->TrackDeltas();
  ASSERT_TRUE(t->Pull({6}, absl::MakeSpan(out.data(), kDim)).ok());  // created: no change
  ASSERT_TRUE(t->Push({3, 1, 3, 6}, std::vector<float>(4 * kDim, 0.5f)).ok());
  EXPECT_EQ(t->tracked_rows(), 3);
  // More rows than one answer may carry: refused before any base moves.
  EXPECT_EQ(t->ExportDeltas(0, &keys, &deltas, /*max_rows=*/2).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(keys.empty());  // nothing appended
  EXPECT_EQ(t->tracked_rows(), 3);
  ASSERT_TRUE(t->ExportDeltas(0, &keys, &deltas).ok());
  EXPECT_EQ(keys, (std::vector<uint64_t>{1, 3, 6}));
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float> now = Value(*t, keys[i]), was = t->InitialValue(keys[i]);
    for (int d = 0; d < kDim; ++d) EXPECT_EQ(deltas[i * kDim + d], now[d] - was[d]) << keys[i];
  }
  // Sent: nothing more to send until the rows change again (but rounding residuals).
  const int64_t left = t->tracked_rows();
  keys.clear();
  deltas.clear();
  ASSERT_TRUE(t->ExportDeltas(0.5f, &keys, &deltas).ok());
  EXPECT_TRUE(keys.empty());
  EXPECT_EQ(t->tracked_rows(), left);
}

// A row below the threshold keeps its change; windows of random pushes, some rows sent and some
// not: what was sent plus what is left is every row's whole change.
TEST(SparseDeltasTest, NothingIsLostBelowTheThreshold) {
  auto t = Table();
  t->TrackDeltas();
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> grad(-1, 1);
  std::map<uint64_t, std::vector<double>> sent;
  int below = 0;
  for (int window = 0; window < 20; ++window) {
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    for (int i = 0; i < 30; ++i) {
      keys.push_back(rng() % 50);
      // Some rows change a little (1e-3 of 0.1's rate), some a lot.
      const float scale = keys.back() % 2 ? 1.0f : 1e-3f;
      for (int d = 0; d < kDim; ++d) grads.push_back(scale * grad(rng));
    }
    ASSERT_TRUE(t->Push(keys, grads).ok());
    std::vector<uint64_t> out;
    std::vector<float> deltas;
    ASSERT_TRUE(t->ExportDeltas(0.05f, &out, &deltas).ok());
    below += static_cast<int>(t->tracked_rows());
    for (size_t i = 0; i < out.size(); ++i) {
      auto& s = sent[out[i]];
      s.resize(kDim, 0.0);
      for (int d = 0; d < kDim; ++d) s[d] += deltas[i * kDim + d];
    }
  }
  EXPECT_GT(below, 0);  // the threshold held some back
  // The flush: every change left.
  for (int flush = 0; flush < 3; ++flush) {
    std::vector<uint64_t> out;
    std::vector<float> deltas;
    ASSERT_TRUE(t->ExportDeltas(0, &out, &deltas).ok());
    for (size_t i = 0; i < out.size(); ++i) {
      auto& s = sent[out[i]];
      s.resize(kDim, 0.0);
      for (int d = 0; d < kDim; ++d) s[d] += deltas[i * kDim + d];
    }
  }
  ASSERT_FALSE(sent.empty());
  for (const auto& [key, s] : sent) {
    const std::vector<float> now = Value(*t, key), was = t->InitialValue(key);
    for (int d = 0; d < kDim; ++d) {
      EXPECT_NEAR(was[d] + s[d], now[d], 1e-6) << "key " << key << " element " << d;
    }
  }
}

// Others' deltas move the row and its base together: its own change stays to be sent, and a row
// that only received is not tracked (a sync is not a change of this region's).
TEST(SparseDeltasTest, AddedDeltasAreNotSentBack) {
  auto t = Table();
  t->TrackDeltas();
  ASSERT_TRUE(t->Push({1}, std::vector<float>(kDim, 1.0f)).ok());
  const std::vector<float> before = Value(*t, 1), init1 = t->InitialValue(1);
  const std::vector<float> add = {0.25f, -0.5f, 1.0f, 0.0f};
  std::vector<float> thrice;
  for (int i = 0; i < 3; ++i) thrice.insert(thrice.end(), add.begin(), add.end());
  ASSERT_TRUE(t->AddDeltas({1, 2, 2}, thrice).ok());
  EXPECT_EQ(t->AddDeltas({2}, std::vector<float>(kDim - 1)).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<float> after1 = Value(*t, 1), after2 = Value(*t, 2), init2 = t->InitialValue(2);
  for (int d = 0; d < kDim; ++d) {
    EXPECT_EQ(after1[d], before[d] + add[d]);
    EXPECT_EQ(after2[d], (init2[d] + add[d]) + add[d]);
  }
  EXPECT_EQ(t->tracked_rows(), 1);
  std::vector<uint64_t> keys;
  std::vector<float> deltas;
  ASSERT_TRUE(t->ExportDeltas(0, &keys, &deltas).ok());
  ASSERT_EQ(keys, std::vector<uint64_t>{1});
  for (int d = 0; d < kDim; ++d) {
    EXPECT_EQ(deltas[d], after1[d] - (init1[d] + add[d]));
    EXPECT_NEAR(deltas[d], before[d] - init1[d], 1e-6);
  }
}

// An import (a GPU tier's write-back) changes rows too: resident, absent and spilled to the cold
// store; Clear (a checkpoint's load) forgets every base.
TEST(SparseDeltasTest, ImportsAndSpilledRowsAreTracked) {
  auto t = Table(/*budget=*/1);  // every row spills
  t->TrackDeltas();
  std::vector<float> v(kDim);
  ASSERT_TRUE(t->Pull({10}, absl::MakeSpan(v)).ok());
  const std::vector<float> was10 = Value(*t, 10), was11 = t->InitialValue(11);
  RowBatch rows;
  rows.values = {1, 2, 3, 4, 5, 6, 7, 8};
  rows.state.assign(2 * kDim, 0.5f);
  rows.steps = {3, 3};
  ASSERT_TRUE(t->Import({10, 11}, rows).ok());
  ASSERT_TRUE(t->Push({12}, std::vector<float>(kDim, 1.0f)).ok());
  const std::vector<float> now12 = Value(*t, 12), was12 = t->InitialValue(12);
  std::vector<float> three(3 * kDim);
  ASSERT_TRUE(t->Pull({20, 21, 22}, absl::MakeSpan(three)).ok());
  EXPECT_GT(t->Stats().cold_rows, 0);
  std::vector<uint64_t> keys;
  std::vector<float> deltas;
  ASSERT_TRUE(t->ExportDeltas(0, &keys, &deltas).ok());
  ASSERT_EQ(keys, (std::vector<uint64_t>{10, 11, 12}));
  for (int d = 0; d < kDim; ++d) {
    EXPECT_EQ(deltas[d], rows.values[d] - was10[d]);
    EXPECT_EQ(deltas[kDim + d], rows.values[kDim + d] - was11[d]);
    EXPECT_EQ(deltas[2 * kDim + d], now12[d] - was12[d]);
  }
  ASSERT_TRUE(t->Push({12}, std::vector<float>(kDim, 1.0f)).ok());
  EXPECT_GT(t->tracked_rows(), 0);
  ASSERT_TRUE(t->Clear().ok());
  EXPECT_EQ(t->tracked_rows(), 0);
}

TEST(DenseDeltasTest, ABlockIsARow) {
  DenseTableOptions o;
  o.block_sizes = {3, 2};
  o.optimizer = {OptimizerKind::kAdam, 0.01f};
  auto t = DenseTable::Create(o);
  ASSERT_TRUE(t.ok());
  DenseTable& table = **t;
  std::vector<float> delta;
  EXPECT_EQ(table.ExportDeltas(0, 0, &delta).code(), absl::StatusCode::kFailedPrecondition);
  table.TrackDeltas();
  std::vector<float> was(3), now(3);
  ASSERT_TRUE(table.Pull(0, absl::MakeSpan(was)).ok());
  ASSERT_TRUE(table.Push(0, std::vector<float>{1, -1, 0.5f}).ok());
  ASSERT_TRUE(table.Push(0, std::vector<float>{1, -1, 0.5f}).ok());
  ASSERT_TRUE(table.Pull(0, absl::MakeSpan(now)).ok());
  ASSERT_TRUE(table.ExportDeltas(1, 0, &delta).ok());
  EXPECT_TRUE(delta.empty());  // block 1 never changed
  ASSERT_TRUE(table.ExportDeltas(0, 1e6f, &delta).ok());
  EXPECT_TRUE(delta.empty());  // below the threshold: kept
  ASSERT_TRUE(table.ExportDeltas(0, 0, &delta).ok());
  ASSERT_EQ(delta.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(delta[i], now[i] - was[i]);
  // Another region's delta moves value and base; a slice's write is a change.
  ASSERT_TRUE(table.AddDeltas(1, std::vector<float>{0.5f, 0.25f}).ok());
  ASSERT_TRUE(table.ExportDeltas(1, 0, &delta).ok());
  EXPECT_TRUE(delta.empty());
  DenseSlice slice;
  ASSERT_TRUE(table.ReadSlice(1, 1, 1, &slice).ok());
  const float before = slice.value[0];
  slice.value[0] = 4.0f;
  ASSERT_TRUE(table.WriteSlice(1, 1, slice).ok());
  ASSERT_TRUE(table.ExportDeltas(1, 0, &delta).ok());
  ASSERT_EQ(delta.size(), 2u);
  EXPECT_EQ(delta[0], 0.0f);
  EXPECT_EQ(delta[1], 4.0f - before);
  EXPECT_EQ(table.AddDeltas(1, std::vector<float>{1}).code(), absl::StatusCode::kInvalidArgument);
}

// A window: two regions' tables from the same start, each changing rows of its own; each exports
// without moving a base, both apply the same merge with what each sent: both end on the same
// floats, the start plus the merge, with nothing left to send; a change made between the export
// and the apply stays to be sent, and a row below the threshold keeps its whole change.
TEST(SparseDeltasTest, AWindowTakesEveryRegionOntoTheSameBase) {
  auto a = Table(), b = Table();
  for (auto* t : {a.get(), b.get()}) t->TrackDeltas();
  ASSERT_TRUE(a->Push({1, 2}, std::vector<float>(2 * kDim, 0.5f)).ok());
  ASSERT_TRUE(b->Push({2, 3}, std::vector<float>(2 * kDim, -0.25f)).ok());
  std::vector<uint64_t> ka, kb;
  std::vector<float> da, db;
  ASSERT_TRUE(a->ExportWindow(0, &ka, &da).ok());
  ASSERT_TRUE(b->ExportWindow(0, &kb, &db).ok());
  ASSERT_EQ(ka, (std::vector<uint64_t>{1, 2}));
  ASSERT_EQ(kb, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(a->tracked_rows(), 2);  // the bases stay until the apply
  {
    std::vector<uint64_t> again;
    std::vector<float> same;
    ASSERT_TRUE(a->ExportWindow(0, &again, &same).ok());
    EXPECT_EQ(same, da);
  }
  // The merge: a's and b's deltas, weighted 1/4 and 3/4, over keys 1, 2, 3.
  const std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> merged(3 * kDim), own_a(3 * kDim, 0.0f), own_b(3 * kDim, 0.0f);
  std::copy_n(da.begin(), 2 * kDim, own_a.begin());
  std::copy_n(db.begin(), 2 * kDim, own_b.begin() + kDim);
  for (int i = 0; i < 3 * kDim; ++i) {
    merged[i] = static_cast<float>(0.25 * own_a[i] + 0.75 * own_b[i]);
  }
  // Key 1 changes again in a between the export and the apply.
  ASSERT_TRUE(a->Push({1}, std::vector<float>(kDim, 1.0f)).ok());
  const std::vector<float> late = Value(*a, 1);
  ASSERT_TRUE(a->ApplyWindow(keys, merged, own_a).ok());
  ASSERT_TRUE(b->ApplyWindow(keys, merged, own_b).ok());
  for (uint64_t key : {2, 3}) {
    const std::vector<float> in_a = Value(*a, key), in_b = Value(*b, key),
                             was = a->InitialValue(key);
    EXPECT_EQ(in_a, in_b) << key;
    for (int d = 0; d < kDim; ++d) EXPECT_EQ(in_a[d], was[d] + merged[(key - 1) * kDim + d]);
  }
  EXPECT_EQ(b->tracked_rows(), 0);
  EXPECT_EQ(a->tracked_rows(), 1);  // key 1's late change
  const std::vector<float> was1 = a->InitialValue(1), now1 = Value(*a, 1), in_b1 = Value(*b, 1);
  for (int d = 0; d < kDim; ++d) {
    EXPECT_EQ(in_b1[d], was1[d] + merged[d]);
    EXPECT_NEAR(now1[d] - in_b1[d], late[d] - (was1[d] + da[d]), 1e-6);
  }
  ka.clear();
  da.clear();
  ASSERT_TRUE(a->ExportWindow(0, &ka, &da).ok());
  ASSERT_EQ(ka, std::vector<uint64_t>{1});
  for (int d = 0; d < kDim; ++d) EXPECT_EQ(da[d], now1[d] - in_b1[d]);
  // Below the threshold: not sent, and the merge of others keeps it as the row's change.
  ASSERT_TRUE(b->Push({4}, std::vector<float>(kDim, 1.0f)).ok());
  kb.clear();
  db.clear();
  ASSERT_TRUE(b->ExportWindow(1e6f, &kb, &db).ok());
  EXPECT_TRUE(kb.empty());
  const std::vector<float> four = Value(*b, 4), was4 = b->InitialValue(4);
  ASSERT_TRUE(b->ApplyWindow({4}, std::vector<float>(kDim, 0.125f), std::vector<float>(kDim, 0.0f))
                  .ok());
  const std::vector<float> after4 = Value(*b, 4);
  for (int d = 0; d < kDim; ++d) {
    EXPECT_NEAR(after4[d] - (was4[d] + 0.125f), four[d] - was4[d], 1e-6);
  }
  EXPECT_EQ(b->tracked_rows(), 1);
  // Refused: keys out of order or repeated, floats short, a table not tracking.
  EXPECT_EQ(b->ApplyWindow({3, 2}, std::vector<float>(2 * kDim), std::vector<float>(2 * kDim))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b->ApplyWindow({3}, std::vector<float>(kDim), std::vector<float>(kDim - 1)).code(),
            absl::StatusCode::kInvalidArgument);
  auto untracked = Table();
  EXPECT_EQ(untracked->ApplyWindow({3}, std::vector<float>(kDim), std::vector<float>(kDim)).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(DenseDeltasTest, AWindowTakesABlockOntoTheSameBase) {
  DenseTableOptions o;
  o.block_sizes = {3};
  o.optimizer = {OptimizerKind::kSgd, 0.5f};
  auto a = DenseTable::Create(o), b = DenseTable::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> was(3), delta, none;
  ASSERT_TRUE((*a)->Pull(0, absl::MakeSpan(was)).ok());
  EXPECT_EQ((*a)->ExportWindow(0, 0, &delta).code(), absl::StatusCode::kFailedPrecondition);
  for (auto* t : {a->get(), b->get()}) t->TrackDeltas();
  ASSERT_TRUE((*a)->Push(0, std::vector<float>{1, -1, 0.5f}).ok());
  ASSERT_TRUE((*a)->ExportWindow(0, 0, &delta).ok());
  ASSERT_TRUE((*b)->ExportWindow(0, 0, &none).ok());
  ASSERT_EQ(delta.size(), 3u);
  EXPECT_TRUE(none.empty());
  std::vector<float> merged(3);
  for (int i = 0; i < 3; ++i) merged[i] = 0.5f * delta[i];
  ASSERT_TRUE((*a)->ApplyWindow(0, merged, delta).ok());
  ASSERT_TRUE((*b)->ApplyWindow(0, merged, std::vector<float>(3, 0.0f)).ok());
  std::vector<float> in_a(3), in_b(3);
  ASSERT_TRUE((*a)->Pull(0, absl::MakeSpan(in_a)).ok());
  ASSERT_TRUE((*b)->Pull(0, absl::MakeSpan(in_b)).ok());
  EXPECT_EQ(in_a, in_b);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(in_a[i], was[i] + merged[i]);
  ASSERT_TRUE((*a)->ExportWindow(0, 0, &delta).ok());
  EXPECT_TRUE(delta.empty());
  EXPECT_EQ((*a)->ApplyWindow(0, merged, std::vector<float>(2)).code(),
            absl::StatusCode::kInvalidArgument);
}

// Two servers each hold half of a step's parts (two regions in lockstep); each adds the other's
// export and commits: both end where one server holding every part ends, to the bit, for the
// sparse rows (Adam: every key's sum matters to the last bit) and the dense blocks.
TEST(PendingPartsTest, ExportedPartsAddedElsewhereMakeTheSameCommit) {
  SparseTableOptions so;
  so.dim = kDim;
  so.optimizer = {OptimizerKind::kAdam, 0.01f};
  DenseTableOptions dopt;
  dopt.block_sizes = {5};
  dopt.optimizer = {OptimizerKind::kAdam, 0.01f};
  struct Server {
    std::unique_ptr<SparseTable> sparse;
    std::unique_ptr<DenseTable> dense;
    PendingUpdates pending;
    CheckpointTables tables() { return {{{0, sparse.get()}}, {{1, dense.get()}}}; }
  };
  auto make = [&]() {
    auto s = std::make_unique<Server>();
    s->sparse = std::move(*SparseTable::Create(so, nullptr));
    s->dense = std::move(*DenseTable::Create(dopt));
    return s;
  };
  auto all = make(), a = make(), b = make();
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> unit(-1, 1);
  for (int64_t block = 0; block < 4; ++block) {
    const int part = NodePart(0, block);
    std::vector<uint64_t> keys;
    std::vector<float> grads;
    for (uint64_t k = 0; k < 6; ++k) keys.push_back(rng() % 9 + 100 * k);
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (size_t i = 0; i < keys.size() * kDim; ++i) grads.push_back(unit(rng));
    std::vector<double> dense(5);
    for (double& g : dense) g = unit(rng) / 3.0;
    Server& half = block < 2 ? *a : *b;
    for (Server* s : {all.get(), &half}) {
      s->pending.AddSparse(0, part, keys, grads);
      ASSERT_TRUE(s->pending.AddDense(1, 0, part, dense).ok());
    }
  }
  const PendingParts from_a = a->pending.Export(), from_b = b->pending.Export();
  EXPECT_EQ(from_a.sparse.size(), 2u);
  EXPECT_EQ(from_a.dense.size(), 2u);
  for (auto [into, parts] : {std::pair{a.get(), &from_b}, std::pair{b.get(), &from_a}}) {
    for (const PendingParts::Sparse& p : parts->sparse) {
      into->pending.AddSparse(p.table, p.part, p.keys, p.grads);
    }
    for (const PendingParts::Dense& p : parts->dense) {
      ASSERT_TRUE(into->pending.AddDense(p.table, p.block, p.part, p.grads).ok());
    }
  }
  for (Server* s : {all.get(), a.get(), b.get()}) ASSERT_TRUE(s->pending.Apply(s->tables()).ok());
  auto rows = [](SparseTable& t) {
    std::map<uint64_t, std::vector<float>> out;
    EXPECT_TRUE(t.ForEachRow([&](uint64_t key, const RowData& row) {
                   std::vector<float> v = row.value;
                   v.insert(v.end(), row.state.begin(), row.state.end());
                   out[key] = v;
                   return absl::OkStatus();
                 }).ok());
    return out;
  };
  const auto reference = rows(*all->sparse);
  EXPECT_FALSE(reference.empty());
  EXPECT_EQ(rows(*a->sparse), reference);
  EXPECT_EQ(rows(*b->sparse), reference);
  const auto block = all->dense->Read(0);
  for (Server* s : {a.get(), b.get()}) {
    const auto got = s->dense->Read(0);
    EXPECT_EQ(got->value, block->value);
    EXPECT_EQ(got->state, block->state);
  }
  // Without the other half, the commit differs (the test can fail).
  auto alone = make();
  for (const PendingParts::Sparse& p : from_a.sparse) {
    alone->pending.AddSparse(p.table, p.part, p.keys, p.grads);
  }
  ASSERT_TRUE(alone->pending.Apply(alone->tables()).ok());
  EXPECT_NE(rows(*alone->sparse), reference);
}

}  // namespace
}  // namespace heterps::ps
