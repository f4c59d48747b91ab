// Single-process training: a model built from its spec, its tables in this process
// (InProcessPsClient), data from Criteo TSV files, a held-out part for evaluation.
//
//   TrainOptions options;
//   options.files = {"train.tsv"};
//   HETERPS_ASSIGN_OR_RETURN(TrainResult result, Train(spec, options));
//
// Every eval_every-th line (1 / eval_fraction, rounded) is held out (data::ReaderOptions); the
// others are read `epochs` times in file order, in batches of the spec's batch size. With one
// thread, steps are synchronous and the run is reproducible: the same seed and data give the same
// losses. With more, each thread trains its own batches against the shared tables without waiting
// for the others (asynchronous, as parameter servers run): faster, not reproducible; or, with
// sync_threads, the threads share each step as a synchronous job's stage-0 replicas do (each its
// consecutive blocks, the gradients combined in the step's fixed tree): the one thread's run, to
// the bit, on several cores.
//
// Thread safety: Train may run concurrently with other Trains; `progress` is called from the
// calling thread's workers, one call at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/reader.h"
#include "heterps/cost/region_sync.h"
#include "heterps/worker/model.h"
#include "heterps/worker/region_exchange.h"

namespace heterps::worker {

struct TrainProgress {
  int epoch = 0;              // from 1
  int64_t samples = 0;        // trained so far
  int64_t total_samples = 0;  // to train in all
  double seconds = 0;
  double loss = 0;  // moving average of recent steps' losses
};

// Training across regions, emulated in one process (docs/regions.md, GEO): each region has its
// own tables (its own optimizer state) and trains its share of every batch of `files`
// (consecutive samples, share_r of the batch, the last region the rest) as a job of its own; every `sync_steps` steps
// a window of parameter deltas passing `threshold` is taken from every region and merged, each
// weighted by the samples behind it, and applied `delay` windows later (0: at once; 1: at the
// next window, the steps between training on); the run ends with a flush, after which every
// region holds the same parameters (evaluated on region 0's).
//
// Or each region reads data of its own (`files`): region r then takes f_r B samples a step of its
// own lines (f_r its share of all regions' training lines, B the batch size, at least 1), until
// its lines are done; a pass ends when every region's are, and the evaluation is over every
// region's held-out lines.
struct RegionTraining {
  std::vector<std::string> names;  // one per region; empty: one region (no exchange)
  std::vector<double> shares;      // of every batch, > 0, summing to 1; empty with `files`
  std::vector<std::vector<std::string>> files;  // per region, its own data; empty: shares
  int64_t sync_steps = 100;
  float threshold = 0;  // Gaia's significance (ps/deltas.h); 0: every changed row
  // > threshold: a window after each step between too, of the rows passing it (WindowAfter in
  // worker/region_exchange.h); 0: none.
  float eager_threshold = 0;
  int delay = 1;        // 0 or 1
  cost::SyncTopology topology = cost::SyncTopology::kPeerToPeer;
  int hub = 0;  // with kHub: an index into names
};

struct TrainOptions {
  std::vector<std::string> files;
  int epochs = 1;
  int batch_size = 0;  // 0: the spec's
  int threads = 1;
  // With threads > 1: the threads share each step (replicas of a synchronous step) instead of
  // training their own steps asynchronously.
  bool sync_threads = false;
  double eval_fraction = 0.1;  // in (0, 0.5]; 0: no evaluation
  data::BadLinePolicy bad_lines = data::BadLinePolicy::kStop;
  int reader_threads = 1;  // threads parsing text (data::ReaderOptions::parser_threads)
  ModelOptions model;
  // With one thread, a step's gradients are formed in blocks of this many samples, combined in
  // the step's fixed tree (Model::set_block_size): the run is then a synchronous job's of the
  // same batch and block size, to the bit, whatever that job's layout. Several threads push
  // their steps' gradients as they come (Hogwild).
  int64_t block_size = kDefaultBlockSize;
  // The step cut the way a job of that layout cuts it (Model::set_micro_batching): no difference
  // to the result, which tests show; needs micro_batch a multiple of block_size, and threads == 1
  // (sync_threads: micro_batch alone, each thread a replica).
  MicroBatching micro_batching;
  std::function<void(const TrainProgress&)> progress;
  // More than one region: the regions emulated in this process (one thread, no micro-batching).
  RegionTraining regions;
};

struct TrainResult {
  int64_t train_samples = 0, steps = 0, eval_samples = 0;
  double train_loss = 0;  // mean over the last epoch's steps
  double eval_loss = 0, eval_auc = 0;
  double seconds = 0;             // training, not evaluation
  double samples_per_second = 0;  // training samples / seconds
  int64_t skipped_lines = 0;      // bad lines skipped (kSkip)
  std::vector<std::string> first_bad_lines;  // the first 10 named, training lines' first
  int64_t dense_parameters = 0;
  int64_t sparse_rows = 0;  // embedding rows held at the end (every row any batch touched)
  // Bytes of the parameters and their optimizer state: every held row's key, value and state,
  // and the dense parameters with theirs.
  int64_t parameter_bytes = 0;
  int64_t peak_rss_bytes = 0;
  uint64_t parameter_digest = 0;  // ps::DigestTables over every parameter at the end
  std::vector<double> losses;  // every step's, in order (with one thread)
  // Across regions: the windows exchanged (the final flush's included) and what each link
  // carried in all, in order of (from, to).
  int64_t windows = 0;
  std::vector<RegionTraffic> region_traffic;
  std::vector<double> region_shares;  // each region's share of the samples (its lines' with files)
};

absl::StatusOr<TrainResult> Train(const config::ModelSpec& spec, const TrainOptions& options);

}  // namespace heterps::worker
