// The area under the ROC curve, exactly: the probability that a random positive example scores
// above a random negative one, ties counting one half (the Mann-Whitney statistic).
//
// Thread safety: pure function.
#pragma once

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace heterps::data {

// O(n log n). InvalidArgument if the spans differ in length or there is no positive or no
// negative label (labels are 0 or 1).
absl::StatusOr<double> ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels);

}  // namespace heterps::data
