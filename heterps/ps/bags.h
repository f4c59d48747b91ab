// Embedding bags: how one embedding layer's lookup for a micro-batch turns rows into the vectors
// the dense layers take, and their gradients back into the rows' (docs/gpu.md, "The tier feeds
// the stage"). One definition of the arithmetic for every place that does it: the stage on the
// host (PoolBags, SpreadBagGrads) and the GPU tier on its device (GpuTier::LookupBags and
// PushBags, which must give the same floats).
//
// A micro-batch of `samples` samples has `slots` bags per sample. With `offsets` empty every bag
// holds one key: bag b = r * slots + s is key b (one-hot). Otherwise bag b holds keys
// [offsets[b], offsets[b + 1]) of `keys` (multi-hot: zero, one or several keys). A bag's vector is
// the sum of its keys' rows (`mean`: their mean; an empty bag's is zeros). Row r of the output
// holds sample r's bags side by side: bag (r, s) at floats [column + s * dim, column + (s + 1) *
// dim) of the row, rows `stride` floats apart.
//
// The arithmetic, which the device's code repeats: a one-hot bag's vector is its row, copied; a
// multi-hot bag's starts at 0.0f and adds its rows in key order, then is multiplied by 1.0f /
// count for a mean. A key's gradient is its bag's gradient (multi-hot mean: times 1.0f / count).
//
// Thread safety: functions of their arguments alone.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace heterps::ps {

struct Bags {
  absl::Span<const uint64_t> keys;
  absl::Span<const int32_t> offsets;  // samples * slots + 1 ascending, or empty (one-hot)
  int64_t samples = 0, slots = 0;
  bool mean = false;

  bool one_hot() const { return offsets.empty(); }
  int64_t bags() const { return samples * slots; }
};

// InvalidArgument, naming `what`, for bags whose keys and offsets disagree: one-hot with keys
// other than samples x slots; offsets not samples x slots + 1, not ascending from 0, or not ending
// at the keys' count.
absl::Status CheckBags(const Bags& bags, absl::string_view what);

// The bags' vectors from their keys' rows (`rows`: one row of `dim` floats per key, in key
// order) into `out` as the header says. Checked bags (CheckBags).
void PoolBags(const Bags& bags, int64_t dim, const float* rows, float* out, int64_t stride,
              int64_t column);

// The keys' gradients (one row of `dim` floats per key, into `grads`) from the bags' gradients
// `d`, laid out as PoolBags' output.
void SpreadBagGrads(const Bags& bags, int64_t dim, const float* d, int64_t stride, int64_t column,
                    float* grads);

}  // namespace heterps::ps
