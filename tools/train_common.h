// What single-process and distributed training share on the command line: the data and the
// model's options.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "heterps/worker/stage.h"
#include "tools/train_command.h"

namespace heterps::tools {

struct DataFile {
  std::vector<std::string> paths;  // the files, in order (globs expanded)
  double teacher_auc = -1;         // -1: unknown
};

// The data to train on: the given files (globs expanded: data::ExpandDataPaths), or synthetic rows
// in `spec`'s data layout (made once, then reused).
absl::StatusOr<DataFile> PrepareData(const TrainFlags& flags, const config::ModelSpec& spec);

// The tables' optimizers and seed, for mini-batches of `batch` samples: each setting from its
// flag where given, else from the spec's `optimizer` section, else the default (the embeddings'
// default learning rate grows with the batch); InvalidArgument naming a bad optimizer flag.
absl::StatusOr<worker::ModelOptions> ModelOptionsFrom(const TrainFlags& flags,
                                                      const config::ModelSpec& spec, int64_t batch);

}  // namespace heterps::tools
