#include "tools/table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace heterps::tools {

std::string Table::Render() const {
  std::vector<size_t> width(header_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  measure(header_);
  for (const auto& row : rows_) measure(row);
  auto line = [&](const std::vector<std::string>& row) {
    std::string out;
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      std::string pad(width[i] - row[i].size(), ' ');
      if (i > 0) out += "  ";
      out += right_[i] ? pad + row[i] : (i + 1 == row.size() ? row[i] : row[i] + pad);
    }
    return out + "\n";
  };
  std::string out = line(header_);
  size_t total = 0;
  for (size_t w : width) total += w;
  out += std::string(total + 2 * (width.size() - 1), '-') + "\n";
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string HumanSeconds(double seconds) {
  if (seconds >= 2 * 86400) return absl::StrFormat("%.1f days", seconds / 86400);
  if (seconds >= 3600) return absl::StrFormat("%.2f h", seconds / 3600);
  if (seconds >= 60) return absl::StrFormat("%.1f min", seconds / 60);
  if (seconds >= 1) return absl::StrFormat("%.2f s", seconds);
  return absl::StrFormat("%.2f ms", seconds * 1e3);
}

}  // namespace heterps::tools
