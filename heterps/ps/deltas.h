// The arithmetic of deltas between regions (docs/regions.md, GEO), shared by the sparse and the
// dense tables: a row's (a block's) change since its base, whether it is significant enough to
// send, the base moving on once it is sent, and a window's merge taking a row onto the base every
// region shares.
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

// The same test with nothing moved: `delta` = value - base, and whether it passes `threshold`.
bool PassingDelta(const float* value, const float* base, int64_t n, float threshold, float* delta);

// A window's merge (`merged`, what every region adds to the base it shares) applied to a row
// whose base is `base` (its value where the row is not tracked) and of which this region sent
// `own` (zeros where it sent nothing): the base becomes base + merged (in float, so that every
// region's base is the same to the bit), and the value that base plus what this region has not
// sent yet (value - (base + own), in float: zero where it has changed nothing since). Returns
// whether the value is its base again (nothing left to send).
bool ApplyMerged(float* value, float* base, const float* merged, const float* own, int64_t n);

}  // namespace heterps::ps
