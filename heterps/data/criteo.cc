#include "heterps/data/criteo.h"

#include <charconv>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "heterps/base/mix_key.h"

namespace heterps::data {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", text.size() > 24 ? absl::StrCat(text.substr(0, 24), "...") : text,
                      "\"");
}

}  // namespace

uint64_t SlotKey(int slot, uint64_t value) {
  return base::MixKey(value ^ base::MixKey(static_cast<uint64_t>(slot) + 1));
}

float DenseTransform(int64_t x) { return x <= 0 ? 0.0f : static_cast<float>(std::log1p(x)); }

absl::Status ParseLine(absl::string_view line, Example* out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t start = 0;
  for (int field = 0; field < 1 + kDenseFeatures + kSparseSlots; ++field) {
    size_t end = line.find('\t', start);
    const bool last = field == kDenseFeatures + kSparseSlots;
    if (end == absl::string_view::npos) {
      if (!last) {
        return Bad("line", absl::StrCat("has ", field + 1, " fields, expected ",
                                        1 + kDenseFeatures + kSparseSlots));
      }
      end = line.size();
    } else if (last) {
      return Bad("line",
                 absl::StrCat("has more than ", 1 + kDenseFeatures + kSparseSlots, " fields"));
    }
    const absl::string_view text = line.substr(start, end - start);
    start = end + 1;
    if (field == 0) {
      if (text != "0" && text != "1")
        return Bad("label", absl::StrCat(Quoted(text), " is not 0 or 1"));
      out->label = text == "1" ? 1.0f : 0.0f;
    } else if (field <= kDenseFeatures) {
      const std::string name = absl::StrCat("I", field);
      int64_t x = 0;
      if (!text.empty()) {
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
        if (ec != std::errc() || ptr != text.data() + text.size()) {
          return Bad(name, absl::StrCat(Quoted(text), " is not an integer"));
        }
      }
      out->dense[field - 1] = DenseTransform(x);
    } else {
      const int slot = field - 1 - kDenseFeatures;
      uint64_t value = kMissing;
      if (!text.empty()) {
        if (text.size() > 16) {
          return Bad(absl::StrCat("C", slot + 1),
                     absl::StrCat(Quoted(text), " has more than 16 hex digits"));
        }
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value, 16);
        if (ec != std::errc() || ptr != text.data() + text.size()) {
          return Bad(absl::StrCat("C", slot + 1),
                     absl::StrCat(Quoted(text), " is not hexadecimal"));
        }
      }
      out->keys[slot] = SlotKey(slot, value);
    }
  }
  return absl::OkStatus();
}

void Batch::Add(const Example& e) {
  ++size;
  labels.push_back(e.label);
  dense.insert(dense.end(), e.dense.begin(), e.dense.end());
  keys.insert(keys.end(), e.keys.begin(), e.keys.end());
}

}  // namespace heterps::data
