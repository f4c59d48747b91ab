#include "heterps/ps/sparse_table.h"

#include <random>
#include <unordered_map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/rocksdb_store.h"

namespace heterps::ps {
namespace {

// The reference: every row in a std::unordered_map, the same optimizer applied in the same order.
class ReferenceTable {
 public:
  explicit ReferenceTable(const SparseTable& real) : real_(real) {}

  const RowData& Row(uint64_t key) {
    auto it = rows_.find(key);
    if (it != rows_.end()) return it->second;
    RowData row;
    row.value = real_.InitialValue(key);
    row.state.resize(StateFloats(real_.options().optimizer.kind) * real_.dim());
    InitState(real_.options().optimizer, row.state.data(), real_.dim());
    return rows_.emplace(key, std::move(row)).first->second;
  }
  void Push(uint64_t key, const float* grad) {
    Row(key);
    RowData& row = rows_[key];
    ++row.steps;
    ApplyUpdate(real_.options().optimizer, row.value.data(), row.state.data(), grad, real_.dim(),
                row.steps);
  }
  size_t size() const { return rows_.size(); }
  const std::unordered_map<uint64_t, RowData>& rows() const { return rows_; }

 private:
  const SparseTable& real_;
  std::unordered_map<uint64_t, RowData> rows_;
};

enum class Tier { kMemoryOnly, kFakeCold, kRocksDb };

std::unique_ptr<SparseTable> MakeTable(Tier tier, OptimizerKind kind, int64_t budget) {
  SparseTableOptions options;
  options.dim = 8;
  options.optimizer.kind = kind;
  options.optimizer.learning_rate = 0.05f;
  options.seed = 99;
  options.lock_shards = 4;
  options.memory_budget_bytes = tier == Tier::kMemoryOnly ? 0 : budget;
  std::unique_ptr<ColdStore> cold;
  if (tier == Tier::kFakeCold) cold = std::make_unique<MemoryColdStore>();
  if (tier == Tier::kRocksDb) {
    auto store = RocksDbColdStore::Open(::testing::TempDir() + "/cold_" +
                                        std::string(OptimizerName(kind)));
    EXPECT_TRUE(store.ok()) << store.status();
    cold = std::move(*store);
  }
  auto table = SparseTable::Create(options, std::move(cold));
  EXPECT_TRUE(table.ok()) << table.status();
  return std::move(*table);
}

class SparseTableModelTest
    : public ::testing::TestWithParam<std::tuple<Tier, OptimizerKind>> {};

TEST_P(SparseTableModelTest, MatchesTheReferenceUnderRandomPullsAndPushes) {
  const auto [tier, kind] = GetParam();
  // A budget of about 60 rows for 2000 keys: most of the table lives in the cold tier.
  auto table = MakeTable(tier, kind, 60 * (8 * 4 * (1 + StateFloats(kind)) + 40));
  ReferenceTable reference(*table);
  std::mt19937_64 rng(5);
  std::discrete_distribution<int> zipfish = [] {
    std::vector<double> w(2000);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0 / (1 + i);
    return std::discrete_distribution<int>(w.begin(), w.end());
  }();
  std::normal_distribution<float> normal;
  for (int step = 0; step < 400; ++step) {
    std::vector<uint64_t> keys(1 + rng() % 64);
    for (uint64_t& k : keys) k = 1000003ull * zipfish(rng) + 17;  // duplicates on purpose
    std::vector<float> got(keys.size() * 8);
    if (rng() % 2 == 0) {
      ASSERT_TRUE(table->Pull(keys, absl::MakeSpan(got)).ok());
      for (size_t i = 0; i < keys.size(); ++i) {
        const RowData& want = reference.Row(keys[i]);
        for (int d = 0; d < 8; ++d) ASSERT_EQ(got[i * 8 + d], want.value[d]) << "step " << step;
      }
    } else {
      for (float& g : got) g = normal(rng);
      ASSERT_TRUE(table->Push(keys, got).ok());
      for (size_t i = 0; i < keys.size(); ++i) reference.Push(keys[i], &got[i * 8]);
    }
  }
  // Every row, in whichever tier, equals the reference: values, optimizer state, step counts.
  size_t visited = 0;
  ASSERT_TRUE(table->ForEachRow([&](uint64_t key, const RowData& row) {
    ++visited;
    auto it = reference.rows().find(key);
    EXPECT_NE(it, reference.rows().end()) << key;
    if (it == reference.rows().end()) return absl::OkStatus();
    EXPECT_EQ(row.value, it->second.value);
    EXPECT_EQ(row.state, it->second.state);
    EXPECT_EQ(row.steps, it->second.steps);
    return absl::OkStatus();
  }).ok());
  EXPECT_EQ(visited, reference.size());  // nothing lost, nothing duplicated
  SparseTableStats stats = table->Stats();
  EXPECT_EQ(stats.memory_rows + stats.cold_rows, static_cast<int64_t>(reference.size()));
  EXPECT_EQ(stats.created, static_cast<int64_t>(reference.size()));
  if (tier != Tier::kMemoryOnly) {
    EXPECT_GT(stats.spills, 100);  // the cold tier was really exercised, both ways
    EXPECT_GT(stats.misses, 100);
    EXPECT_LE(stats.memory_bytes, table->options().memory_budget_bytes);
  }
}

INSTANTIATE_TEST_SUITE_P(
    TiersAndOptimizers, SparseTableModelTest,
    ::testing::Combine(::testing::Values(Tier::kMemoryOnly, Tier::kFakeCold, Tier::kRocksDb),
                       ::testing::Values(OptimizerKind::kSgd, OptimizerKind::kAdagrad,
                                         OptimizerKind::kAdam)));

TEST(SparseTableTest, InitialValuesDependOnlyOnTheKey) {
  SparseTableOptions a, b;
  a.lock_shards = 3;
  b.lock_shards = 16;
  a.seed = b.seed = 7;
  auto ta = *SparseTable::Create(a, nullptr), tb = *SparseTable::Create(b, nullptr);
  std::vector<uint64_t> keys = {1, 2, 3, 1ull << 60};
  std::vector<float> va(keys.size() * 16), vb(keys.size() * 16);
  ASSERT_TRUE(ta->Pull(keys, absl::MakeSpan(va)).ok());
  ASSERT_TRUE(tb->Pull(keys, absl::MakeSpan(vb)).ok());
  EXPECT_EQ(va, vb);
  EXPECT_NE(va[0], va[16]);  // different keys differ
  for (float v : va) EXPECT_LE(std::abs(v), a.init_range);
}

TEST(SparseTableTest, BadArgumentsAreErrors) {
  SparseTableOptions options;
  options.memory_budget_bytes = 1000;
  EXPECT_FALSE(SparseTable::Create(options, nullptr).ok());
  auto table = *SparseTable::Create(SparseTableOptions{}, nullptr);
  std::vector<uint64_t> keys = {1, 2};
  std::vector<float> wrong(5);
  EXPECT_EQ(table->Pull(keys, absl::MakeSpan(wrong)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(table->Push(keys, wrong).code(), absl::StatusCode::kInvalidArgument);
}

TEST(OptimizerTest, OneStepByHand) {
  OptimizerOptions o;
  float w = 1, g = 0.5f;
  o.kind = OptimizerKind::kSgd;
  o.learning_rate = 0.1f;
  ApplyUpdate(o, &w, nullptr, &g, 1, 1);
  EXPECT_FLOAT_EQ(w, 0.95f);
  o.kind = OptimizerKind::kAdagrad;  // a = 0.1 + 0.25; w -= 0.1 * 0.5 / sqrt(0.35)
  float a = 0.1f;
  w = 1;
  ApplyUpdate(o, &w, &a, &g, 1, 1);
  EXPECT_FLOAT_EQ(a, 0.35f);
  EXPECT_NEAR(w, 1 - 0.05 / std::sqrt(0.35), 1e-6);
  o.kind = OptimizerKind::kAdam;  // first step: m_hat = g, v_hat = g^2, step = lr * sign(g)
  float mv[2] = {0, 0};
  w = 1;
  ApplyUpdate(o, &w, mv, &g, 1, 1);
  EXPECT_NEAR(w, 0.9, 1e-6);
  EXPECT_FALSE(ParseOptimizerKind("rmsprop").ok());
}

}  // namespace
}  // namespace heterps::ps
