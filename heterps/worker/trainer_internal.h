// What Train (trainer.cc) and its training across regions (region_trainer.cc) share: the data's
// readers, the evaluation and the run's summary. Not for use outside the two.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/reader.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/worker/model.h"
#include "heterps/worker/trainer.h"

namespace heterps::worker::internal {

// A reader of `options.files`' part `part` in batches of `batch_size`.
absl::StatusOr<std::unique_ptr<data::BatchReader>> OpenReader(const config::ModelSpec& spec,
                                                                const TrainOptions& options,
                                                                int batch_size, int64_t eval_every,
                                                                data::ReaderOptions::Part part);
// The held-out lines' loss and AUC under `model`, into `result` (with their bad lines): those of
// `file_sets` together, each set's lines held out as its own reader holds them out.
absl::Status Evaluate(const config::ModelSpec& spec, const TrainOptions& options,
                      const std::vector<std::vector<std::string>>& file_sets, int batch_size,
                      int64_t eval_every, Model& model, TrainResult* result);
// The end of a run: its peak memory, digest, rows and parameter bytes, from `client`'s tables.
absl::Status Summarize(const TrainOptions& options, ps::InProcessPsClient& client,
                       TrainResult* result);

// Training across regions (trainer.h, RegionTraining): the settings checked, and the run.
absl::Status CheckRegions(const TrainOptions& options);
absl::Status TrainRegions(const config::ModelSpec& spec, const TrainOptions& options,
                          int batch_size, int64_t eval_every, TrainResult* result);

}  // namespace heterps::worker::internal
