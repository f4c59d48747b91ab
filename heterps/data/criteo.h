// The Criteo display-advertising TSV format, and the table keys its categorical values become.
//
// A line is 40 tab-separated fields and a newline ("\r\n" too):
//   label \t I1 .. I13 \t C1 .. C26
// label: 0 or 1. I1..I13: decimal integers, possibly negative, possibly empty. C1..C26:
// hexadecimal strings of at most 16 digits (8 in the Criteo data), possibly empty.
//
// What a model sees (docs/data.md):
// - dense feature j: log(1 + max(I_j, 0)), and 0 when I_j is empty;
// - categorical slot s (0-based) with value v: the key SlotKey(s, v), where an empty field is the
//   value kMissing. SlotKey(s, v) = MixKey(v ^ MixKey(s + 1)) with base::MixKey (SplitMix64's
//   finalizer): stable across runs and hosts, and different in different slots for equal values.
//
// Thread safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace heterps::data {

inline constexpr int kDenseFeatures = 13;
inline constexpr int kSparseSlots = 26;
inline constexpr uint64_t kMissing = ~uint64_t{0};  // the value of an empty categorical field

// The key of value `value` in categorical slot `slot`.
uint64_t SlotKey(int slot, uint64_t value);

// log(1 + max(x, 0)).
float DenseTransform(int64_t x);

// One parsed line.
struct Example {
  float label = 0;
  std::array<float, kDenseFeatures> dense{};  // transformed
  std::array<uint64_t, kSparseSlots> keys{};  // SlotKey of each slot
};

// Parses one line (without its newline). InvalidArgument naming the field ("label", "I3",
// "C17", or "line" for a wrong field count) and the problem; the caller adds file and line.
absl::Status ParseLine(absl::string_view line, Example* out);

// Examples stored as arrays, row-major: what a reader hands to training.
struct Batch {
  int size = 0;
  std::vector<float> labels;   // size
  std::vector<float> dense;    // size * kDenseFeatures
  std::vector<uint64_t> keys;  // size * kSparseSlots
  void Clear() {
    size = 0;
    labels.clear();
    dense.clear();
    keys.clear();
  }
  void Add(const Example& e);
};

}  // namespace heterps::data
