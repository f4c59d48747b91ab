// Numbers for people: the one style every message, table and summary of heterps prints them in.
//
//   WithCommas(4373472329)    // "4,373,472,329"
//   HumanNumber(7570.2)       // "7,570"
//   HumanNumber(1.4962)       // "1.5"
//   HumanNumber(0.012345)     // "0.0123"
//
// Whole quantities of a thousand or more are grouped by commas and rounded to a unit; smaller
// ones keep three significant digits; magnitudes of 1e15 and beyond (no real count or rate is
// that large, but an input may be) are written as 1.23e+300 rather than as hundreds of digits.
//
// Thread safety: pure functions.
#pragma once

#include <string>

namespace heterps::base {

// `value` rounded to a whole number, grouped by commas: 1234567.8 -> "1,234,568"; "-1,234";
// beyond 1e15 in magnitude "1e+300"; "inf", "-inf", "nan" for those.
std::string WithCommas(double value);

// A quantity of any size: WithCommas from 1,000 up; else at most three significant digits,
// without trailing zeros ("999", "7.57", "1.5", "0.0123", "0").
std::string HumanNumber(double value);

// Dollars: "$1,234.56", "$12.04", and below a dollar three significant digits in fixed notation
// ("$0.0123", "$0.0000510": a short job costs fractions of a cent); "$0.00" for nothing.
std::string HumanUsd(double usd);

}  // namespace heterps::base
