// What every heterps subcommand shares.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/region_sync.h"

namespace heterps::tools {

// Prints "heterps: error: <message>" (one line, to stderr) and returns 2, the
// exit code of bad input and failed set-up.
int Fail(const absl::Status& status);
// CLI11 checks: the value is a finite number; and > 0, >= 0 (CLI11's own range checks let NaN
// through and print the largest double in their message).
CLI::Validator Finite();
CLI::Validator Positive();
CLI::Validator NonNegative();
// `text` safe to print on a terminal: control characters (escape sequences, NUL, newlines) and
// DEL as \xNN, so that nothing read from a file can drive the terminal or split a line.
std::string EscapeForTerminal(absl::string_view text);

// The model spec at `path`, or the embedded examples/models/dlrm-small.yaml when `path` is empty.
absl::StatusOr<config::ModelSpec> LoadModelOrDefault(const std::string& path);
// The model spec's text (the embedded dlrm-small's when `path` is empty) with the batch size
// `batch_size` in it when it is > 0 (config::WithBatchSize), and the spec it parses to: read
// once, what the job description carries.
struct ModelTextAndSpec {
  std::string text;
  config::ModelSpec spec;
};
absl::StatusOr<ModelTextAndSpec> LoadModelText(const std::string& path, int64_t batch_size);

// Multi-hot slots planned with what the data holds: when `spec` has a multi-hot slot, sets its
// embedding layers' ids_per_slot to those measured on the first 10,000 lines of `files`
// (config::UseMeasuredIds) and returns a line for each layer whose figure moved by more than 10%
// from the spec's. Nothing to do (no lines) for a one-hot layout. The reader's errors.
absl::StatusOr<std::vector<std::string>> UseIdsOfData(const std::vector<std::string>& files,
                                                      config::ModelSpec* spec);

// The cluster spec at `path`, or the embedded examples/clusters/local.yaml when `path` is empty.
absl::StatusOr<config::ClusterSpec> LoadClusterOrLocal(const std::string& path);

// A secret from a file: its text without surrounding whitespace, which must not be empty. The
// error names `what` (the flag).
absl::StatusOr<std::string> ReadSecret(const std::string& path, absl::string_view what);

// One line of progress on stderr, redrawn in place at most ten times a second, shown only when
// stderr is a terminal (logs and pipes get nothing).
class ProgressLine {
 public:
  explicit ProgressLine(bool enabled);
  ~ProgressLine() { Clear(); }
  void Show(const std::string& text);
  // Erases the line, so that what follows starts on a clean line.
  void Clear();

 private:
  bool enabled_;
  bool shown_ = false;
  absl::Time last_ = absl::InfinitePast();
};

// "[#######.............]  35%": a bar of `width` cells for `done` of `total`.
std::string Bar(double done, double total, int width = 30);

// --data-shares' items, REGION=SHARE each ("us-east-1=0.6"); InvalidArgument naming an item
// that is not. The shares themselves are checked where they are used.
absl::StatusOr<std::vector<cost::DataShare>> ParseDataShares(const std::vector<std::string>& items);

}  // namespace heterps::tools
