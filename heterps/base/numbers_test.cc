#include "heterps/base/numbers.h"

#include <limits>

#include "gtest/gtest.h"

namespace heterps::base {
namespace {

TEST(NumbersTest, CommasGroupWholeNumbers) {
  EXPECT_EQ(WithCommas(0), "0");
  EXPECT_EQ(WithCommas(999), "999");
  EXPECT_EQ(WithCommas(1000), "1,000");
  EXPECT_EQ(WithCommas(1234567.8), "1,234,568");
  EXPECT_EQ(WithCommas(4373472329), "4,373,472,329");
  EXPECT_EQ(WithCommas(-1234), "-1,234");
  EXPECT_EQ(WithCommas(-0.2), "0");
  EXPECT_EQ(WithCommas(999999999999999), "999,999,999,999,999");
  EXPECT_EQ(WithCommas(1e300), "1e+300");  // not 301 digits
  EXPECT_EQ(WithCommas(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(WithCommas(std::numeric_limits<double>::quiet_NaN()), "nan");
}

TEST(NumbersTest, SmallQuantitiesKeepThreeDigits) {
  EXPECT_EQ(HumanNumber(7570.2), "7,570");
  EXPECT_EQ(HumanNumber(999.4), "999");
  EXPECT_EQ(HumanNumber(999.7), "1,000");
  EXPECT_EQ(HumanNumber(132168), "132,168");
  EXPECT_EQ(HumanNumber(1.4962), "1.5");
  EXPECT_EQ(HumanNumber(7.5712), "7.57");
  EXPECT_EQ(HumanNumber(0.012345), "0.0123");
  EXPECT_EQ(HumanNumber(2), "2");
  EXPECT_EQ(HumanNumber(0), "0");
  EXPECT_EQ(HumanNumber(-42.5), "-42.5");
}

TEST(NumbersTest, DollarsShowCentsOrThreeDigits) {
  EXPECT_EQ(HumanUsd(12.04), "$12.04");
  EXPECT_EQ(HumanUsd(1234.567), "$1,234.57");
  EXPECT_EQ(HumanUsd(0.999), "$0.999");
  EXPECT_EQ(HumanUsd(0.0123456), "$0.0123");
  EXPECT_EQ(HumanUsd(1.999), "$2.00");
  EXPECT_EQ(HumanUsd(-3.5), "-$3.50");
  EXPECT_EQ(HumanUsd(0.000051), "$0.0000510");
  EXPECT_EQ(HumanUsd(0.1), "$0.100");
  EXPECT_EQ(HumanUsd(0), "$0.00");
  EXPECT_EQ(HumanUsd(-0.25), "-$0.250");
}

}  // namespace
}  // namespace heterps::base
