// `heterps convert`: data files of a model's layout into the binary form
// (heterps/data/example_file.h), which every command that takes `--data` reads with nothing to
// parse.
//
//   heterps convert --model dlrm.yaml --data 'day_*.tsv.gz' --out days.hpx [--skip-bad-lines]
//       [--threads N]
//
// Shows a progress bar on a terminal and prints one line: the records written, the lines
// skipped, the sizes and the time. Exit codes: 0 written, 2 bad flags, a bad line (without
// --skip-bad-lines), a read or a write error (one line on stderr; --out is left as it was).
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "heterps/data/reader.h"

namespace heterps::tools {

struct ConvertFlags {
  std::string model;  // a model spec whose data section gives the layout; empty: Criteo's
  std::vector<std::string> data;
  std::string out;
  data::BadLinePolicy bad_lines = data::BadLinePolicy::kStop;
  int threads = 0;  // parsing threads; 0: the host's hardware threads, at most 8
};

CLI::App* AddConvertCommand(CLI::App& app, ConvertFlags& flags);
int RunConvert(const ConvertFlags& flags);

}  // namespace heterps::tools
