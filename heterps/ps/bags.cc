#include "heterps/ps/bags.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace heterps::ps {

absl::Status CheckBags(const Bags& bags, absl::string_view what) {
  const int64_t n = bags.bags();
  const int64_t keys = static_cast<int64_t>(bags.keys.size());
  if (bags.samples < 0 || bags.slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", bags.samples, " samples of ", bags.slots, " slots"));
  }
  if (bags.one_hot()) {
    if (keys == n) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", keys, " keys for ", n,
                                                   " one-key bags (", bags.samples, " samples x ",
                                                   bags.slots, " slots)"));
  }
  if (static_cast<int64_t>(bags.offsets.size()) != n + 1) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", bags.offsets.size(), " offsets for ",
                                                   n, " bags (want ", n + 1, ")"));
  }
  if (bags.offsets.front() != 0 || bags.offsets.back() != keys ||
      !std::is_sorted(bags.offsets.begin(), bags.offsets.end())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the offsets must ascend from 0 to the keys' count ", keys,
                     " (they run from ", bags.offsets.front(), " to ", bags.offsets.back(), ")"));
  }
  return absl::OkStatus();
}

void PoolBags(const Bags& bags, int64_t dim, const float* rows, float* out, int64_t stride,
              int64_t column) {
  for (int64_t b = 0; b < bags.bags(); ++b) {
    float* v = out + (b / bags.slots) * stride + column + (b % bags.slots) * dim;
    if (bags.one_hot()) {
      std::copy_n(rows + b * dim, dim, v);
      continue;
    }
    const int32_t begin = bags.offsets[b], end = bags.offsets[b + 1];
    std::fill_n(v, dim, 0.0f);
    for (int32_t k = begin; k < end; ++k) {
      const float* row = rows + int64_t{k} * dim;
      for (int64_t d = 0; d < dim; ++d) v[d] += row[d];
    }
    if (bags.mean && end > begin) {
      const float scale = 1.0f / static_cast<float>(end - begin);
      for (int64_t d = 0; d < dim; ++d) v[d] *= scale;
    }
  }
}

void SpreadBagGrads(const Bags& bags, int64_t dim, const float* d, int64_t stride, int64_t column,
                    float* grads) {
  for (int64_t b = 0; b < bags.bags(); ++b) {
    const float* g = d + (b / bags.slots) * stride + column + (b % bags.slots) * dim;
    if (bags.one_hot()) {
      std::copy_n(g, dim, grads + b * dim);
      continue;
    }
    const int32_t begin = bags.offsets[b], end = bags.offsets[b + 1];
    const float scale = bags.mean ? 1.0f / static_cast<float>(std::max(end - begin, 1)) : 1.0f;
    for (int32_t k = begin; k < end; ++k) {
      float* to = grads + int64_t{k} * dim;
      for (int64_t j = 0; j < dim; ++j) to[j] = g[j] * scale;
    }
  }
}

}  // namespace heterps::ps
