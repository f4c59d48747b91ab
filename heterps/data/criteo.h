// Criteo's display-advertising TSV layout, the default data layout (schema.h: CriteoSchema).
//
// A line is 40 tab-separated fields and a newline ("\r\n" too):
//   label \t I1 .. I13 \t C1 .. C26
// label: 0 or 1. I1..I13: decimal integers, possibly negative, possibly empty. C1..C26:
// hexadecimal strings of at most 16 digits (8 in the Criteo data), possibly empty.
//
// What a model sees (docs/data.md):
// - dense feature j: log(1 + max(I_j, 0)), and 0 when I_j is empty;
// - categorical slot s (0-based) with value v: the key SlotKey(s, v), where an empty field is the
//   value kMissing.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>

#include "heterps/data/schema.h"

namespace heterps::data {

// log(1 + max(x, 0)).
float DenseTransform(int64_t x);

}  // namespace heterps::data
