// The arithmetic of deltas between regions (docs/regions.md, GEO), shared by the sparse and the
// dense tables: a row's (a block's) change since its base, whether it is significant enough to
// send, and the base moving on once it is sent.
#pragma once

#include <cstdint>

namespace heterps::ps {

// delta = value - base over `n` floats (written to `delta`). It passes where `threshold` is 0, or
// where its largest |delta| exceeds `threshold` times the base's largest |value| (Gaia's
// significance; any change of a zero base passes). Where it passes, the base moves on by the delta
// (base + delta, in float) and `*caught_up` says whether that is the value again (else the
// rounding stays as a residual); returns whether it passed. Where it does not, nothing changes.
bool TakeDelta(const float* value, float* base, int64_t n, float threshold, float* delta,
               bool* caught_up);

}  // namespace heterps::ps
