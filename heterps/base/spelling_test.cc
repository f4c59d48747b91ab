#include "heterps/base/spelling.h"

#include <functional>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace heterps::base {
namespace {

// The definition, recursively: the oracle of the dynamic programme on short words.
int Recursive(const std::string& a, const std::string& b, size_t i, size_t j) {
  if (i == 0) return static_cast<int>(j);
  if (j == 0) return static_cast<int>(i);
  int best = std::min(Recursive(a, b, i - 1, j) + 1, Recursive(a, b, i, j - 1) + 1);
  best = std::min(best, Recursive(a, b, i - 1, j - 1) + (a[i - 1] == b[j - 1] ? 0 : 1));
  if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
    best = std::min(best, Recursive(a, b, i - 2, j - 2) + 1);
  }
  return best;
}

TEST(SpellingTest, DistanceAgreesWithTheDefinition) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    auto word = [&] {
      std::string w(rng() % 7, 'a');
      for (char& c : w) c = static_cast<char>('a' + rng() % 3);
      return w;
    };
    const std::string a = word(), b = word();
    ASSERT_EQ(EditDistance(a, b), Recursive(a, b, a.size(), b.size())) << a << " " << b;
    ASSERT_EQ(EditDistance(a, b), EditDistance(b, a)) << a << " " << b;
  }
  EXPECT_EQ(EditDistance("batch_sise", "batch_size"), 1);
  EXPECT_EQ(EditDistance("bacth_size", "batch_size"), 1);  // a swap is one edit
  EXPECT_EQ(EditDistance("", "abc"), 3);
}

TEST(SpellingTest, NearestIsATypoOrNothing) {
  const std::vector<std::string> known = {"name", "batch_size", "layers", "data", "dim"};
  EXPECT_EQ(Nearest("batch_sise", known), "batch_size");
  EXPECT_EQ(Nearest("batchsize", known), "batch_size");
  EXPECT_EQ(Nearest("layer", known), "layers");
  EXPECT_EQ(Nearest("dims", known), "dim");
  EXPECT_EQ(Nearest("optimizer", known), "");
  EXPECT_EQ(Nearest("date", known), "data");
  EXPECT_EQ(Nearest("dx", known), "");    // two edits are too many for a short word
  EXPECT_EQ(Nearest("name", known), "");  // the word itself is no suggestion
}

TEST(SpellingTest, QuotesAreCut) {
  EXPECT_EQ(Quote("cpu-spot"), "'cpu-spot'");
  EXPECT_EQ(Quote(std::string(10 << 20, 'x'), 4), "'xxxx...' (10,485,760 bytes)");
  EXPECT_EQ(Quote("ab\xc3\xa9"
                  "cd",
                  3),
            "'ab...' (6 bytes)");  // not inside the two bytes of é
}

}  // namespace
}  // namespace heterps::base
