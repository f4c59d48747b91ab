// Near misses of a word among the words a reader knows: what a "did you mean" hint needs.
//
//   Nearest("batch_sise", {"name", "batch_size", "layers"})  // "batch_size"
//
// Thread safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace heterps::base {

// The optimal-string-alignment distance between `a` and `b`: the fewest insertions, deletions,
// substitutions and swaps of two neighbouring characters (each counts 1) that turn one into the
// other. Bytes, not code points; O(|a| * |b|) time.
int EditDistance(absl::string_view a, absl::string_view b);

// The word of `known` nearest to `word`, if it is near enough to be a typo of it: at most 1 edit
// for words of up to 4 characters, at most 2 for longer ones, and never `word` itself. Ties go to
// the first in `known`. Empty when none is.
std::string Nearest(absl::string_view word, const std::vector<std::string>& known);

// `text` in single quotes for a message, cut to its first `max_bytes` bytes (at a UTF-8
// character boundary) when longer, with how long it was: 'abc...' (10,485,760 bytes). An input
// is quoted, never echoed whole.
std::string Quote(absl::string_view text, size_t max_bytes = 64);

}  // namespace heterps::base
