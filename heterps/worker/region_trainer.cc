// Training across regions, emulated in one process (trainer.h, RegionTraining; docs/regions.md,
// GEO): each region its own tables and model, the windows of deltas between the steps, the flush.
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/worker/region_exchange.h"
#include "heterps/worker/trainer_internal.h"

namespace heterps::worker::internal {
namespace {

// Every region's share of `batch`: consecutive samples, share r of them (rounded at the
// cumulative shares), the last region the rest.
std::vector<data::Batch> SplitByShares(const data::Batch& batch, absl::Span<const double> shares) {
  std::vector<data::Batch> parts(shares.size());
  double cumulative = 0;
  int64_t at = 0;
  for (size_t r = 0; r < shares.size(); ++r) {
    cumulative += shares[r];
    const int64_t end = r + 1 == shares.size()
                            ? batch.size
                            : std::min<int64_t>(batch.size, std::llround(cumulative * batch.size));
    for (; at < end; ++at) parts[r].Append(batch, at);
  }
  return parts;
}

}  // namespace

absl::Status CheckRegions(const TrainOptions& options) {
  const RegionTraining& geo = options.regions;
  const size_t n = geo.names.size();
  if (!geo.files.empty()) {
    if (geo.files.size() != n || !geo.shares.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "train: ", geo.files.size(), " regions' files for ", n,
          " regions (and no shares beside them: a region's share is its lines')"));
    }
    for (size_t r = 0; r < n; ++r) {
      if (geo.files[r].empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("train: region '", geo.names[r], "' has no data files"));
      }
    }
  } else if (geo.shares.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("train: ", geo.shares.size(), " shares for ", n, " regions"));
  }
  double sum = geo.files.empty() ? 0 : 1;
  for (size_t r = 0; r < geo.shares.size(); ++r) {
    if (!(geo.shares[r] > 0)) {
      return absl::InvalidArgumentError(absl::StrCat("train: region '", geo.names[r], "' has share ",
                                                     geo.shares[r], ": a share must be > 0"));
    }
    sum += geo.shares[r];
  }
  if (std::abs(sum - 1) > 1e-6) {
    return absl::InvalidArgumentError(absl::StrCat("train: the regions' shares sum to ", sum,
                                                   ", not 1"));
  }
  if (geo.sync_steps < 1 || geo.delay < 0 || geo.delay > 1 || !(geo.threshold >= 0) ||
      !EagerThresholdValid(geo.threshold, geo.eager_threshold)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "train: across regions, sync steps ", geo.sync_steps, " (needs >= 1), delay ", geo.delay,
        " (0 or 1 windows), threshold ", geo.threshold, " (needs >= 0), eager threshold ",
        geo.eager_threshold, " (0, or above the threshold)"));
  }
  if (geo.topology == cost::SyncTopology::kHub && (geo.hub < 0 || geo.hub >= static_cast<int>(n))) {
    return absl::InvalidArgumentError(absl::StrCat("train: hub ", geo.hub, " of ", n, " regions"));
  }
  if (options.threads != 1 || options.micro_batching.micro_batch > 0 ||
      options.micro_batching.replicas > 1) {
    return absl::InvalidArgumentError(
        "train: regions emulated in one process train on one thread, without micro-batches");
  }
  return absl::OkStatus();
}

