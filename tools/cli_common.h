// What every heterps subcommand shares.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterps/config/model_spec.h"

namespace heterps::tools {

// Prints "heterps: error: <message>" (one line, to stderr) and returns 2, the
// exit code of bad input and failed set-up.
int Fail(const absl::Status& status);

// The model spec at `path`, or the embedded examples/models/dlrm-small.yaml when `path` is empty.
absl::StatusOr<config::ModelSpec> LoadModelOrDefault(const std::string& path);

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

}  // namespace heterps::tools
