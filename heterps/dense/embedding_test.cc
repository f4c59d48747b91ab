#include "heterps/dense/embedding.h"

#include "gtest/gtest.h"

namespace heterps::dense {
namespace {

TEST(EmbeddingTest, PullsRowsAndPushesSummedGradients) {
  ps::InProcessPsClient client(2);
  ps::SparseTableOptions options;
  options.dim = 3;
  options.optimizer.kind = ps::OptimizerKind::kSgd;
  options.optimizer.learning_rate = 1;  // a row moves by exactly minus its summed gradient
  options.seed = 11;
  ASSERT_TRUE(client.CreateSparseTable(0, options).ok());
  EmbeddingBag bag(&client, 0, /*slots=*/2, /*dim=*/3);
  // Two samples; key 7 appears in both.
  const std::vector<uint64_t> keys = {7, 8, 9, 7};
  Matrix<float> vectors;
  ASSERT_TRUE(bag.Forward(keys, 2, &vectors).ok());
  ASSERT_EQ(vectors.rows(), 2);
  ASSERT_EQ(vectors.cols(), 6);
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> initial =
        client.sparse(0, ps::ServerOf(keys[i], 2))->InitialValue(keys[i]);
    for (int d = 0; d < 3; ++d) EXPECT_EQ(vectors(i / 2, (i % 2) * 3 + d), initial[d]) << i;
  }
  Matrix<float> grads(2, 6);
  grads << 1, 2, 3, 4, 5, 6,  //
      7, 8, 9, 10, 20, 30;
  ASSERT_TRUE(bag.Backward(grads).ok());
  Matrix<float> after;
  ASSERT_TRUE(bag.Forward(keys, 2, &after).ok());
  for (int d = 0; d < 3; ++d) {
    EXPECT_FLOAT_EQ(after(0, d), vectors(0, d) - 11 * (d + 1));     // key 7: (1,2,3) + (10,20,30)
    EXPECT_FLOAT_EQ(after(1, 3 + d), after(0, d));                  // key 7 again, same row
    EXPECT_FLOAT_EQ(after(0, 3 + d), vectors(0, 3 + d) - (4 + d));  // key 8
    EXPECT_FLOAT_EQ(after(1, d), vectors(1, d) - (7 + d));          // key 9
  }
  EXPECT_FALSE(bag.Forward(keys, 3, &after).ok());
}

}  // namespace
}  // namespace heterps::dense
