// The cold store's batched calls (PutMany, GetMany) against its one-key calls, for RocksDB and the
// in-memory store, and a sparse table over it: a batched bring-back that fails at each step loses
// no row, and the copies a bring-back leaves in the store are never read while their rows are in
// memory.
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/cold_store.h"
#include "heterps/ps/rocksdb_store.h"
#include "heterps/ps/sparse_table.h"

namespace heterps::ps {
namespace {

std::unique_ptr<ColdStore> OpenStore(bool rocksdb, const std::string& name) {
  if (!rocksdb) return std::make_unique<MemoryColdStore>();
  auto store = RocksDbColdStore::Open(::testing::TempDir() + "/" + name);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(*store);
}

int64_t Count(ColdStore& store) {
  int64_t rows = 0;
  EXPECT_TRUE(store
                  .ForEach([&](uint64_t, absl::string_view) {
                    ++rows;
                    return absl::OkStatus();
                  })
                  .ok());
  return rows;
}

class ColdStoreTest : public ::testing::TestWithParam<bool> {};

// Random batched puts, batched reads (keys unsorted, repeated, absent, big-endian order across
// bytes) and deletes, against a std::map: GetMany answers as Get does.
TEST_P(ColdStoreTest, BatchedCallsAnswerAsOneKeyCalls) {
  std::unique_ptr<ColdStore> store = OpenStore(GetParam(), "batched");
  std::map<uint64_t, std::string> model;
  std::mt19937_64 rng(11);
  const auto key = [&] { return (rng() % 300) << (8 * (rng() % 8)); };  // every byte position
  for (int round = 0; round < 30; ++round) {
    std::vector<std::pair<uint64_t, std::string>> rows;
    for (int i = 0; i < 20; ++i) {
      const uint64_t k = key();
      rows.emplace_back(k, std::string(1 + rng() % 40, static_cast<char>('a' + rng() % 26)));
    }
    std::sort(rows.begin(), rows.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    rows.erase(std::unique(rows.begin(), rows.end(),
                           [](const auto& a, const auto& b) { return a.first == b.first; }),
               rows.end());
    ASSERT_TRUE(store->PutMany(rows).ok());
    for (const auto& [k, bytes] : rows) model[k] = bytes;

    std::vector<uint64_t> asked(1 + rng() % 50);
    for (uint64_t& k : asked) k = key();
    if (round % 2 == 0) std::sort(asked.begin(), asked.end());
    absl::StatusOr<std::vector<std::optional<std::string>>> got = store->GetMany(asked);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), asked.size());
    for (size_t i = 0; i < asked.size(); ++i) {
      auto it = model.find(asked[i]);
      ASSERT_EQ((*got)[i].has_value(), it != model.end()) << asked[i];
      if (it != model.end()) {
        EXPECT_EQ(*(*got)[i], it->second);
      }
      absl::StatusOr<std::optional<std::string>> one = store->Get(asked[i]);
      ASSERT_TRUE(one.ok());
      EXPECT_EQ(*one, (*got)[i]);
    }

    std::vector<uint64_t> gone(rng() % 30);
    for (uint64_t& k : gone) k = key();
    for (uint64_t k : gone) {
      ASSERT_TRUE(store->Delete(k).ok());
      model.erase(k);
    }
    ASSERT_EQ(Count(*store), static_cast<int64_t>(model.size()));
  }
  std::vector<std::pair<uint64_t, std::string>> stored;
  ASSERT_TRUE(store
                  ->ForEach([&](uint64_t k, absl::string_view bytes) {
                    stored.emplace_back(k, std::string(bytes));
                    return absl::OkStatus();
                  })
                  .ok());
  const std::vector<std::pair<uint64_t, std::string>> want(model.begin(), model.end());
  EXPECT_EQ(stored, want);
  EXPECT_TRUE(store->GetMany({}).ok());
}

INSTANTIATE_TEST_SUITE_P(Stores, ColdStoreTest, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "RocksDb" : "Memory"; });