// Training across regions, emulated (trainer.h, RegionTraining): the epochs' steps, the windows
// between them and the final flush. The result's losses are each step's over all regions.
absl::Status TrainRegions(const config::ModelSpec& spec, const TrainOptions& options,
                          int batch_size, int64_t eval_every, TrainResult* result) {
  const RegionTraining& geo = options.regions;
  const int n = static_cast<int>(geo.names.size());
  // The data: shares of every batch of one set of files, or each region's own files, its share
  // its lines'.
  const bool own_data = !geo.files.empty();
  std::vector<std::vector<std::string>> file_sets =
      own_data ? geo.files : std::vector<std::vector<std::string>>{options.files};
  std::vector<int64_t> lines;
  int64_t train_lines = 0;
  for (size_t f = 0; f < file_sets.size(); ++f) {
    HETERPS_ASSIGN_OR_RETURN(const int64_t all, data::CountLines(file_sets[f], spec.data.header));
    const int64_t train = eval_every > 0 ? all - all / eval_every : all;
    if (train < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          own_data ? absl::StrCat("region '", geo.names[f], "': ") : std::string(),
          file_sets[f].empty() ? std::string("train") : file_sets[f][0], ": ", all,
          " lines, no training lines"));
    }
    lines.push_back(train);
    train_lines += train;
  }
  std::vector<double> shares = geo.shares;
  std::vector<int> batches(n, batch_size);  // own data: each region's batch
  if (own_data) {
    shares.clear();
    for (int r = 0; r < n; ++r) {
      shares.push_back(static_cast<double>(lines[r]) / train_lines);
      batches[r] = std::max(1, static_cast<int>(std::llround(shares[r] * batch_size)));
    }
  }
  std::vector<std::unique_ptr<ps::InProcessPsClient>> servers;
  std::vector<std::unique_ptr<Model>> models;
  std::vector<ps::PsClient*> clients;
  for (int r = 0; r < n; ++r) {
    servers.push_back(std::make_unique<ps::InProcessPsClient>(1));
    HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, servers.back().get(), options.model));
    HETERPS_RETURN_IF_ERROR(servers.back()->TrackDeltas());
    HETERPS_ASSIGN_OR_RETURN(auto model, Model::Create(spec, servers.back().get()));
    model->set_block_size(options.block_size);
    models.push_back(std::move(model));
    clients.push_back(servers.back().get());
  }
  const DeltaTables tables = DeltaTablesOf(*servers[0]);
  result->dense_parameters = models[0]->dense_parameters();
  result->region_shares = shares;

  std::map<std::pair<int, int>, RegionTraffic> carried;
  std::optional<DeltaWindow> in_flight;
  std::vector<int64_t> window_samples(n, 0), run_samples(n, 0);
  // Applies the window in flight, if any; whether it sent anything.
  const auto apply = [&]() -> absl::StatusOr<bool> {
    if (!in_flight.has_value()) return false;
    std::vector<RegionTraffic> links;
    HETERPS_RETURN_IF_ERROR(ApplyDeltaWindow(clients, *in_flight, geo.topology, geo.hub, &links));
    for (const RegionTraffic& t : links) {
      RegionTraffic& sum = carried[{t.from, t.to}];
      sum.from = t.from;
      sum.to = t.to;
      sum.bytes += t.bytes;
      sum.messages += t.messages;
    }
    const bool sent = !in_flight->sparse.empty() || !in_flight->dense.empty();
    if (sent) ++result->windows;
    in_flight.reset();
    return sent;
  };
  // A window of the changes since the last, weighted by the samples behind them; the flush's by
  // each region's samples over the run (what it sends then is what it held back, from any
  // window, and a region whose lines ended early has none in the last).
  const auto take = [&](float threshold, bool flush) -> absl::Status {
    HETERPS_ASSIGN_OR_RETURN(
        DeltaWindow window,
        TakeDeltaWindow(clients, tables, flush ? run_samples : window_samples, threshold));
    in_flight = std::move(window);
    window_samples.assign(n, 0);
    return absl::OkStatus();
  };

  StepLog log(options, train_lines * options.epochs, result);
  int64_t step = 0;
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    log.StartEpoch(epoch);
    std::vector<std::unique_ptr<data::BatchReader>> readers;
    for (size_t f = 0; f < file_sets.size(); ++f) {
      TrainOptions these = options;
      these.files = file_sets[f];
      HETERPS_ASSIGN_OR_RETURN(auto reader, OpenReader(spec, these, batches[f], eval_every,
                                                       data::ReaderOptions::Part::kTrain));
      readers.push_back(std::move(reader));
    }
    std::vector<bool> done(readers.size(), false);
    data::Batch batch;
    std::vector<data::Batch> parts(n);
    for (;;) {
      int64_t samples = 0;
      if (!own_data) {
        HETERPS_ASSIGN_OR_RETURN(const bool more, readers[0]->Next(&batch));
        if (!more) break;
        parts = SplitByShares(batch, shares);
        samples = batch.size;
      } else {
        for (int r = 0; r < n; ++r) {
          parts[r].Clear();
          if (done[r]) continue;
          HETERPS_ASSIGN_OR_RETURN(const bool more, readers[r]->Next(&parts[r]));
          if (!more) {
            done[r] = true;
            parts[r].Clear();
          }
          samples += parts[r].size;
        }
        if (samples == 0) break;
      }
      double loss_sum = 0;
      for (int r = 0; r < n; ++r) {
        if (parts[r].size == 0) continue;
        HETERPS_ASSIGN_OR_RETURN(const double loss, models[r]->TrainStep(parts[r]));
        loss_sum += loss * parts[r].size;
        window_samples[r] += parts[r].size;
        run_samples[r] += parts[r].size;
      }
      log.Record(loss_sum / samples, samples);
      if (const std::optional<float> threshold =
              WindowAfter(++step, geo.sync_steps, geo.threshold, geo.eager_threshold)) {
        // One window in flight at most: the one before is applied before this one is taken
        // (a later export would send its changes again).
        HETERPS_RETURN_IF_ERROR(apply().status());
        HETERPS_RETURN_IF_ERROR(take(*threshold, /*flush=*/false));
        if (geo.delay == 0) HETERPS_RETURN_IF_ERROR(apply().status());
      }
    }
    log.EndEpoch();
    if (epoch == 1) {
      for (const auto& reader : readers) {
        const data::ReaderStats stats = reader->stats();
        result->skipped_lines += stats.skipped;
        for (const std::string& line : stats.first_bad) {
          if (result->first_bad_lines.size() < 10) result->first_bad_lines.push_back(line);
        }
      }
    }
  }
  // The flush: the window in flight, then windows of every change left until one finds none
  // (a window's rounding goes with the next).
  HETERPS_RETURN_IF_ERROR(apply().status());
  for (int flush = 0;; ++flush) {
    HETERPS_RETURN_IF_ERROR(take(0, /*flush=*/true));
    HETERPS_ASSIGN_OR_RETURN(const bool sent, apply());
    if (!sent) break;
    if (flush == 8) {
      return absl::InternalError("train: the regions' final flush still sends after 8 windows");
    }
  }
  log.EndRun();
  for (const auto& [pair, t] : carried) result->region_traffic.push_back(t);
  HETERPS_RETURN_IF_ERROR(
      Evaluate(spec, options, file_sets, batch_size, eval_every, *models[0], result));
  return Summarize(options, *servers[0], result);
}

}  // namespace heterps::worker::internal
