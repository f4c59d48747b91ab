// What Train (trainer.cc) and its training across regions (region_trainer.cc) share: the data's
// readers, the evaluation and the run's summary. Not for use outside the two.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
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

// The run's record of its steps (every step's loss, the samples, the last epoch's mean loss) and
// the progress shown. Not thread-safe: one caller at a time.
class StepLog {
 public:
  // `total_samples`: the run's, for the progress; the clock starts now.
  StepLog(const TrainOptions& options, int64_t total_samples, TrainResult* result)
      : options_(options), total_(total_samples), result_(result), start_(absl::Now()) {}
  void StartEpoch(int epoch) {
    epoch_ = epoch;
    epoch_loss_ = 0;
    epoch_steps_ = 0;
  }
  void Record(double loss, int64_t samples) {
    result_->losses.push_back(loss);
    result_->train_samples += samples;
    ++result_->steps;
    epoch_loss_ += loss;
    ++epoch_steps_;
    average_ = result_->steps == 1 ? loss : 0.98 * average_ + 0.02 * loss;
    if (options_.progress) {
      options_.progress({epoch_, result_->train_samples, total_,
                         absl::ToDoubleSeconds(absl::Now() - start_), average_});
    }
  }
  // The epoch's mean step loss into the result (its train_loss).
  void EndEpoch() { result_->train_loss = epoch_steps_ > 0 ? epoch_loss_ / epoch_steps_ : 0; }
  // Seconds since the clock started, and the rate, into the result.
  void EndRun() {
    result_->seconds = absl::ToDoubleSeconds(absl::Now() - start_);
    result_->samples_per_second =
        result_->seconds > 0 ? result_->train_samples / result_->seconds : 0;
  }

 private:
  const TrainOptions& options_;
  const int64_t total_;
  TrainResult* const result_;
  const absl::Time start_;
  int epoch_ = 0;
  double epoch_loss_ = 0, average_ = 0;
  int64_t epoch_steps_ = 0;
};

// Training across regions (trainer.h, RegionTraining): the settings checked, and the run.
absl::Status CheckRegions(const TrainOptions& options);
absl::Status TrainRegions(const config::ModelSpec& spec, const TrainOptions& options,
                          int batch_size, int64_t eval_every, TrainResult* result);

}  // namespace heterps::worker::internal