// A store whose batched reads and clears fail on demand, and which counts its calls.
class FailingColdStore : public MemoryColdStore {
 public:
  bool fail_get_many = false, fail_clear = false;
  int64_t get_many_calls = 0, deletes = 0;
  absl::StatusOr<std::vector<std::optional<std::string>>> GetMany(
      absl::Span<const uint64_t> keys) override {
    ++get_many_calls;
    if (fail_get_many) return absl::UnavailableError("read error");
    return MemoryColdStore::GetMany(keys);
  }
  absl::Status Delete(uint64_t key) override {
    ++deletes;
    return MemoryColdStore::Delete(key);
  }
  absl::Status Clear() override {
    if (fail_clear) return absl::UnavailableError("clear failed");
    return MemoryColdStore::Clear();
  }
};

SparseTableOptions SmallTable() {
  SparseTableOptions options;
  options.lock_shards = 1;
  options.memory_budget_bytes = 4000;  // about 25 rows of dim 16 with Adagrad's state
  return options;
}

// A SmallTable over `cold`, and the 100 keys the tests below give it.
std::unique_ptr<SparseTable> MakeSmallTable(std::unique_ptr<ColdStore> cold) {
  auto created = SparseTable::Create(SmallTable(), std::move(cold));
  EXPECT_TRUE(created.ok()) << created.status();
  return created.ok() ? *std::move(created) : nullptr;
}
std::vector<uint64_t> HundredKeys() {
  std::vector<uint64_t> keys(100);
  for (uint64_t k = 0; k < 100; ++k) keys[k] = k * 31 + 1;
  return keys;
}

// Tests of a SmallTable over a FailingColdStore (`table`, `cold`), given HundredKeys (`keys`).
class FailingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto owned = std::make_unique<FailingColdStore>();
    cold = owned.get();
    made_ = MakeSmallTable(std::move(owned));
    ASSERT_NE(made_, nullptr);
  }
  SparseTable& table() { return *made_; }

  FailingColdStore* cold = nullptr;
  const std::vector<uint64_t> keys = HundredKeys();

 private:
  std::unique_ptr<SparseTable> made_;
};

// Each row's value after one push of `grad` to it, from its initial value.
std::vector<float> Pushed(const SparseTable& table, uint64_t key, float grad) {
  std::vector<float> value = table.InitialValue(key),
                     state(StateFloats(table.options().optimizer.kind) * 16);
  InitState(table.options().optimizer, state.data(), 16);
  std::vector<float> grads(16, grad);
  ApplyUpdate(table.options().optimizer, value.data(), state.data(), grads.data(), 16, 1);
  return value;
}

// A batch's cold rows come back together (one GetMany per lock shard, as many as the shard keeps);
// when the read fails or a stored row is corrupt, the call reports it and every row stays where it
// was, with the value it had: each row in memory or in the store, visited once.
TEST_F(FailingStoreTest, AFailedBringBackLosesNoRow) {
  SparseTable& table = this->table();
  std::vector<float> grads(100 * 16, 0.5f), values(100 * 16);
  ASSERT_TRUE(table.Push(keys, grads).ok());
  ASSERT_GT(table.Stats().cold_rows, 50);
  const auto consistent = [&] {
    const SparseTableStats stats = table.Stats();
    EXPECT_GE(Count(*cold), stats.cold_rows);  // the cold rows, and copies of resident ones
    EXPECT_EQ(stats.memory_rows + stats.cold_rows, 100);
    std::set<uint64_t> visited;
    EXPECT_TRUE(table
                    .ForEachRow([&](uint64_t key, const RowData&) {
                      EXPECT_TRUE(visited.insert(key).second) << "visited twice: " << key;
                      return absl::OkStatus();
                    })
                    .ok());
    EXPECT_EQ(visited, std::set<uint64_t>(keys.begin(), keys.end()));
  };

  const int64_t calls = cold->get_many_calls;
  cold->fail_get_many = true;
  absl::Status failed = table.Pull(keys, absl::MakeSpan(values));
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_THAT(std::string(failed.message()), ::testing::HasSubstr("read error"));
  EXPECT_EQ(cold->get_many_calls, calls + 1);
  consistent();
  cold->fail_get_many = false;

  // A corrupt row among the cold ones: the first in key order, so among those brought back
  // together.
  uint64_t corrupt = 0;
  ASSERT_TRUE(cold->ForEach([&](uint64_t k, absl::string_view) {
                    if (corrupt == 0) corrupt = k;
                    return absl::OkStatus();
                  })
                  .ok());
  absl::StatusOr<std::optional<std::string>> saved = cold->Get(corrupt);
  ASSERT_TRUE(saved.ok() && saved->has_value());
  ASSERT_TRUE(cold->Put(corrupt, "short").ok());
  failed = table.Pull(keys, absl::MakeSpan(values));
  EXPECT_EQ(failed.code(), absl::StatusCode::kDataLoss) << failed;
  ASSERT_TRUE(cold->Put(corrupt, **saved).ok());
  consistent();

  const SparseTableStats before = table.Stats();
  ASSERT_TRUE(table.Pull(keys, absl::MakeSpan(values)).ok());
  const SparseTableStats after = table.Stats();
  EXPECT_EQ(after.created, 100);
  EXPECT_EQ(after.hits + after.misses - before.hits - before.misses, 100);
  EXPECT_GT(after.misses, before.misses);
  consistent();
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float> want = Pushed(table, keys[i], 0.5f);
    for (int d = 0; d < 16; ++d) ASSERT_EQ(values[i * 16 + d], want[d]) << "key " << keys[i];
  }
}

