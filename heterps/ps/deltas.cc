#include "heterps/ps/deltas.h"

#include <algorithm>
#include <cmath>

namespace heterps::ps {

bool PassingDelta(const float* value, const float* base, int64_t n, float threshold,
                  float* delta) {
  float change = 0, size = 0;
  for (int64_t i = 0; i < n; ++i) {
    delta[i] = value[i] - base[i];
    change = std::max(change, std::abs(delta[i]));
    size = std::max(size, std::abs(base[i]));
  }
  return threshold <= 0 || change > threshold * size;
}

bool TakeDelta(const float* value, float* base, int64_t n, float threshold, float* delta,
               bool* caught_up) {
  if (!PassingDelta(value, base, n, threshold, delta)) return false;
  *caught_up = true;
  for (int64_t i = 0; i < n; ++i) {
    base[i] += delta[i];
    *caught_up &= base[i] == value[i];
  }
  return true;
}

bool ApplyMerged(float* value, float* base, const float* merged, const float* own, int64_t n) {
  bool caught_up = true;
  for (int64_t i = 0; i < n; ++i) {
    const float unsent = value[i] - (base[i] + own[i]);
    base[i] += merged[i];
    value[i] = base[i] + unsent;
    caught_up &= value[i] == base[i];
  }
  return caught_up;
}

}  // namespace heterps::ps
