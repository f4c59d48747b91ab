#include "tools/convert_command.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "heterps/base/env.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/example_file.h"
#include "heterps/data/line_source.h"
#include "tools/cli_common.h"
#include "tools/table.h"

namespace heterps::tools {
namespace {

// The bytes of the files, as stored (compressed where they are); 0 for one that cannot be seen.
int64_t StoredBytes(const std::vector<std::string>& files) {
  int64_t bytes = 0;
  for (const std::string& path : files) {
    const absl::StatusOr<uint64_t> size = base::DefaultEnv()->FileSize(path);
    if (size.ok()) bytes += static_cast<int64_t>(*size);
  }
  return bytes;
}

}  // namespace

CLI::App* AddConvertCommand(CLI::App& app, ConvertFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "convert",
      "Write data files in the binary form, read later with nothing to parse (--data takes it "
      "wherever it takes text)");
  cmd->add_option("--data", flags.data,
                  "data files or globs (plain, gzip or zstd) of the model's layout, in order")
      ->required();
  cmd->add_option("--out", flags.out,
                  "The binary file (by convention .hpx; gzip or zstd compressed where it ends in "
                  ".gz, .zst or .zstd)")
      ->required();
  cmd->add_option("--model", flags.model,
                  "A model spec whose data section gives the layout (default: Criteo's)");
  cmd->add_flag_callback(
      "--skip-bad-lines", [&flags] { flags.bad_lines = data::BadLinePolicy::kSkip; },
      "Leave malformed lines out (counted) instead of stopping at the first");
  cmd->add_option("--threads", flags.threads,
                  "Threads parsing the text (default: the host's hardware threads, at most 8)")
      ->check(CLI::Range(1, data::kMaxParserThreads));
  return cmd;
}

int RunConvert(const ConvertFlags& flags) {
  data::ConvertOptions options;
  if (!flags.model.empty()) {
    absl::StatusOr<config::ModelSpec> spec = config::LoadModelSpec(flags.model);
    if (!spec.ok()) return Fail(spec.status());
    options.schema = spec->data;
  }
  absl::StatusOr<std::vector<std::string>> files = data::ExpandDataPaths(flags.data);
  if (!files.ok()) return Fail(files.status());
  options.files = *files;
  options.out = flags.out;
  options.bad_lines = flags.bad_lines;
  options.parser_threads =
      flags.threads > 0 ? flags.threads
                        : static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  ProgressLine progress(true);
  int64_t total = 0;
  if (isatty(STDERR_FILENO)) {  // a pass over the files for the bar's end, only where a bar shows
    absl::StatusOr<int64_t> lines = data::CountLines(options.files, options.schema.header);
    if (!lines.ok()) return Fail(lines.status());
    total = *lines;
  }
  options.progress = [&](int64_t lines) {
    progress.Show(absl::StrFormat("converting %s %s / %s lines", Bar(lines, total),
                                  WithCommas(lines), WithCommas(total)));
  };
  const absl::Time start = absl::Now();
  absl::StatusOr<data::ConvertSummary> summary = data::ConvertToExamples(options);
  progress.Clear();
  if (!summary.ok()) return Fail(summary.status());
  std::string skipped;
  if (summary->read.skipped > 0) {
    skipped = absl::StrFormat(", %s bad lines left out (first: %s)",
                              WithCommas(summary->read.skipped), summary->read.first_bad.front());
  }
  std::printf("wrote %s records to %s (%.1f MB from %.1f MB of input) in %.1f s%s\n",
              WithCommas(summary->records).c_str(), flags.out.c_str(),
              StoredBytes({flags.out}) / 1e6, StoredBytes(options.files) / 1e6,
              absl::ToDoubleSeconds(absl::Now() - start), skipped.c_str());
  return 0;
}

}  // namespace heterps::tools
