#include "heterps/worker/profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/host.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/layer_cost.h"
#include "heterps/dense/default_backends.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/worker/model.h"

namespace heterps::worker {

BatchSource RandomBatches(const config::ModelSpec& spec, int size, uint64_t seed) {
  auto rng = std::make_shared<std::mt19937_64>(seed);
  const int dense = spec.data.dense_features(), slots = spec.data.slots();
  std::vector<int> ids(slots, 1);  // ids per slot, on average
  for (int s = 0; s < slots; ++s) {
    if (!spec.data.multi_hot(s)) continue;
    for (const config::LayerSpec& layer : spec.layers) {
      if (layer.kind != config::LayerKind::kEmbedding || layer.slots <= s) continue;
      ids[s] = std::max(1, static_cast<int>(std::lround(layer.ids_per_slot)));
      break;
    }
  }
  return [size, rng, dense, slots, ids](data::Batch* batch) -> absl::StatusOr<bool> {
    std::uniform_real_distribution<double> unit(0, 1);
    *batch = data::Batch();
    data::Example e;
    for (int r = 0; r < size; ++r) {
      e.label = unit(*rng) < 0.25 ? 1.0f : 0.0f;
      e.dense.resize(dense);
      for (float& x : e.dense) {
        x = data::DenseTransform(static_cast<int64_t>(std::pow(1e4, unit(*rng))));
      }
      e.keys.clear();
      e.counts.assign(slots, 1);
      for (int s = 0; s < slots; ++s) {
        if (ids[s] > 1) e.counts[s] = static_cast<int32_t>((*rng)() % (2 * ids[s]));
        for (int k = 0; k < e.counts[s]; ++k) {
          e.keys.push_back(data::SlotKey(s, static_cast<uint64_t>(std::pow(1e6, unit(*rng)))));
        }
      }
      batch->Add(e);
    }
    return true;
  };
}

BatchSource FileBatches(const config::ModelSpec& spec, const std::vector<std::string>& files,
                        int size, data::BadLinePolicy bad_lines) {
  data::ReaderOptions options;
  options.files = files;
  options.schema = spec.data;
  options.batch_size = size;
  options.bad_lines = bad_lines;
  // The reader, the batch it last read and how much of it the batches took.
  struct State {
    std::unique_ptr<data::BatchReader> reader;
    data::Batch read;
    int at = 0;
  };
  auto state = std::make_shared<State>();
  return [options, state](data::Batch* batch) -> absl::StatusOr<bool> {
    State& s = *state;
    batch->Clear();
    while (batch->size < options.batch_size) {
      if (s.at >= s.read.size) {
        const bool fresh = s.reader == nullptr;
        if (fresh) {
          HETERPS_ASSIGN_OR_RETURN(s.reader, data::BatchReader::Open(options));
        }
        s.at = 0;
        HETERPS_ASSIGN_OR_RETURN(const bool more, s.reader->Next(&s.read));
        if (!more) {
          s.reader.reset();  // start over
          s.read.Clear();
          if (!fresh) continue;
          return absl::FailedPreconditionError(absl::StrCat(
              "profile: no data line in ", options.files.empty() ? "(no files)" : options.files[0],
              options.files.size() > 1 ? " and the other files" : ""));
        }
      }
      if (batch->size == 0 && s.at == 0 && s.read.size == options.batch_size) {
        std::swap(*batch, s.read);
        s.read.Clear();
        return true;
      }
      for (; s.at < s.read.size && batch->size < options.batch_size; ++s.at) {
        batch->Append(s.read, s.at);
      }
    }
    return true;
  };
}

absl::StatusOr<TierStage> TierStage::Create(const config::ModelSpec& spec,
                                            const ProfileOptions& options, ps::PsClient* client,
                                            dense::DenseBackend* backend) {
  const int last = static_cast<int>(spec.layers.size()) - 1;
  TierStage on;
  HETERPS_ASSIGN_OR_RETURN(
      on.tier, ps::GpuTier::Create(client, backend->gpu_device(), {options.gpu_tier_bytes}));
  HETERPS_RETURN_IF_ERROR(on.tier->AddTables(StageTierTables(spec, 0, last, options.tables)));
  HETERPS_ASSIGN_OR_RETURN(on.stage, Stage::Create(spec, 0, last, on.tier.get(), backend));
  on.stage->UseDeviceTier(on.tier.get());
  if (options.hold_dense && on.stage->can_hold_dense()) {
    on.dense = std::make_unique<DenseGroup>(kDenseTable, on.stage->dense_blocks(),
                                            options.tables.dense_optimizer, 0, 1, nullptr, client);
    HETERPS_RETURN_IF_ERROR(on.dense->LoadHeld(*on.stage));
  }
  return on;
}

absl::StatusOr<bool> BatchesAhead::Advance(const BatchSource& next, int i, int total) {
  if (i == 0) {
    HETERPS_ASSIGN_OR_RETURN(const bool more, next(&batch));
    if (!more) return false;
  } else {
    if (!has_ahead) return false;
    std::swap(batch, ahead);
  }
  has_ahead = false;
  if (i + 1 < total) {
    HETERPS_ASSIGN_OR_RETURN(has_ahead, next(&ahead));
  }
  return true;
}

namespace {

// Per layer, the seconds of each timed batch, in the order the layers first came.
struct LayerTimes {
  std::map<std::string, std::vector<double>> times;
  std::vector<std::string> order;