// Rows brought back together never take a shard past its share: room is made first (a touch that
// creates a row may pass it by that row until the spill it causes).
TEST(ColdTierTest, ABatchBroughtBackStaysWithinTheBudget) {
  std::unique_ptr<SparseTable> made = MakeSmallTable(std::make_unique<MemoryColdStore>());
  ASSERT_NE(made, nullptr);
  SparseTable& table = *made;
  const std::vector<uint64_t> keys = HundredKeys();
  std::vector<float> values(100 * 16);
  ASSERT_TRUE(table.Pull(keys, absl::MakeSpan(values)).ok());
  const int64_t budget_rows = SmallTable().memory_budget_bytes / (4 * 32 + 20 + 7);
  std::mt19937_64 rng(7);
  for (int call = 0; call < 20; ++call) {
    std::vector<uint64_t> some(60);
    for (uint64_t& k : some) k = keys[rng() % keys.size()];
    values.resize(some.size() * 16);
    ASSERT_TRUE(table.Pull(some, absl::MakeSpan(values)).ok());
    EXPECT_LE(table.Stats().memory_rows, budget_rows);
  }
  const SparseTableStats stats = table.Stats();
  EXPECT_GT(stats.misses, 200);
  EXPECT_LE(stats.shard_rows_peak, budget_rows + 1);
  EXPECT_EQ(stats.created, 100);
}

