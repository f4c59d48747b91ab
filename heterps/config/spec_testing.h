// Helpers of the spec tests (spec_test.cc, cluster_spec_test.cc).
#pragma once

#include <string>

#include "gtest/gtest.h"

namespace heterps::config::testing {

// Replaces the first occurrence of `from` in `text` by `to` (the test fails if absent).
inline std::string Edit(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// A spec the parser must refuse, and how.
struct BadSpec {
  const char* what;
  std::string text;
  std::string message;  // the exact one-line error
};

}  // namespace heterps::config::testing
