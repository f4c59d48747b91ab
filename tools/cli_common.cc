#include "tools/cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "embedded/heterps_examples.h"

namespace heterps::tools {

int Fail(const absl::Status& status) {
  std::cerr << "heterps: error: " << status.message() << "\n";
  return 2;
}

absl::StatusOr<config::ModelSpec> LoadModelOrDefault(const std::string& path) {
  if (!path.empty()) return config::LoadModelSpec(path);
  const std::string_view text = embedded::dlrm_small();
  return config::ParseModelSpec(absl::string_view(text.data(), text.size()),
                                "<embedded>/dlrm-small.yaml");
}

ProgressLine::ProgressLine(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}

void ProgressLine::Show(const std::string& text) {
  if (!enabled_) return;
  const absl::Time now = absl::Now();
  if (now - last_ < absl::Milliseconds(100)) return;
  last_ = now;
  shown_ = true;
  std::fprintf(stderr, "\r\033[K%s", text.c_str());
}

void ProgressLine::Clear() {
  if (shown_) std::fprintf(stderr, "\r\033[K");
  shown_ = false;
}

std::string Bar(double done, double total, int width) {
  const double fraction = total > 0 ? std::clamp(done / total, 0.0, 1.0) : 0.0;
  const int full = static_cast<int>(fraction * width);
  return absl::StrFormat("[%s%s] %3d%%", std::string(full, '#'), std::string(width - full, '.'),
                         static_cast<int>(fraction * 100));
}

}  // namespace heterps::tools