// A row brought back keeps its copy in the store, stale once the row is pushed: never read while
// the row is in memory (pulls, Lookup, ForEachRow and a checkpoint's scan see the row's latest
// value, once), overwritten by the row's next spill, and never deleted. Against the same pushes to
// a table all in memory.
TEST_F(FailingStoreTest, ACopyLeftInTheStoreIsNeverRead) {
  SparseTable& table = this->table();
  SparseTableOptions all_in_memory = SmallTable();
  all_in_memory.memory_budget_bytes = 0;
  auto reference = SparseTable::Create(all_in_memory, nullptr);
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  int64_t stale_seen = 0;
  for (int call = 0; call < 40; ++call) {
    std::vector<uint64_t> some(30);
    for (uint64_t& k : some) k = keys[rng() % keys.size()];
    std::vector<float> grads(some.size() * 16), got(some.size() * 16), want(some.size() * 16);
    for (float& g : grads) g = normal(rng);
    ASSERT_TRUE(table.Push(some, grads).ok());
    ASSERT_TRUE((*reference)->Push(some, grads).ok());
    ASSERT_TRUE(table.Pull(some, absl::MakeSpan(got)).ok());
    ASSERT_TRUE((*reference)->Pull(some, absl::MakeSpan(want)).ok());
    ASSERT_EQ(got, want) << "call " << call;
    const SparseTableStats stats = table.Stats();
    stale_seen = std::max(stale_seen, Count(*cold) - stats.cold_rows);
    for (uint64_t key : keys) {
      absl::StatusOr<std::optional<RowData>> row = table.Lookup(key),
                                             ref = (*reference)->Lookup(key);
      ASSERT_TRUE(row.ok() && ref.ok());
      ASSERT_EQ(row->has_value(), ref->has_value()) << key;
      if (!row->has_value()) continue;
      ASSERT_EQ((*row)->value, (*ref)->value) << key;
      ASSERT_EQ((*row)->state, (*ref)->state) << key;
      ASSERT_EQ((*row)->steps, (*ref)->steps) << key;
    }
    std::map<uint64_t, std::vector<float>> visited;
    ASSERT_TRUE(table
                    .ForEachRow([&](uint64_t key, const RowData& row) {
                      EXPECT_TRUE(visited.emplace(key, row.value).second) << "twice: " << key;
                      return absl::OkStatus();
                    })
                    .ok());
    ASSERT_EQ(static_cast<int64_t>(visited.size()), stats.created);
    for (const auto& [key, value] : visited) {
      absl::StatusOr<std::optional<RowData>> ref = (*reference)->Lookup(key);
      ASSERT_TRUE(ref.ok() && ref->has_value());
      ASSERT_EQ(value, (*ref)->value) << key;
    }
  }
  const SparseTableStats stats = table.Stats();
  EXPECT_GT(stats.misses, 100);  // rows came back, and went out again
  EXPECT_GT(stats.spills, 200);
  EXPECT_GT(stale_seen, 10);  // resident rows had copies in the store
  EXPECT_EQ(cold->deletes, 0);
  EXPECT_LE(Count(*cold), 100);  // a copy per row at most
}

// A Clear the store fails leaves the table as it was (its rows in memory still hide their copies
// in the store); one that succeeds leaves no row in either tier.
TEST_F(FailingStoreTest, AClearTheStoreFailsChangesNothing) {
  SparseTable& table = this->table();
  std::vector<float> grads(100 * 16, 0.5f), values(100 * 16);
  // Pushed, brought back and pushed again: the rows in memory have stale copies in the store.
  ASSERT_TRUE(table.Push(keys, grads).ok());
  ASSERT_TRUE(table.Pull(keys, absl::MakeSpan(values)).ok());
  std::fill(grads.begin(), grads.end(), 0.25f);
  ASSERT_TRUE(table.Push(keys, grads).ok());
  ASSERT_GT(Count(*cold), table.Stats().cold_rows);
  std::map<uint64_t, std::vector<float>> before;
  ASSERT_TRUE(table
                  .ForEachRow([&](uint64_t key, const RowData& row) {
                    before[key] = row.value;
                    return absl::OkStatus();
                  })
                  .ok());
  ASSERT_EQ(before.size(), 100u);

  cold->fail_clear = true;
  const absl::Status failed = table.Clear();
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  cold->fail_clear = false;
  ASSERT_TRUE(table.Pull(keys, absl::MakeSpan(values)).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int d = 0; d < 16; ++d) ASSERT_EQ(values[i * 16 + d], before[keys[i]][d]) << keys[i];
  }

  ASSERT_TRUE(table.Clear().ok());
  EXPECT_EQ(Count(*cold), 0);
  EXPECT_EQ(table.Stats().memory_rows, 0);
  EXPECT_EQ(table.Stats().cold_rows, 0);
  ASSERT_TRUE(table.Pull(keys, absl::MakeSpan(values)).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float> fresh = table.InitialValue(keys[i]);
    for (int d = 0; d < 16; ++d) ASSERT_EQ(values[i * 16 + d], fresh[d]) << keys[i];
  }
}

