#include "heterps/ps/shard.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heterps::ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<SparseTable> Sparse(int dim) {
  SparseTableOptions options;
  options.dim = dim;
  options.optimizer.kind = OptimizerKind::kSgd;
  options.optimizer.learning_rate = 1;
  auto table = SparseTable::Create(options, nullptr);
  EXPECT_TRUE(table.ok()) << table.status();
  return *std::move(table);
}

std::unique_ptr<DenseTable> Dense(int64_t floats) {
  DenseTableOptions options;
  options.block_sizes = {floats};
  options.optimizer.kind = OptimizerKind::kSgd;
  options.optimizer.learning_rate = 1;
  auto table = DenseTable::Create(options);
  EXPECT_TRUE(table.ok()) << table.status();
  return *std::move(table);
}

TEST(ShardTest, HoldsItsTablesOnceAndListsThem) {
  Shard shard;
  ASSERT_TRUE(shard.AddSparse(3, Sparse(2)).ok());
  ASSERT_TRUE(shard.AddSparse(1, Sparse(4)).ok());
  ASSERT_TRUE(shard.AddDense(1, Dense(5)).ok());  // a dense table may share a sparse one's id
  const absl::Status again = shard.AddSparse(3, Sparse(2));
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(again.message(), HasSubstr("sparse table 3"));
  EXPECT_EQ(shard.AddDense(1, Dense(5)).code(), absl::StatusCode::kAlreadyExists);

  EXPECT_THAT(shard.sparse_ids(), ElementsAre(1, 3));
  EXPECT_THAT(shard.dense_ids(), ElementsAre(1));
  EXPECT_EQ(shard.num_tables(), 3);
  EXPECT_EQ(shard.sparse(1)->dim(), 4);
  EXPECT_EQ(shard.sparse(2), nullptr);
  EXPECT_EQ(shard.dense(3), nullptr);
  const CheckpointTables tables = shard.Tables();
  EXPECT_EQ(tables.sparse.size(), 2u);
  EXPECT_EQ(tables.sparse.at(3), shard.sparse(3));
  EXPECT_EQ(tables.dense.at(1), shard.dense(1));
}

// Pending gradients change nothing until Commit, which applies each key's sum once.
TEST(ShardTest, CommitAppliesThePendingSums) {
  Shard shard;
  ASSERT_TRUE(shard.AddSparse(0, Sparse(1)).ok());
  ASSERT_TRUE(shard.AddDense(0, Dense(2)).ok());
  std::vector<float> before(1), dense_before(2);
  ASSERT_TRUE(shard.sparse(0)->Pull(std::vector<uint64_t>{7}, absl::MakeSpan(before)).ok());
  ASSERT_TRUE(shard.dense(0)->Pull(0, absl::MakeSpan(dense_before)).ok());
  shard.pending().AddSparse(0, 0, std::vector<uint64_t>{7}, std::vector<float>{0.5f});
  shard.pending().AddSparse(0, 1, std::vector<uint64_t>{7}, std::vector<float>{0.25f});
  ASSERT_TRUE(shard.pending().AddDense(0, 0, 0, std::vector<double>{1, 2}).ok());
  EXPECT_GT(shard.pending().bytes(), 0);
  std::vector<float> now(1), dense_now(2);
  ASSERT_TRUE(shard.sparse(0)->Pull(std::vector<uint64_t>{7}, absl::MakeSpan(now)).ok());
  EXPECT_EQ(now[0], before[0]);

  ASSERT_TRUE(shard.Commit(1).ok());
  ASSERT_TRUE(shard.sparse(0)->Pull(std::vector<uint64_t>{7}, absl::MakeSpan(now)).ok());
  EXPECT_FLOAT_EQ(now[0], before[0] - 0.75f);  // SGD at rate 1: one update of the sum
  ASSERT_TRUE(shard.dense(0)->Pull(0, absl::MakeSpan(dense_now)).ok());
  EXPECT_FLOAT_EQ(dense_now[0], dense_before[0] - 1);
  EXPECT_FLOAT_EQ(dense_now[1], dense_before[1] - 2);
  EXPECT_EQ(shard.pending().bytes(), 0);
}

}  // namespace
}  // namespace heterps::ps
