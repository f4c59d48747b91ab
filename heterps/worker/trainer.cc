#include "heterps/worker/trainer.h"

#include <sys/resource.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/auc.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/ps/ps_client.h"
#include "heterps/worker/trainer_internal.h"

namespace heterps::worker {
namespace {

int64_t PeakRss() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace

namespace internal {

absl::StatusOr<std::unique_ptr<data::BatchReader>> OpenReader(const config::ModelSpec& spec,
                                                                const TrainOptions& options,
                                                                int batch_size, int64_t eval_every,
                                                                data::ReaderOptions::Part part) {
  data::ReaderOptions read;
  read.files = options.files;
  read.schema = spec.data;
  read.batch_size = batch_size;
  read.bad_lines = options.bad_lines;
  read.parser_threads = options.reader_threads;
  read.eval_every = eval_every;
  read.part = part;
  return data::BatchReader::Open(read);
}

// The held-out lines' loss and AUC under `model`, into `result` (with their bad lines): those of
// `file_sets` together, each set's lines held out as its own reader holds them out.
absl::Status Evaluate(const config::ModelSpec& spec, const TrainOptions& options,
                      const std::vector<std::vector<std::string>>& file_sets, int batch_size,
                      int64_t eval_every, Model& model, TrainResult* result) {
  if (eval_every > 0) {
    std::vector<float> scores, labels, p;
    for (const std::vector<std::string>& files : file_sets) {
      TrainOptions these = options;
      these.files = files;
      HETERPS_ASSIGN_OR_RETURN(auto reader, OpenReader(spec, these, batch_size, eval_every,
                                                       data::ReaderOptions::Part::kEval));
      data::Batch batch;
      for (;;) {
        HETERPS_ASSIGN_OR_RETURN(bool more, reader->Next(&batch));
        if (!more) break;
        HETERPS_RETURN_IF_ERROR(model.Predict(batch, &p));
        scores.insert(scores.end(), p.begin(), p.end());
        labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
      }
      // Held-out bad lines: counted, and named where the training lines left room among the
      // first.
      const data::ReaderStats held_out = reader->stats();
      result->skipped_lines += held_out.skipped;
      for (const std::string& line : held_out.first_bad) {
        if (result->first_bad_lines.size() >= 10) break;
        result->first_bad_lines.push_back(line);
      }
    }
    HETERPS_ASSIGN_OR_RETURN(const data::Evaluation eval, data::Evaluate(scores, labels));
    result->eval_samples = eval.samples;
    result->eval_loss = eval.logloss;
    result->eval_auc = eval.auc;
  }
  return absl::OkStatus();
}

// The end of a run: its peak memory, digest, rows and parameter bytes, from `client`'s tables.
absl::Status Summarize(const TrainOptions& options, ps::InProcessPsClient& client,
                       TrainResult* result) {
  result->peak_rss_bytes = PeakRss();
  HETERPS_ASSIGN_OR_RETURN(result->parameter_digest, ps::DigestTables(client.Tables(0)));
  const int64_t dense_state = 1 + ps::StateFloats(options.model.dense_optimizer.kind);
  result->parameter_bytes = result->dense_parameters * dense_state * 4;
  for (int table = 0; ps::SparseTable* t = client.sparse(table, 0); ++table) {
    const ps::SparseTableStats stats = t->Stats();
    const int64_t rows = stats.memory_rows + stats.cold_rows;
    const int64_t floats = t->dim() * (1 + ps::StateFloats(t->options().optimizer.kind));
    result->sparse_rows += rows;
    result->parameter_bytes += rows * (8 + 4 * floats);
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<TrainResult> Train(const config::ModelSpec& spec, const TrainOptions& options) {
  if (options.epochs < 1 || options.threads < 1 || options.eval_fraction < 0 ||
      options.eval_fraction > 0.5) {
    return absl::InvalidArgumentError(
        "train: epochs and threads must be >= 1 and eval_fraction in [0, 0.5]");
  }
  const MicroBatching& micro = options.micro_batching;
  if (options.block_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("train: block size ", options.block_size, " < 1"));
  }
  if (micro.micro_batch < 0 || micro.replicas < 1) {
    return absl::InvalidArgumentError(absl::StrCat("train: micro-batches of ", micro.micro_batch,
                                                   " samples over ", micro.replicas,
                                                   " replicas: needs micro_batch >= 0 and "
                                                   "replicas >= 1"));
  }
  if (micro.micro_batch % options.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("train: a micro-batch of ", micro.micro_batch,
                                                   " samples is not a multiple of the block size ",
                                                   options.block_size,
                                                   " (a micro-batch holds whole blocks)"));
  }
  const bool shared_steps = options.sync_threads && options.threads > 1;
  if ((micro.micro_batch > 0 || micro.replicas > 1) && options.threads != 1 && !shared_steps) {
    return absl::InvalidArgumentError(
        "train: micro-batches and replicas cut a step as a synchronous job does, on 1 thread or "
        "on synchronous threads");
  }
  if (shared_steps && micro.replicas > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train: ", options.threads, " synchronous threads are the step's replicas: replicas ",
        micro.replicas, " cannot be set beside them"));
  }
  const int batch_size =
      options.batch_size > 0 ? options.batch_size : static_cast<int>(spec.batch_size);
  const int64_t eval_every = data::EvalEvery(options.eval_fraction);
  if (options.regions.names.size() > 1) {
    HETERPS_RETURN_IF_ERROR(internal::CheckRegions(options));
    TrainResult result;
    HETERPS_RETURN_IF_ERROR(
        internal::TrainRegions(spec, options, batch_size, eval_every, &result));
    return result;
  }
  HETERPS_ASSIGN_OR_RETURN(int64_t lines, data::CountLines(options.files, spec.data.header));
  const int64_t train_lines = eval_every > 0 ? lines - lines / eval_every : lines;
  if (train_lines < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.files.empty() ? std::string("train") : options.files[0], ": ", lines,
                     " lines, no training lines"));
  }

  ps::InProcessPsClient client(1);
  HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, &client, options.model));
  std::vector<std::unique_ptr<Model>> models;
  for (int t = 0; t < options.threads; ++t) {
    HETERPS_ASSIGN_OR_RETURN(auto model, Model::Create(spec, &client));
    if (options.threads == 1) {
      model->set_block_size(options.block_size);
      model->set_micro_batching(micro);
    } else if (shared_steps) {
      model->set_block_size(options.block_size);
      model->set_micro_batching({options.threads, micro.micro_batch});
    }
    models.push_back(std::move(model));
  }

  TrainResult result;
  result.dense_parameters = models[0]->dense_parameters();
  // The steps' record and the progress shown (with `mu` held, or on the one thread of
  // synchronous threads).
  internal::StepLog log(options, train_lines * options.epochs, &result);
  absl::Mutex mu;  // the reader, the result, progress
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    log.StartEpoch(epoch);
    HETERPS_ASSIGN_OR_RETURN(auto reader, internal::OpenReader(spec, options, batch_size, eval_every,
                                                               data::ReaderOptions::Part::kTrain));
    int64_t epoch_samples = 0;
    absl::Status failure;
    auto work = [&](Model* model) {
      for (;;) {
        data::Batch batch;
        {
          absl::MutexLock lock(&mu);
          if (!failure.ok()) return;
          absl::StatusOr<bool> more = reader->Next(&batch);
          if (!more.ok()) failure = more.status();
          if (!more.ok() || !*more) return;
          epoch_samples += batch.size;
        }
        absl::StatusOr<double> loss = model->TrainStep(batch);
        absl::MutexLock lock(&mu);
        if (!loss.ok()) {
          failure.Update(loss.status());
          return;
        }
        log.Record(*loss, batch.size);
      }
    };
    // Synchronous threads: this thread reads each step and computes replica 0's share while the
    // others compute theirs; then the shares are sent in replica order and committed.
    auto shared = [&]() -> absl::Status {
      data::Batch batch;
      std::vector<absl::Status> shares(options.threads);
      for (;;) {
        HETERPS_ASSIGN_OR_RETURN(const bool more, reader->Next(&batch));
        if (!more) return absl::OkStatus();
        epoch_samples += batch.size;
        std::vector<std::thread> helpers;
        for (int t = 1; t < options.threads; ++t) {
          helpers.emplace_back([&, t] { shares[t] = models[t]->ComputeShare(batch, t); });
        }
        shares[0] = models[0]->ComputeShare(batch, 0);
        for (std::thread& h : helpers) h.join();
        double sum = 0;  // the blocks' losses in block order, as one thread adds them
        for (int t = 0; t < options.threads; ++t) {
          HETERPS_RETURN_IF_ERROR(shares[t]);
          for (double loss : models[t]->share_losses()) sum += loss;
        }
        for (int t = 0; t < options.threads; ++t) {
          HETERPS_RETURN_IF_ERROR(models[t]->AccumulateShare());
        }
        HETERPS_RETURN_IF_ERROR(client.Commit());
        log.Record(sum / batch.size, batch.size);
      }
    };
    if (shared_steps) {
      HETERPS_RETURN_IF_ERROR(shared());
    } else {
      std::vector<std::thread> workers;
      for (int t = 1; t < options.threads; ++t) workers.emplace_back(work, models[t].get());
      work(models[0].get());
      for (std::thread& w : workers) w.join();
      HETERPS_RETURN_IF_ERROR(failure);
    }
    log.EndEpoch();
    const data::ReaderStats stats = reader->stats();
    // Every epoch reads the same lines: a bad one counts once in the job.
    if (epoch == 1) {
      result.skipped_lines += stats.skipped;
      result.first_bad_lines = stats.first_bad;
    }
  }
  log.EndRun();

  HETERPS_RETURN_IF_ERROR(internal::Evaluate(spec, options, {options.files}, batch_size,
                                             eval_every, *models[0], &result));
  HETERPS_RETURN_IF_ERROR(internal::Summarize(options, client, &result));
  return result;
}

}  // namespace heterps::worker
