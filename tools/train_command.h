// `heterps train`: train a model in this process (heterps/worker/trainer.h).
//
//   heterps train [--model M.yaml] [--data FILE|synthetic] [--rows N] [--epochs E] [--batch B]
//                 [--optimizer NAME] [--lr X] [--dense-optimizer NAME] [--dense-lr X]
//                 [--threads T] [--seed S] [--eval-fraction F] [--skip-bad-lines]
//                 [--metrics-out F.json]
//
// With no --model, the embedded dlrm-small; with no --data (or "synthetic"), --rows rows of
// `heterps gen-data` output for --seed, written once to the system's temporary directory and
// reused. Shows a progress bar on a terminal, ends with a summary (train and eval logloss, eval
// AUC and the teacher's where known, samples/s, peak memory) and writes the metrics as JSON.
// Exit codes: 0 trained, 2 bad input or a failure (one line on stderr).
#pragma once

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"

namespace heterps::tools {

struct TrainFlags {
  std::string model_path;
  std::string data = "synthetic";
  int64_t rows = 200000;
  int epochs = 1;
  int batch = 0;
  std::string optimizer = "adagrad";
  double lr = 0.05;
  std::string dense_optimizer = "adam";
  double dense_lr = 0.001;
  int threads = 1;
  uint64_t seed = 1;
  double eval_fraction = 0.1;
  bool skip_bad_lines = false;
  std::string metrics_out;
};

CLI::App* AddTrainCommand(CLI::App& app, TrainFlags& flags);
int RunTrain(const TrainFlags& flags);

}  // namespace heterps::tools
