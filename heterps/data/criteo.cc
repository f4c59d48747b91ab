#include "heterps/data/criteo.h"

#include <cmath>

namespace heterps::data {

float DenseTransform(int64_t x) { return x <= 0 ? 0.0f : static_cast<float>(std::log1p(x)); }

}  // namespace heterps::data