  void Add(const std::vector<std::pair<std::string, double>>& layers) {
    for (const auto& [name, seconds] : layers) {
      if (times[name].empty()) order.push_back(name);
      times[name].push_back(seconds);
    }
  }
};

// The device path's batches (ProfileOptions::gpu_tier_bytes): the tier on the backend's device
// in front of `client`, the stage it feeds and, holding the dense parameters, their group of one
// replica. Adds the timed batches' layers to `times`; writes the tier's entry.
absl::Status ProfileOnTier(const config::ModelSpec& spec, const BatchSource& next,
                           const ProfileOptions& options, ps::PsClient* client,
                           dense::DenseBackend* backend, LayerTimes* times, int64_t* batch_size,
                           cost::TierEntry* entry) {
  HETERPS_ASSIGN_OR_RETURN(TierStage on, TierStage::Create(spec, options, client, backend));
  Stage* stage = on.stage.get();
  DenseGroup* dense = on.dense.get();
  // Where the tier's work goes: to the embedding layers by their lookups per sample (its loads,
  // and the rows' updates on the device), to the fc layers by their parameters (their update on
  // the device). Weights of layers, summing to 1 within each group.
  std::map<std::string, double> by_lookups, by_parameters;
  const std::vector<cost::LayerCost> costs = cost::DeriveLayerCosts(spec, 1);
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const config::LayerSpec& layer = spec.layers[l];
    if (layer.kind == config::LayerKind::kEmbedding) {
      by_lookups[layer.name] = layer.slots * layer.ids_per_slot;
    }
    if (costs[l].dense_params > 0) by_parameters[layer.name] = costs[l].dense_params;
  }
  for (auto* weights : {&by_lookups, &by_parameters}) {
    double sum = 0;
    for (const auto& [name, w] : *weights) sum += w;
    for (auto& [name, w] : *weights) w = sum > 0 ? w / sum : 0;
  }
  ParameterGrads grads = stage->NewGrads();
  Activations in, next_in;
  BatchesAhead batches;
  const data::Batch& batch = batches.batch;
  const int total = options.warmup + options.repeats;
  ps::GpuTierStats before;
  for (int i = 0; i < total; ++i) {
    if (options.progress) options.progress(i, total);
    HETERPS_ASSIGN_OR_RETURN(const bool more, batches.Advance(next, i, total));
    if (!more) break;
    const bool have_ahead = batches.has_ahead;
    if (*batch_size == 0) *batch_size = batch.size;
    if (i == options.warmup) before = on.tier->stats();
    InputActivations(batch, 0, batch.size, &in);
    if (have_ahead && options.tier_lookahead) {
      InputActivations(batches.ahead, 0, batches.ahead.size, &next_in);
    }
    // The misses loaded, and the next batch's named (the job's prefetch; only the servers' part
    // of the fetch ahead overlaps the step there, which in process is small).
    const absl::Time start = absl::Now();
    HETERPS_RETURN_IF_ERROR(stage->Prefetch(in));
    if (have_ahead && options.tier_lookahead) {
      HETERPS_RETURN_IF_ERROR(stage->Anticipate(next_in));
    }
    const double prefetch = absl::ToDoubleSeconds(absl::Now() - start);
    if (dense == nullptr) HETERPS_RETURN_IF_ERROR(stage->PullParameters());
    stage->set_timing(true);
    absl::StatusOr<double> loss =
        stage->ForwardBackward(0, in, 1.0f / static_cast<float>(batch.size), nullptr, &grads);
    stage->set_timing(false);
    HETERPS_RETURN_IF_ERROR(loss.status());
    std::vector<std::pair<std::string, double>> layers = stage->layer_seconds();
    // The device's updates, each done when the device has done it: the rows' (with, where the
    // servers hold them, the dense gradients' push), then the held parameters'.
    const absl::Time pushed = absl::Now();
    HETERPS_RETURN_IF_ERROR(stage->Push(grads));
    HETERPS_RETURN_IF_ERROR(backend->gpu_device()->Synchronize());
    const absl::Time updated = absl::Now();
    if (dense != nullptr) HETERPS_RETURN_IF_ERROR(dense->StepHeld(*stage));
    HETERPS_RETURN_IF_ERROR(backend->gpu_device()->Synchronize());
    const double rows = prefetch + absl::ToDoubleSeconds(updated - pushed);
    const double held = absl::ToDoubleSeconds(absl::Now() - updated);
    if (i < options.warmup) continue;
    for (auto& [name, seconds] : layers) {
      if (auto it = by_lookups.find(name); it != by_lookups.end()) seconds += rows * it->second;
      if (auto it = by_parameters.find(name); it != by_parameters.end()) {
        seconds += held * it->second;
      }
    }
    times->Add(layers);
  }
  const ps::GpuTierStats after = on.tier->stats();
  const int timed =
      times->order.empty() ? 0 : static_cast<int>(times->times[times->order[0]].size());
  if (timed > 0) {
    entry->type = options.type;
    entry->lookups_per_batch =
        static_cast<double>(after.hits + after.misses - before.hits - before.misses) / timed;
    // The rows loaded (written back later) and the keys that passed through.
    entry->loaded_rows_per_batch =
        static_cast<double>(after.loaded_rows - before.loaded_rows) / timed;
    entry->passed_rows_per_batch = static_cast<double>(after.misses - before.misses) / timed;
    entry->dense_held = dense != nullptr;
    entry->tier_bytes = options.gpu_tier_bytes;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HostProfile> ProfileLayers(const config::ModelSpec& spec, const BatchSource& next,
                                          const ProfileOptions& options) {
  ps::InProcessPsClient client(1);
  HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, &client, options.tables));
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<dense::DenseBackend> backend,
                           dense::DefaultBackends().Create(options.device, {}));
  LayerTimes times;
  int64_t batch_size = 0;
  cost::TierEntry tier;
  if (options.gpu_tier_bytes > 0 && backend->gpu_device() != nullptr) {
    HETERPS_RETURN_IF_ERROR(
        ProfileOnTier(spec, next, options, &client, backend.get(), &times, &batch_size, &tier));
  } else {
    HETERPS_ASSIGN_OR_RETURN(auto model, Model::Create(spec, &client, backend.get()));
    const int total = options.warmup + options.repeats;
    data::Batch batch;
    for (int i = 0; i < total; ++i) {
      if (options.progress) options.progress(i, total);
      HETERPS_ASSIGN_OR_RETURN(const bool more, next(&batch));
      if (!more) break;
      if (batch_size == 0) batch_size = batch.size;
      HETERPS_ASSIGN_OR_RETURN(auto layers, model->ProfileStep(batch));
      if (i >= options.warmup) times.Add(layers);
    }
  }
  if (times.order.empty()) {
    return absl::FailedPreconditionError("profile: the data ended before a batch was timed");
  }
  HostProfile out;
  out.profile.model = spec.name;
  out.profile.batch_size = batch_size;
  out.profile.host = base::HostDescription();
  for (const std::string& name : times.order) {
    std::vector<double>& t = times.times[name];
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    const double median = t[t.size() / 2];
    out.medians.emplace_back(name, median);
    out.total_seconds += median;
    if (median > 0) out.profile.entries.push_back({name, options.type, median});
  }
  if (tier.lookups_per_batch > 0) out.profile.tier.push_back(tier);
  return out;
}

absl::StatusOr<HostProfile> ProfileHost(const config::ModelSpec& spec, int batch,
                                        const ProfileOptions& options,
                                        const BatchSources& batches) {
  return ProfileLayers(spec, batches ? batches(batch) : RandomBatches(spec, batch, 1), options);
}

}  // namespace heterps::worker
