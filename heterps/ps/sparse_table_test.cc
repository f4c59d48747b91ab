#include "heterps/ps/sparse_table.h"

#include <cmath>
#include <random>
#include <unordered_map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/rocksdb_store.h"

namespace heterps::ps {
namespace {

// The optimizers written out again, in double precision, from their formulas (optimizer.h), as
// an oracle independent of ApplyUpdate: sgd w -= lr g; adagrad a += g^2, w -= lr g / (sqrt(a) +
// eps); adam with bias-corrected moments.
struct DoubleRow {
  std::vector<double> value, state;
  int64_t steps = 0;
};

void DoubleUpdate(const OptimizerOptions& o, DoubleRow& row, const float* grad) {
  const size_t dim = row.value.size();
  ++row.steps;
  for (size_t i = 0; i < dim; ++i) {
    const double g = grad[i];
    switch (o.kind) {
      case OptimizerKind::kSgd:
        row.value[i] -= o.learning_rate * g;
        break;
      case OptimizerKind::kAdagrad:
        row.state[i] += g * g;
        row.value[i] -= o.learning_rate * g / (std::sqrt(row.state[i]) + o.epsilon);
        break;
      case OptimizerKind::kAdam: {
        double& m = row.state[i];
        double& v = row.state[dim + i];
        m = o.beta1 * m + (1 - o.beta1) * g;
        v = o.beta2 * v + (1 - o.beta2) * g * g;
        const double m_hat = m / (1 - std::pow(double{o.beta1}, row.steps));
        const double v_hat = v / (1 - std::pow(double{o.beta2}, row.steps));
        row.value[i] -= o.learning_rate * m_hat / (std::sqrt(v_hat) + o.epsilon);
        break;
      }
    }
  }
}

// The reference: every row in a std::unordered_map, the same optimizer applied in the same order
// (bit for bit what the table must hold, whichever tier holds it), and the same rows updated in
// double precision by DoubleUpdate (what the optimizer must compute).
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
    auto [it, fresh] = doubles_.try_emplace(key);
    if (fresh) {
      it->second.value.assign(row.value.begin(), row.value.end());
      it->second.state.assign(row.state.begin(), row.state.end());
    }
    ++row.steps;
    ApplyUpdate(real_.options().optimizer, row.value.data(), row.state.data(), grad, real_.dim(),
                row.steps);
    DoubleUpdate(real_.options().optimizer, it->second, grad);
  }
  size_t size() const { return rows_.size(); }
  const std::unordered_map<uint64_t, RowData>& rows() const { return rows_; }
  const std::unordered_map<uint64_t, DoubleRow>& doubles() const { return doubles_; }

 private:
  const SparseTable& real_;
  std::unordered_map<uint64_t, RowData> rows_;
  std::unordered_map<uint64_t, DoubleRow> doubles_;  // rows pushed at least once
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
    auto store =
        RocksDbColdStore::Open(::testing::TempDir() + "/cold_" + std::string(OptimizerName(kind)));
    EXPECT_TRUE(store.ok()) << store.status();
    cold = std::move(*store);
  }
  auto table = SparseTable::Create(options, std::move(cold));
  EXPECT_TRUE(table.ok()) << table.status();
  return std::move(*table);
}

