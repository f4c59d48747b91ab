#include "tools/gen_data_command.h"

#include <cstdio>

#include "absl/strings/str_format.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/synthetic.h"
#include "tools/cli_common.h"
#include "tools/table.h"

namespace heterps::tools {

CLI::App* AddGenDataCommand(CLI::App& app, GenDataFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "gen-data",
      "Write synthetic data (Criteo's layout, or a model spec's data section) from a planted "
      "teacher model");
  cmd->add_option("--rows", flags.rows, "Rows to write")->required()->check(Positive());
  cmd->add_option("--out", flags.out,
                  "The data file, gzip or zstd compressed where it ends in .gz, .zst or .zstd "
                  "(FILE.teacher.json is written beside it)")
      ->required();
  cmd->add_option("--seed", flags.seed, "Seed of the teacher and the draws (default 1)");
  cmd->add_option("--vocab", flags.vocab, "Ids per categorical slot (default 100000)")
      ->check(Positive());
  cmd->add_option("--zipf", flags.zipf,
                  "Exponent of the ids' Zipf law: higher, fewer hot ids; lower, more distinct "
                  "ids and bigger tables (default 1.05)")
      ->check(CLI::Range(0.01, 10.0));
  cmd->add_option("--model", flags.model,
                  "A model spec: write the layout of its data section (default: Criteo's)");
  cmd->add_option("--ids-per-slot", flags.ids_per_slot,
                  "Ids of a multi-hot field on average: 0 .. 2x, uniformly (default 3)")
      ->check(CLI::Range(0.5, 4096.0));
  return cmd;
}

int RunGenData(const GenDataFlags& flags) {
  data::SyntheticOptions options;
  options.rows = flags.rows;
  options.seed = flags.seed;
  options.vocab = flags.vocab;
  options.zipf = flags.zipf;
  options.ids_per_slot = flags.ids_per_slot;
  if (!flags.model.empty()) {
    absl::StatusOr<config::ModelSpec> spec = config::LoadModelSpec(flags.model);
    if (!spec.ok()) return Fail(spec.status());
    options.schema = spec->data;
  }
  ProgressLine progress(true);
  options.progress = [&](int64_t rows) {
    progress.Show(absl::StrFormat("writing %s %s / %s rows", Bar(rows, flags.rows),
                                  WithCommas(rows), WithCommas(flags.rows)));
  };
  absl::StatusOr<data::SyntheticSummary> summary = data::WriteSynthetic(options, flags.out);
  progress.Clear();
  if (!summary.ok()) return Fail(summary.status());
  std::printf("wrote %s rows to %s: %.1f%% positive, teacher AUC %.4f (%s.teacher.json)\n",
              WithCommas(summary->rows).c_str(), flags.out.c_str(), 100 * summary->positive_rate,
              summary->teacher_auc, flags.out.c_str());
  return 0;
}

}  // namespace heterps::tools
