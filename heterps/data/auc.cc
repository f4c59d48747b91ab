#include "heterps/data/auc.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"

namespace heterps::data {

absl::StatusOr<double> ExactAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  if (scores.size() != labels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AUC: ", scores.size(), " scores for ", labels.size(), " labels"));
  }
  std::vector<uint32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return scores[a] < scores[b]; });
  // Sum of the positives' ranks (1-based, ties given their average rank).
  double rank_sum = 0, positives = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double average_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t k = i; k < j; ++k) {
      if (labels[order[k]] > 0.5f) {
        rank_sum += average_rank;
        ++positives;
      }
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) {
    return absl::InvalidArgumentError("AUC: needs both positive and negative labels");
  }
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

absl::StatusOr<Evaluation> Evaluate(absl::Span<const float> probabilities,
                                    absl::Span<const float> labels) {
  if (probabilities.size() != labels.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "evaluation: ", probabilities.size(), " probabilities for ", labels.size(), " labels"));
  }
  Evaluation out;
  out.samples = static_cast<int64_t>(probabilities.size());
  if (out.samples == 0) return out;
  double loss = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double q = std::clamp<double>(probabilities[i], 1e-7, 1 - 1e-7);
    loss -= labels[i] > 0.5f ? std::log(q) : std::log(1 - q);
  }
  out.logloss = loss / static_cast<double>(out.samples);
  absl::StatusOr<double> auc = ExactAuc(probabilities, labels);
  out.auc = auc.ok() ? *auc : 0.5;
  return out;
}

}  // namespace heterps::data
