// Plain-text tables for the terminal: columns sized to their contents.
#pragma once

#include <string>
#include <vector>

#include "heterps/base/numbers.h"

namespace heterps::tools {

class Table {
 public:
  // `right_aligned[i]` aligns column i to the right (numbers).
  Table(std::vector<std::string> header, std::vector<bool> right_aligned)
      : header_(std::move(header)), right_(std::move(right_aligned)) {}
  void AddRow(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  std::string Render() const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

using base::HumanNumber;  // heterps/base/numbers.h: the one style of numbers
using base::WithCommas;
// Seconds as "2.37 h", "14.2 min", "35.1 s", "12.3 ms".
std::string HumanSeconds(double seconds);

}  // namespace heterps::tools
