#include "tools/cli_common.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "embedded/heterps_examples.h"
#include "heterps/base/file.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/reader.h"

namespace heterps::tools {

CLI::Validator Finite() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
          return "not a finite number: " + text;
        }
        return "";
      },
      "FINITE");
}

namespace {

CLI::Validator AtLeast(double least, bool strict, const char* name) {
  return CLI::Validator(
      [least, strict](std::string& text) -> std::string {
        double value = 0;
        if (!absl::SimpleAtod(text, &value) || !std::isfinite(value)) {
          return "not a finite number: " + text;
        }
        if (strict ? value <= least : value < least) {
          return absl::StrCat("must be ", strict ? "> " : ">= ", least, ", got ", text);
        }
        return "";
      },
      name);
}

}  // namespace

CLI::Validator Positive() { return AtLeast(0, true, "POSITIVE"); }
CLI::Validator NonNegative() { return AtLeast(0, false, "NON-NEGATIVE"); }

std::string EscapeForTerminal(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", u);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

int Fail(const absl::Status& status) {
  std::cerr << "heterps: error: " << EscapeForTerminal(status.message()) << "\n";
  return 2;
}

absl::StatusOr<config::ModelSpec> LoadModelOrDefault(const std::string& path) {
  if (!path.empty()) return config::LoadModelSpec(path);
  const std::string_view text = embedded::dlrm_small();
  return config::ParseModelSpec(absl::string_view(text.data(), text.size()),
                                "<embedded>/dlrm-small.yaml");
}

absl::StatusOr<ModelTextAndSpec> LoadModelText(const std::string& path, int64_t batch_size) {
  ModelTextAndSpec out;
  std::string source = path;
  if (!path.empty()) {
    HETERPS_ASSIGN_OR_RETURN(out.text, base::ReadTextFile(path));
  } else {
    out.text = std::string(embedded::dlrm_small());
    source = "<embedded>/dlrm-small.yaml";
  }
  if (batch_size > 0) {
    HETERPS_ASSIGN_OR_RETURN(out.text, config::WithBatchSize(out.text, source, batch_size));
  }
  HETERPS_ASSIGN_OR_RETURN(out.spec, config::ParseModelSpec(out.text, source));
  return out;
}

absl::StatusOr<config::ClusterSpec> LoadClusterOrLocal(const std::string& path) {
  if (!path.empty()) return config::LoadClusterSpec(path);
  const std::string_view text = embedded::local();
  return config::ParseClusterSpec(absl::string_view(text.data(), text.size()),
                                  "<embedded>/local.yaml");
}

absl::StatusOr<std::string> ReadSecret(const std::string& path, absl::string_view what) {
  absl::StatusOr<std::string> text = base::ReadTextFile(path);
  if (!text.ok()) {
    return absl::Status(text.status().code(), absl::StrCat(what, " ", text.status().message()));
  }
  std::string secret(absl::StripAsciiWhitespace(*text));
  if (secret.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " file ", path, " is empty"));
  }
  return secret;
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

absl::StatusOr<std::vector<std::string>> UseIdsOfData(const std::vector<std::string>& files,
                                                      config::ModelSpec* spec) {
  bool multi_hot = false;
  for (int s = 0; s < spec->data.slots(); ++s) multi_hot |= spec->data.multi_hot(s);
  if (!multi_hot) return std::vector<std::string>();
  constexpr int64_t kLines = 10000;
  HETERPS_ASSIGN_OR_RETURN(std::vector<double> ids,
                           data::MeasureIdsPerSlot(files, spec->data, kLines));
  const config::ModelSpec declared = *spec;
  HETERPS_RETURN_IF_ERROR(config::UseMeasuredIds(ids, spec));
  std::vector<std::string> notes;
  for (size_t i = 0; i < spec->layers.size(); ++i) {
    const double was = declared.layers[i].ids_per_slot, now = spec->layers[i].ids_per_slot;
    if (spec->layers[i].kind != config::LayerKind::kEmbedding || std::abs(now - was) <= 0.1 * was) {
      continue;
    }
    notes.push_back(absl::StrFormat(
        "layer %s: %.2f ids per slot measured on the first lines of %s, %.2f in the spec: "
        "planned with %.2f",
        spec->layers[i].name, now, files.front(), was, now));
  }
  return notes;
}

absl::StatusOr<std::vector<cost::DataShare>> ParseDataShares(
    const std::vector<std::string>& items) {
  std::vector<cost::DataShare> shares;
  for (const std::string& item : items) {
    std::vector<std::string> parts = absl::StrSplit(item, absl::MaxSplits('=', 1));
    double share = 0;
    if (parts.size() != 2 || parts[0].empty() || !absl::SimpleAtod(parts[1], &share)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--data-shares: '", item, "' is not REGION=SHARE (for example us-east-1=0.6)"));
    }
    shares.push_back({parts[0], share});
  }
  return shares;
}

}  // namespace heterps::tools
