// The embedding bags' host arithmetic, worked by hand: the oracle of the GPU tier's device path
// (gpu_tier_test) and what the stage runs on the host.
#include "heterps/ps/bags.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heterps::ps {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Two samples of two slots, dim 2, in rows of 6 floats from column 1: bags {a, b}, {}, {c}, {a, a,
// c} of rows a = (1, 2), b = (3, 4), c = (10, 20).
TEST(BagsTest, PoolAndSpreadAsWorkedByHand) {
  const std::vector<uint64_t> keys = {5, 6, 7, 5, 5, 7};
  const std::vector<int32_t> offsets = {0, 2, 2, 3, 6};
  const std::vector<float> rows = {1, 2, 3, 4, 10, 20, 1, 2, 1, 2, 10, 20};
  for (bool mean : {false, true}) {
    const Bags bags{keys, offsets, 2, 2, mean};
    ASSERT_TRUE(CheckBags(bags, "test").ok());
    std::vector<float> out(12, -1.0f);
    PoolBags(bags, 2, rows.data(), out.data(), 6, 1);
    if (mean) {
      EXPECT_THAT(out, ElementsAre(-1, 2, 3, 0, 0, -1, -1, 10, 20, 4, 8, -1));
    } else {
      EXPECT_THAT(out, ElementsAre(-1, 4, 6, 0, 0, -1, -1, 10, 20, 12, 24, -1));
    }
    // Each key gets its bag's gradient (over the bag's size for a mean); the padding is not read.
    const std::vector<float> d = {99, 1, 2, 3, 4, 99, 99, 5, 6, 3, 6, 99};
    std::vector<float> grads(12, -1.0f);
    SpreadBagGrads(bags, 2, d.data(), 6, 1, grads.data());
    if (mean) {
      EXPECT_THAT(grads, ElementsAre(0.5, 1, 0.5, 1, 5, 6, 1, 2, 1, 2, 1, 2));
    } else {
      EXPECT_THAT(grads, ElementsAre(1, 2, 1, 2, 5, 6, 3, 6, 3, 6, 3, 6));
    }
  }
  // One-hot: bag b is key b, its row copied.
  const Bags one_hot{absl::MakeConstSpan(keys.data(), 4), {}, 2, 2, true};
  ASSERT_TRUE(CheckBags(one_hot, "test").ok());
  std::vector<float> out(8);
  PoolBags(one_hot, 2, rows.data(), out.data(), 4, 0);
  EXPECT_THAT(out, ElementsAre(1, 2, 3, 4, 10, 20, 1, 2));
  std::vector<float> grads(8);
  SpreadBagGrads(one_hot, 2, out.data(), 4, 0, grads.data());
  EXPECT_EQ(grads, out);
}

TEST(BagsTest, BagsThatDisagreeWithThemselvesAreRefused) {
  const std::vector<uint64_t> keys = {1, 2, 3};
  EXPECT_THAT(CheckBags({keys, {}, 2, 2, false}, "layer x").message(),
              HasSubstr("layer x: 3 keys for 4 one-key bags (2 samples x 2 slots)"));
  const std::vector<int32_t> short_offsets = {0, 3};
  EXPECT_THAT(CheckBags({keys, short_offsets, 1, 2, false}, "layer x").message(),
              HasSubstr("2 offsets for 2 bags (want 3)"));
  const std::vector<int32_t> past = {0, 1, 4};
  EXPECT_THAT(CheckBags({keys, past, 1, 2, false}, "layer x").message(),
              HasSubstr("ascend from 0 to the keys' count 3"));
  const std::vector<int32_t> down = {0, 2, 1, 3};
  EXPECT_FALSE(CheckBags({keys, down, 1, 3, false}, "layer x").ok());
  EXPECT_THAT(CheckBags({keys, {}, 1, 0, false}, "layer x").message(), HasSubstr("0 slots"));
  const std::vector<int32_t> fine = {0, 0, 3, 3};
  EXPECT_TRUE(CheckBags({keys, fine, 1, 3, true}, "layer x").ok());
}

}  // namespace
}  // namespace heterps::ps
