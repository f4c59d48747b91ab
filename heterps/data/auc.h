// Evaluation metrics of click probabilities against 0/1 labels: the area under the ROC curve,
// exactly (the probability that a random positive example scores above a random negative one,
// ties counting one half: the Mann-Whitney statistic), and the mean logloss. Every evaluation in
// heterps (single-process, distributed, synthetic teachers) computes them here.
//
// Thread safety: pure function.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace heterps::data {

// O(n log n). InvalidArgument if the spans differ in length or there is no positive or no
// negative label (labels are 0 or 1).
absl::StatusOr<double> ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels);

struct Evaluation {
  int64_t samples = 0;
  double logloss = 0;  // mean; probabilities clamped to [1e-7, 1 - 1e-7]
  double auc = 0;      // 0.5 when the labels are all of one class; 0 when there are none
};
// Both metrics. InvalidArgument if the spans differ in length.
absl::StatusOr<Evaluation> Evaluate(absl::Span<const float> probabilities,
                                    absl::Span<const float> labels);

}  // namespace heterps::data
