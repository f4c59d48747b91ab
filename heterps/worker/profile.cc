#include "heterps/worker/profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>

#include "absl/strings/str_cat.h"
#include "heterps/base/host.h"
#include "heterps/base/status_macros.h"
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

absl::StatusOr<HostProfile> ProfileLayers(const config::ModelSpec& spec, const BatchSource& next,
                                          const ProfileOptions& options) {
  ps::InProcessPsClient client(1);
  HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, &client, ModelOptions()));
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<dense::DenseBackend> backend,
                           dense::DefaultBackends().Create(options.device, {}));
  HETERPS_ASSIGN_OR_RETURN(auto model, Model::Create(spec, &client, backend.get()));
  std::map<std::string, std::vector<double>> times;
  std::vector<std::string> order;
  const int total = options.warmup + options.repeats;
  int64_t batch_size = 0;
  data::Batch batch;
  for (int i = 0; i < total; ++i) {
    if (options.progress) options.progress(i, total);
    HETERPS_ASSIGN_OR_RETURN(const bool more, next(&batch));
    if (!more) break;
    if (batch_size == 0) batch_size = batch.size;
    HETERPS_ASSIGN_OR_RETURN(auto layers, model->ProfileStep(batch));
    if (i < options.warmup) continue;
    for (const auto& [name, seconds] : layers) {
      if (times[name].empty()) order.push_back(name);
      times[name].push_back(seconds);
    }
  }
  if (order.empty()) {
    return absl::FailedPreconditionError("profile: the data ended before a batch was timed");
  }
  HostProfile out;
  out.profile.model = spec.name;
  out.profile.batch_size = batch_size;
  out.profile.host = base::HostDescription();
  for (const std::string& name : order) {
    std::vector<double>& t = times[name];
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    const double median = t[t.size() / 2];
    out.medians.emplace_back(name, median);
    out.total_seconds += median;
    if (median > 0) out.profile.entries.push_back({name, options.type, median});
  }
  return out;
}

absl::StatusOr<HostProfile> ProfileHost(const config::ModelSpec& spec, int batch,
                                        const std::string& type, int repeats,
                                        const std::function<void(int, int)>& progress,
                                        const std::string& device, const BatchSources& batches) {
  ProfileOptions options;
  options.device = device;
  options.repeats = repeats;
  options.type = type;
  options.progress = progress;
  return ProfileLayers(spec, batches ? batches(batch) : RandomBatches(spec, batch, 1), options);
}

}  // namespace heterps::worker
