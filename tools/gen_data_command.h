// `heterps gen-data`: synthetic Criteo-format data from a planted teacher
// (heterps/data/synthetic.h).
//
//   heterps gen-data --rows 1000000 --out train.tsv [--seed S] [--vocab V] [--zipf A]
//
// Writes FILE and FILE.teacher.json, shows a progress bar on a terminal, and prints one line:
// the rows, the positive rate and the teacher's AUC. Exit codes: 0 written, 2 bad flags or a
// failed write (one line on stderr).
#pragma once

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace heterps::tools {

struct GenDataFlags {
  int64_t rows = 0;
  std::string out;
  uint64_t seed = 1;
  int64_t vocab = 100000;
  double zipf = 1.05;
  std::string model;  // a model spec whose data section gives the layout; empty: Criteo's
  double ids_per_slot = 3;
};

CLI::App* AddGenDataCommand(CLI::App& app, GenDataFlags& flags);
int RunGenData(const GenDataFlags& flags);

}  // namespace heterps::tools
