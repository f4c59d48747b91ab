#include "tools/profile_command.h"

#include <cstdio>

#include "absl/strings/str_format.h"
#include "heterps/base/file.h"
#include "heterps/cost/profile.h"
#include "heterps/worker/profile.h"
#include "tools/cli_common.h"

namespace heterps::tools {

CLI::App* AddProfileCommand(CLI::App& app, ProfileFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "profile", "Measure each layer's time per batch on this host and write a planner profile");
  cmd->add_option("--model", flags.model_path, "Model spec (default: the embedded dlrm-small)");
  cmd->add_option("--batch", flags.batch, "Samples per batch (default: the spec's batch_size)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--type", flags.type, "Resource type the figures are for (default host-cpu)");
  cmd->add_option("--repeats", flags.repeats, "Timed batches; the median is kept (default 5)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out", flags.out, "The profile JSON to write")->required();
  return cmd;
}

int RunProfile(const ProfileFlags& flags) {
  absl::StatusOr<config::ModelSpec> spec = LoadModelOrDefault(flags.model_path);
  if (!spec.ok()) return Fail(spec.status());
  const int batch_size = flags.batch > 0 ? flags.batch : static_cast<int>(spec->batch_size);
  ProgressLine progress(true);
  absl::StatusOr<worker::HostProfile> measured =
      worker::ProfileHost(*spec, batch_size, flags.type, flags.repeats, [&](int done, int total) {
        progress.Show(
            absl::StrFormat("profiling %s batch %d of %d", Bar(done, total), done + 1, total));
      });
  progress.Clear();
  if (!measured.ok()) return Fail(measured.status());
  absl::Status written =
      base::WriteFileAtomically(flags.out, cost::ProfileToJson(measured->profile));
  if (!written.ok()) return Fail(written);
  std::printf("%s, batch %d, on %s: median of %d batches\n\n", spec->name.c_str(), batch_size,
              measured->profile.host.c_str(), flags.repeats);
  std::printf("%-16s %12s %7s\n", "layer", "ms/batch", "share");
  const double total = measured->total_seconds;
  for (const auto& [name, seconds] : measured->medians) {
    std::printf("%-16s %12.3f %6.1f%%\n", name.c_str(), 1e3 * seconds,
                total > 0 ? 100 * seconds / total : 0.0);
  }
  std::printf("%-16s %12.3f %6.1f%%\n\nwrote %s (resource type %s)%s\n", "total", 1e3 * total,
              100.0, flags.out.c_str(), flags.type.c_str(),
              batch_size == spec->batch_size ? ""
                                             : "; the planner reads only profiles taken at the "
                                               "spec's batch size");
  return 0;
}

}  // namespace heterps::tools