class SparseTableModelTest : public ::testing::TestWithParam<std::tuple<Tier, OptimizerKind>> {};

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
  int64_t accesses = 0;
  for (int step = 0; step < 400; ++step) {
    std::vector<uint64_t> keys(1 + rng() % 64);
    accesses += static_cast<int64_t>(keys.size());
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
  ASSERT_TRUE(table
                  ->ForEachRow([&](uint64_t key, const RowData& row) {
                    ++visited;
                    auto it = reference.rows().find(key);
                    EXPECT_NE(it, reference.rows().end()) << key;
                    if (it == reference.rows().end()) return absl::OkStatus();
                    EXPECT_EQ(row.value, it->second.value);
                    EXPECT_EQ(row.state, it->second.state);
                    EXPECT_EQ(row.steps, it->second.steps);
                    // The optimizer's arithmetic, against its formulas in double precision.
                    auto d = reference.doubles().find(key);
                    if (d != reference.doubles().end()) {
                      EXPECT_EQ(row.steps, d->second.steps);
                      for (size_t i = 0; i < row.value.size(); ++i) {
                        EXPECT_NEAR(row.value[i], d->second.value[i],
                                    1e-4 * (1 + std::abs(d->second.value[i])))
                            << key << "[" << i << "]";
                      }
                      for (size_t i = 0; i < row.state.size(); ++i) {
                        EXPECT_NEAR(row.state[i], d->second.state[i],
                                    1e-4 * (1 + std::abs(d->second.state[i])))
                            << key << " state[" << i << "]";
                      }
                    }
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(visited, reference.size());  // nothing lost, nothing duplicated
  SparseTableStats stats = table->Stats();
  EXPECT_EQ(stats.memory_rows + stats.cold_rows, static_cast<int64_t>(reference.size()));
  EXPECT_EQ(stats.created, static_cast<int64_t>(reference.size()));
  EXPECT_EQ(stats.hits + stats.misses + stats.created, accesses);  // each access counted once
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

// Past the growing blocks, into several blocks of whole huge pages, for slots of several sizes
// (a record and 10, 32 or 51 floats): every row keeps what was pushed to it, and no slot
// overlaps another.
TEST(SparseTableTest, LargeShardsKeepEveryRow) {
  for (const auto& [dim, kind] :
       {std::pair{5, OptimizerKind::kAdagrad}, std::pair{16, OptimizerKind::kAdagrad},
        std::pair{17, OptimizerKind::kAdam}}) {
    SparseTableOptions options;
    options.dim = dim;
    options.optimizer.kind = kind;
    options.lock_shards = 1;
    auto table = SparseTable::Create(options, nullptr);
    ASSERT_TRUE(table.ok()) << table.status();
    constexpr uint64_t kRows = 70000;
    std::vector<uint64_t> keys(kRows);
    std::vector<float> grads(kRows * dim);
    for (uint64_t k = 0; k < kRows; ++k) {
      keys[k] = k * 7919 + 3;
      for (int d = 0; d < dim; ++d) grads[k * dim + d] = 1e-3f * static_cast<float>(k % 97 + d);
    }
    ASSERT_TRUE((*table)->Push(keys, grads).ok());
    std::vector<float> got(kRows * dim);
    ASSERT_TRUE((*table)->Pull(keys, absl::MakeSpan(got)).ok());
    for (uint64_t k = 0; k < kRows; ++k) {
      std::vector<float> want = (*table)->InitialValue(keys[k]);
      std::vector<float> state(StateFloats(kind) * dim);
      InitState(options.optimizer, state.data(), dim);
      ApplyUpdate(options.optimizer, want.data(), state.data(), &grads[k * dim], dim, 1);
      for (int d = 0; d < dim; ++d) {
        ASSERT_EQ(got[k * dim + d], want[d]) << "dim " << dim << " row " << k << "[" << d << "]";
      }
    }
    const SparseTableStats stats = (*table)->Stats();
    EXPECT_EQ(stats.memory_rows, static_cast<int64_t>(kRows));
    EXPECT_EQ(stats.created, static_cast<int64_t>(kRows));
  }
}

// A cold store whose puts fail once `healthy` of them have succeeded (its PutMany is the default,
// one put at a time).
class FlakyColdStore : public MemoryColdStore {
 public:
  int64_t healthy = int64_t{1} << 40;
  int64_t puts = 0;
  absl::Status Put(uint64_t key, absl::string_view bytes) override {
    if (puts >= healthy) return absl::UnavailableError("disk full");
    ++puts;
    return MemoryColdStore::Put(key, bytes);
  }
};

// A spill that the store fails part-way through loses no row and leaves none in both tiers: the
// call reports the store's error, and every row then reads back as it was.
TEST(SparseTableTest, AFailedSpillLosesNoRow) {
  auto owned = std::make_unique<FlakyColdStore>();
  FlakyColdStore* cold = owned.get();
  SparseTableOptions options;
  options.lock_shards = 1;
  options.memory_budget_bytes = 4000;  // about 25 rows of dim 16 with Adagrad's state
  auto table = SparseTable::Create(options, std::move(owned));
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<uint64_t> first(100), second(100), all;
  for (uint64_t k = 0; k < 100; ++k) first[k] = k * 31 + 1, second[k] = (k + 100) * 31 + 1;
  std::vector<float> values(100 * 16);
  ASSERT_TRUE((*table)->Pull(first, absl::MakeSpan(values)).ok());
  ASSERT_GT((*table)->Stats().spills, 0);
  cold->healthy = cold->puts + 1;  // the next spill (of 3 rows) fails on its second row
  const absl::Status failed = (*table)->Pull(second, absl::MakeSpan(values));
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_THAT(std::string(failed.message()), ::testing::HasSubstr("disk full"));
  cold->healthy = int64_t{1} << 40;

  all = first;
  all.insert(all.end(), second.begin(), second.end());
  const SparseTableStats stats = (*table)->Stats();
  int64_t stored = 0;
  ASSERT_TRUE(cold->ForEach([&](uint64_t, absl::string_view) {
                    ++stored;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(stored, stats.cold_rows);
  EXPECT_EQ(stats.memory_rows + stats.cold_rows, stats.created);  // each row in one tier
  std::vector<float> got(all.size() * 16);
  ASSERT_TRUE((*table)->Pull(all, absl::MakeSpan(got)).ok());
  const SparseTableStats after = (*table)->Stats();
  EXPECT_EQ(after.created, static_cast<int64_t>(all.size()));
  EXPECT_EQ(after.memory_rows + after.cold_rows, after.created);
  for (size_t i = 0; i < all.size(); ++i) {
    const std::vector<float> want = (*table)->InitialValue(all[i]);
    for (int d = 0; d < 16; ++d) ASSERT_EQ(got[i * 16 + d], want[d]) << "key " << all[i];
  }
}

// Whole rows out and back (the GPU tier's Export and Import), for rows in memory, rows on the
// SSD tier and rows never seen: Export gives each row as Lookup does; Import replaces the
// floats and the update count and keeps the access count, wherever the row is.
TEST(SparseTableTest, ExportAndImportReplaceRowsAndKeepTheirAccesses) {
  SparseTableOptions options;
  options.lock_shards = 2;
  options.memory_budget_bytes = 4000;  // about 25 rows of dim 16 with Adagrad's state
  auto table = SparseTable::Create(options, std::make_unique<FlakyColdStore>());
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<uint64_t> seen(60), keys;
  for (uint64_t k = 0; k < seen.size(); ++k) seen[k] = k * 17 + 3;
  std::vector<float> values(seen.size() * 16), grads(seen.size() * 16, 0.5f);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*table)->Pull(seen, absl::MakeSpan(values)).ok());
  ASSERT_TRUE((*table)->Push(seen, grads).ok());
  ASSERT_GT((*table)->Stats().cold_rows, 0);  // some rows spilled
  keys = seen;
  for (uint64_t k = 0; k < 10; ++k) keys.push_back(100000 + k);  // never seen

  RowBatch rows;
  ASSERT_TRUE((*table)->Export(keys, &rows).ok());
  ASSERT_EQ(rows.steps.size(), keys.size());
  // Row i of `rows` as the table holds it (Lookup): its floats and its update count; its access
  // count into `accesses`.
  const auto expect_rows = [&](std::vector<int64_t>* accesses) {
    accesses->clear();
    for (size_t i = 0; i < keys.size(); ++i) {
      auto row = (*table)->Lookup(keys[i]);
      ASSERT_TRUE(row.ok() && row->has_value()) << keys[i];
      EXPECT_EQ(
          std::vector<float>(rows.values.begin() + i * 16, rows.values.begin() + (i + 1) * 16),
          (*row)->value);
      EXPECT_EQ(std::vector<float>(rows.state.begin() + i * 16, rows.state.begin() + (i + 1) * 16),
                (*row)->state);
      EXPECT_EQ(rows.steps[i], (*row)->steps);
      accesses->push_back((*row)->accesses);
    }
  };
  std::vector<int64_t> before, after;
  ASSERT_NO_FATAL_FAILURE(expect_rows(&before));
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_EQ(rows.steps[i], i < seen.size() ? 1 : 0);
  for (float& v : rows.values) v += 1;
  for (float& v : rows.state) v += 2;
  for (int64_t& s : rows.steps) s += 3;
  ASSERT_TRUE((*table)->Import(keys, rows).ok());
  ASSERT_NO_FATAL_FAILURE(expect_rows(&after));
  EXPECT_EQ(after, before);
  const SparseTableStats stats = (*table)->Stats();
  EXPECT_EQ(stats.memory_rows + stats.cold_rows, static_cast<int64_t>(keys.size()));
}

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

// Closed forms over many steps of a constant gradient g: Adagrad's accumulator grows by g^2 a
// step, so w_n = w_0 - lr g sum_{k=1..n} 1 / (sqrt(a_0 + k g^2) + eps); Adam's bias-corrected
// moments are exactly g and g^2, so every step moves w by lr g / (|g| + eps).
TEST(OptimizerTest, ConstantGradientClosedForms) {
  constexpr int kSteps = 50;
  for (const float g : {0.5f, -2.0f, 1e-3f}) {
    SCOPED_TRACE(g);
    OptimizerOptions o;
    o.learning_rate = 0.01f;
    o.kind = OptimizerKind::kAdagrad;
    float w = 1, a = o.initial_accumulator;
    double expected = 1;
    for (int k = 1; k <= kSteps; ++k) {
      ApplyUpdate(o, &w, &a, &g, 1, k);
      expected -= o.learning_rate * g /
                  (std::sqrt(double{o.initial_accumulator} + k * double{g} * g) + o.epsilon);
    }
    EXPECT_NEAR(a, o.initial_accumulator + kSteps * g * g, 1e-4 * (1 + kSteps * g * g));
    EXPECT_NEAR(w, expected, 1e-5);
    o.kind = OptimizerKind::kAdam;
    float mv[2] = {0, 0};
    w = 1;
    for (int k = 1; k <= kSteps; ++k) ApplyUpdate(o, &w, mv, &g, 1, k);
    EXPECT_NEAR(w, 1 - kSteps * o.learning_rate * g / (std::abs(g) + o.epsilon), 1e-4);
    o.kind = OptimizerKind::kSgd;
    w = 1;
    for (int k = 1; k <= kSteps; ++k) ApplyUpdate(o, &w, nullptr, &g, 1, k);
    EXPECT_NEAR(w, 1 - kSteps * o.learning_rate * g, 1e-5);
  }
}

}  // namespace
}  // namespace heterps::ps
