#include "heterps/ps/deltas.h"

#include <algorithm>
#include <cmath>

namespace heterps::ps {

bool TakeDelta(const float* value, float* base, int64_t n, float threshold, float* delta,
               bool* caught_up) {
  float change = 0, size = 0;
  for (int64_t i = 0; i < n; ++i) {
    delta[i] = value[i] - base[i];
    change = std::max(change, std::abs(delta[i]));
    size = std::max(size, std::abs(base[i]));
  }
  if (threshold > 0 && !(change > threshold * size)) return false;
  *caught_up = true;
  for (int64_t i = 0; i < n; ++i) {
    base[i] += delta[i];
    *caught_up &= base[i] == value[i];
  }
  return true;
}

}  // namespace heterps::ps
