#include "heterps/base/spelling.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "heterps/base/numbers.h"

namespace heterps::base {

int EditDistance(absl::string_view a, absl::string_view b) {
  // Three rows of the dynamic programme: the one before last (for swaps), the last, this one.
  std::vector<int> before(b.size() + 1), last(b.size() + 1), row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) last[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int substitute = last[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({last[j] + 1, row[j - 1] + 1, substitute});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        row[j] = std::min(row[j], before[j - 2] + 1);
      }
    }
    std::swap(before, last);
    std::swap(last, row);
  }
  return last[b.size()];
}

std::string Nearest(absl::string_view word, const std::vector<std::string>& known) {
  const int allowed = word.size() <= 4 ? 1 : 2;
  std::string best;
  int best_distance = allowed + 1;
  for (const std::string& k : known) {
    if (k == word) continue;
    const int d = EditDistance(word, k);
    if (d < best_distance) best = k, best_distance = d;
  }
  return best;
}

std::string Quote(absl::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return absl::StrCat("'", text, "'");
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return absl::StrCat("'", text.substr(0, cut), "...' (",
                      WithCommas(static_cast<double>(text.size())), " bytes)");
}

}  // namespace heterps::base
