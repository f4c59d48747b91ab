#include "heterps/ps/ps_client.h"

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/rocksdb_store.h"

namespace heterps::ps {
namespace {

SparseTableOptions Options(int64_t budget) {
  SparseTableOptions o;
  o.dim = 4;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.seed = 3;
  o.memory_budget_bytes = budget;
  return o;
}

TEST(PsClientTest, ShardedClientAnswersLikeOneServer) {
  InProcessPsClient one(1), two(2);
  ASSERT_TRUE(one.CreateSparseTable(0, Options(0)).ok());
  // The sharded client also spills to RocksDB, each server its own directory.
  ASSERT_TRUE(two.CreateSparseTable(0, Options(4096), [](int server) {
                   auto store = RocksDbColdStore::Open(::testing::TempDir() + "/client_cold_" +
                                                       std::to_string(server));
                   return store.ok() ? std::unique_ptr<ColdStore>(std::move(*store)) : nullptr;
                 }).ok());
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 200; ++step) {
    std::vector<uint64_t> keys(1 + rng() % 40);
    for (uint64_t& k : keys) k = rng() % 500;  // plenty of repeats within a batch
    std::vector<float> a(keys.size() * 4), b(keys.size() * 4);
    if (step % 2 == 0) {
      ASSERT_TRUE(one.Wait(one.PullSparse(0, keys, absl::MakeSpan(a))).ok());
      ASSERT_TRUE(two.Wait(two.PullSparse(0, keys, absl::MakeSpan(b))).ok());
      ASSERT_EQ(a, b) << "step " << step;
    } else {
      for (float& g : a) g = normal(rng);
      ASSERT_TRUE(one.Wait(one.PushSparse(0, keys, a)).ok());
      ASSERT_TRUE(two.Wait(two.PushSparse(0, keys, a)).ok());
    }
  }
  // Each key lives on its documented server, and only there.
  for (uint64_t key = 0; key < 500; ++key) {
    const int home = ServerOf(key, 2);
    auto there = two.sparse(0, home)->Lookup(key);
    auto elsewhere = two.sparse(0, 1 - home)->Lookup(key);
    ASSERT_TRUE(there.ok() && elsewhere.ok());
    EXPECT_FALSE(elsewhere->has_value()) << key;
    auto reference = one.sparse(0, 0)->Lookup(key);
    EXPECT_EQ(there->has_value(), reference->has_value());
    if (there->has_value()) {
      EXPECT_EQ((*there)->steps, (*reference)->steps);
    }
  }
  EXPECT_GT(two.sparse(0, 0)->Stats().spills, 0);
}

TEST(PsClientTest, RepeatedKeysInAPushAreSummedIntoOneUpdate) {
  InProcessPsClient client(2);
  SparseTableOptions o = Options(0);
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 1;
  ASSERT_TRUE(client.CreateSparseTable(0, o).ok());
  std::vector<uint64_t> key = {42};
  std::vector<float> before(4), after(4);
  ASSERT_TRUE(client.Wait(client.PullSparse(0, key, absl::MakeSpan(before))).ok());
  std::vector<uint64_t> twice = {42, 42};
  std::vector<float> grads = {1, 1, 1, 1, 2, 2, 2, 2};
  ASSERT_TRUE(client.Wait(client.PushSparse(0, twice, grads)).ok());
  ASSERT_TRUE(client.Wait(client.PullSparse(0, key, absl::MakeSpan(after))).ok());
  for (int d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(after[d], before[d] - 3);
  EXPECT_EQ((*client.sparse(0, ServerOf(42, 2))->Lookup(42))->steps, 1);
}

TEST(PsClientTest, DenseTablesAndErrors) {
  InProcessPsClient client(2);
  DenseTableOptions o;
  o.block_sizes = {3, 5};
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 0.5f;
  ASSERT_TRUE(client.CreateDenseTable(1, o).ok());
  std::vector<float> w(5), w2(5);
  ASSERT_TRUE(client.Wait(client.PullDense(1, 1, absl::MakeSpan(w))).ok());
  std::vector<float> g = {2, 2, 2, 2, 2};
  ASSERT_TRUE(client.Wait(client.PushDense(1, 1, g)).ok());
  ASSERT_TRUE(client.Wait(client.PullDense(1, 1, absl::MakeSpan(w2))).ok());
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(w2[i], w[i] - 1);
  EXPECT_EQ(client.Wait(client.PullDense(1, 0, absl::MakeSpan(w))).code(),
            absl::StatusCode::kInvalidArgument);  // block 0 has 3 floats
  EXPECT_EQ(client.Wait(client.PullDense(7, 0, absl::MakeSpan(w))).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client.Wait(12345).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client.CreateDenseTable(1, o).code(), absl::StatusCode::kAlreadyExists);
  DenseTableOptions bad;
  bad.block_sizes = {4, 0};
  EXPECT_THAT(std::string(DenseTable::Create(bad).status().message()),
              ::testing::HasSubstr("block 1 has size 0"));
}

}  // namespace
}  // namespace heterps::ps