// The real store describes its memtable and levels, and comes to rest: no flush or compaction
// running or pending, every row still there.
TEST(ColdTierTest, TheStoreSaysItsStateAndComesToRest) {
  auto store = RocksDbColdStore::Open(::testing::TempDir() + "/rest");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT((*store)->Describe(), ::testing::HasSubstr("memtable 0 entries (0 deletes)"));
  std::vector<std::pair<uint64_t, std::string>> rows;
  for (uint64_t key = 0; key < 1000; ++key) rows.emplace_back(key, std::string(100, 'r'));
  ASSERT_TRUE((*store)->PutMany(rows).ok());
  ASSERT_TRUE((*store)->Delete(3).ok());
  ASSERT_TRUE((*store)->Delete(4).ok());
  EXPECT_THAT((*store)->Describe(), ::testing::HasSubstr("memtable 1002 entries (2 deletes)"));
  ASSERT_TRUE((*store)->WaitForBackgroundWork().ok());
  EXPECT_THAT((*store)->Describe(), ::testing::HasSubstr("0 compactions running"));
  auto row = (*store)->Get(5);
  ASSERT_TRUE(row.ok() && row->has_value());
  EXPECT_EQ(**row, std::string(100, 'r'));
}

// Threads pushing at once to a table mostly on RocksDB, each its own keys spread over every lock
// shard (so that calls pass over each other's busy shards): every row ends as the same pushes
// give it one call at a time in a table all in memory, and each row is visited once.
TEST(ColdTierTest, ConcurrentCallsOverTheTierKeepEveryUpdate) {
  SparseTableOptions options;
  options.lock_shards = 8;
  options.memory_budget_bytes = 8 * 4000;  // about 200 of the 1600 rows
  auto store = RocksDbColdStore::Open(::testing::TempDir() + "/concurrent");
  ASSERT_TRUE(store.ok()) << store.status();
  auto tiered = SparseTable::Create(options, std::move(*store));
  ASSERT_TRUE(tiered.ok()) << tiered.status();
  options.memory_budget_bytes = 0;
  auto memory = SparseTable::Create(options, nullptr);
  ASSERT_TRUE(memory.ok()) << memory.status();
  constexpr int kThreads = 4, kKeysEach = 400, kBatches = 60;
  // Thread t's batches: 100 of its keys (repeats included), gradients from its own stream.
  std::vector<std::vector<std::vector<uint64_t>>> keys(kThreads);
  std::vector<std::vector<std::vector<float>>> grads(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    std::mt19937_64 rng(t + 1);
    std::normal_distribution<float> normal;
    for (int b = 0; b < kBatches; ++b) {
      std::vector<uint64_t> batch(100);
      for (uint64_t& k : batch) k = (rng() % kKeysEach) * kThreads + t;
      std::vector<float> g(batch.size() * 16);
      for (float& x : g) x = normal(rng);
      keys[t].push_back(std::move(batch));
      grads[t].push_back(std::move(g));
    }
  }
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> values(100 * 16);
      for (int b = 0; b < kBatches && results[t].ok(); ++b) {
        results[t] = (*tiered)->Push(keys[t][b], grads[t][b]);
        if (results[t].ok()) results[t] = (*tiered)->Pull(keys[t][b], absl::MakeSpan(values));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& result : results) ASSERT_TRUE(result.ok()) << result;
  for (int t = 0; t < kThreads; ++t) {
    for (int b = 0; b < kBatches; ++b) ASSERT_TRUE((*memory)->Push(keys[t][b], grads[t][b]).ok());
  }
  std::map<uint64_t, RowData> want;
  ASSERT_TRUE((*memory)
                  ->ForEachRow([&](uint64_t key, const RowData& row) {
                    want[key] = row;
                    return absl::OkStatus();
                  })
                  .ok());
  size_t visited = 0;
  ASSERT_TRUE((*tiered)
                  ->ForEachRow([&](uint64_t key, const RowData& row) {
                    ++visited;
                    auto it = want.find(key);
                    EXPECT_NE(it, want.end()) << key;
                    if (it == want.end()) return absl::OkStatus();
                    EXPECT_EQ(row.value, it->second.value) << key;
                    EXPECT_EQ(row.state, it->second.state) << key;
                    EXPECT_EQ(row.steps, it->second.steps) << key;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(visited, want.size());
  const SparseTableStats stats = (*tiered)->Stats();
  EXPECT_GT(stats.misses, 1000);  // the tier really was used
  EXPECT_EQ(stats.memory_rows + stats.cold_rows, static_cast<int64_t>(want.size()));
  EXPECT_EQ(stats.hits + stats.misses + stats.created, 2 * kThreads * kBatches * 100);
}

}  // namespace
}  // namespace heterps::ps
