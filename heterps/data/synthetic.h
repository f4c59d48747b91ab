// Synthetic data of any declared layout (Criteo's by default) from a planted teacher, so that the
// best achievable AUC is known.
//
// Each row: per dense column j, I_j = floor(exp(N(mu_j, 1.2))) - 1 (an integer column; a float
// column writes exp(N(mu_j, 1.2)) - 1 with 4 decimals), 3% empty; per sparse column (slot s), rank
// k from a Zipf distribution (P(k) proportional to k^-zipf over 1..vocab; 5% empty), written in
// the column's id format (hex: 8 digits of a hash of seed, slot and rank; decimal: that hash;
// string: "s<slot>-<hash in hex>"); per multi-hot column, n ids drawn so, n uniform over
// 0 .. round(2 ids_per_slot) (at most max_ids), joined by the column's separator; ignored
// columns get "r<row>". The teacher, whose parameters are derived from the seed by hashing and
// never written: a factorization machine over the slots,
//   logit = bias + sum_j w_j (log(1 + max(I_j, 0)) - mu_j) + sum_s a_s
//           + sum_(s<t) <v_s, v_t> / sqrt(slots)        (v: 4 floats per id)
// where a_s and v_s are rank k_s's parameters for a sparse slot and the mean of its ids'
// parameters for a multi-hot one (0 when it holds none), the a_s scaled by sqrt(26 / slots) so
// that few slots carry as much signal as Criteo's 26. With a header the first line holds the
// columns' names.
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
#include "heterps/base/env.h"
#include "heterps/data/schema.h"

namespace heterps::data {

// Changes whenever the same options would write other data (the teacher or the format changed),
// so that files made and cached by earlier versions are not mistaken for the current ones.
inline constexpr char kSyntheticVersion[] = "v2";

struct SyntheticOptions {
  int64_t rows = 100000;
  uint64_t seed = 1;
  int64_t vocab = 100000;  // ids per slot
  double zipf = 1.05;
  Schema schema = CriteoSchema();  // the layout written
  double ids_per_slot = 3;         // a multi-hot field's ids, on average
  // Called now and then with the rows written so far (for a progress bar); may be empty.
  std::function<void(int64_t)> progress;
  base::Env* env = base::DefaultEnv();  // the file and its sidecar are written through it
};

struct SyntheticSummary {
  int64_t rows = 0;
  double positive_rate = 0;
  double teacher_auc = 0;
};

// Writes `path` (atomically: a temporary name, then renamed; gzip or zstd compressed where its
// name ends in .gz, .zst or .zstd: byte_sink.h) and `path`.teacher.json.
absl::StatusOr<SyntheticSummary> WriteSynthetic(const SyntheticOptions& options,
                                                const std::string& path);

}  // namespace heterps::data
