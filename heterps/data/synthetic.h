// Synthetic Criteo-format data from a planted teacher, so that the best achievable AUC is known.
//
// Each row: 13 integer features I_j = floor(exp(N(mu_j, 1.2))) - 1 (3% empty) and 26 categorical
// ids, slot s drawing rank k from a Zipf distribution (P(k) proportional to k^-zipf over
// 1..vocab; 5% empty), written as 8 hex digits (a hash of seed, slot and rank). The teacher, whose
// parameters are derived from the seed by hashing and never written: a factorization machine,
//   logit = bias + sum_j w_j (log(1 + I_j) - mu_j) + sum_s a_(s,k_s)
//           + sum_(s<t) <v_(s,k_s), v_(t,k_t)> / sqrt(26)        (v: 4 floats per id)
// The label is drawn from sigmoid(logit). The sidecar file <out>.teacher.json holds the rows, the
// positive rate and the teacher's AUC on the data: the AUC of its own click probabilities against
// the drawn labels, the best any model can expect.
//
// Thread safety: pure function (it writes its files).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"

namespace heterps::data {

// Changes whenever the same options would write other data (the teacher or the format changed),
// so that files made and cached by earlier versions are not mistaken for the current ones.
inline constexpr char kSyntheticVersion[] = "v2";

struct SyntheticOptions {
  int64_t rows = 100000;
  uint64_t seed = 1;
  int64_t vocab = 100000;  // ids per slot
  double zipf = 1.05;
  // Called now and then with the rows written so far (for a progress bar); may be empty.
  std::function<void(int64_t)> progress;
};

struct SyntheticSummary {
  int64_t rows = 0;
  double positive_rate = 0;
  double teacher_auc = 0;
};

// Writes `path` (atomically: a temporary name, then renamed) and `path`.teacher.json.
absl::StatusOr<SyntheticSummary> WriteSynthetic(const SyntheticOptions& options,
                                                const std::string& path);

}  // namespace heterps::data
