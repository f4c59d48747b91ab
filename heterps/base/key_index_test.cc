#include "heterps/base/key_index.h"

#include <cstdint>
#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "gtest/gtest.h"

namespace heterps::base {
namespace {

// Inserts `keys` as a batch and checks every answer against a hash map built from empty.
void CheckBatch(KeyIndex& index, const std::vector<uint64_t>& keys, size_t hint) {
  index.Reset(hint);
  absl::flat_hash_map<uint64_t, uint32_t> oracle;
  for (uint64_t key : keys) {
    const uint32_t next = static_cast<uint32_t>(oracle.size());
    auto [expected, expected_fresh] = oracle.try_emplace(key, next);
    auto [at, fresh] = index.Insert(key, next);
    ASSERT_EQ(fresh, expected_fresh) << "key " << key;
    ASSERT_EQ(at, expected->second) << "key " << key;
  }
  EXPECT_EQ(index.size(), oracle.size());
}

TEST(KeyIndexTest, EachBatchAnswersAsAMapBuiltFromEmpty) {
  std::mt19937_64 random(7);
  KeyIndex index;
  for (int batch = 0; batch < 60; ++batch) {
    // Batches of varied sizes over a small key range (repeats, and keys of earlier batches that
    // this one must not see), hints exact, low (the table grows) and far too high (re-sized).
    const size_t n = random() % 3000;
    const uint64_t range = 1 + random() % 4000;
    std::vector<uint64_t> keys(n);
    for (uint64_t& key : keys) key = random() % range;
    const size_t hint = batch % 3 == 0 ? n : batch % 3 == 1 ? n / 8 : 40 * n + 100;
    CheckBatch(index, keys, hint);
  }
}

TEST(KeyIndexTest, ATableKeptForBatchesOfOneSizeForgetsEachBatch) {
  // The same hint every time: one table, its slots holding older batches' keys (in the probe
  // chains of this one's) that must not be found.
  std::mt19937_64 random(3);
  KeyIndex index;
  index.Reset(500);
  const size_t bytes = index.bytes();
  for (int batch = 0; batch < 200; ++batch) {
    std::vector<uint64_t> keys(300 + random() % 200);
    for (uint64_t& key : keys) key = random() % 2000;
    CheckBatch(index, keys, 500);
    EXPECT_EQ(index.bytes(), bytes);
  }
}

TEST(KeyIndexTest, AKeyOfTheLastBatchIsNewInTheNext) {
  KeyIndex index;
  index.Reset(4);
  EXPECT_TRUE(index.Insert(42, 0).second);
  EXPECT_FALSE(index.Insert(42, 1).second);
  index.Reset(4);
  auto [at, fresh] = index.Insert(42, 5);
  EXPECT_TRUE(fresh);
  EXPECT_EQ(at, 5u);
  EXPECT_EQ(index.size(), 1u);
}

TEST(KeyIndexTest, KeepsItsTableForBatchesOfTheSameSizeAndReleasesIt) {
  KeyIndex index;
  index.Reset(1000);
  const size_t bytes = index.bytes();
  EXPECT_GE(bytes, 2 * 1000 * 16u);
  index.Reset(900);
  EXPECT_EQ(index.bytes(), bytes);
  index.Reset(10);  // far smaller: a table that fits, the large one freed
  EXPECT_LT(index.bytes(), bytes);
  index.Trim(index.bytes());  // within the size: kept
  EXPECT_GT(index.bytes(), 0u);
  index.Trim(index.bytes() - 1);
  EXPECT_EQ(index.bytes(), 0u);
  index.Reset(1000);
  index.Release();
  EXPECT_EQ(index.bytes(), 0u);
  CheckBatch(index, {3, 1, 3, 2}, 0);  // grows from nothing
}

TEST(KeyIndexTest, InsertWithoutResetWorks) {
  KeyIndex index;
  for (uint32_t k = 0; k < 100; ++k) EXPECT_TRUE(index.Insert(k * 7919, k).second);
  for (uint32_t k = 0; k < 100; ++k) EXPECT_EQ(index.Insert(k * 7919, 999).first, k);
}

}  // namespace
}  // namespace heterps::base
