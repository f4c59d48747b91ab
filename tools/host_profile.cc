#include "tools/host_profile.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>

#include "heterps/base/host.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/criteo.h"
#include "heterps/worker/model.h"

namespace heterps::tools {
namespace {

// A random Criteo-shaped batch: ids log-uniform over 1..1e6 per slot (a heavy head, like
// real data), integer features log-uniform over 0..1e4.
data::Batch RandomBatch(int size, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0, 1);
  data::Batch batch;
  for (int r = 0; r < size; ++r) {
    data::Example e;
    e.label = unit(rng) < 0.25 ? 1.0f : 0.0f;
    for (float& x : e.dense)
      x = data::DenseTransform(static_cast<int64_t>(std::pow(1e4, unit(rng))));
    for (int s = 0; s < data::kSparseSlots; ++s) {
      e.keys[s] = data::SlotKey(s, static_cast<uint64_t>(std::pow(1e6, unit(rng))));
    }
    batch.Add(e);
  }
  return batch;
}

}  // namespace

absl::StatusOr<HostProfile> ProfileHost(const config::ModelSpec& spec, int batch,
                                        const std::string& type, int repeats,
                                        const std::function<void(int, int)>& progress) {
  ps::InProcessPsClient client(1);
  HETERPS_RETURN_IF_ERROR(worker::CreateModelTables(spec, &client, worker::ModelOptions()));
  HETERPS_ASSIGN_OR_RETURN(auto model, worker::Model::Create(spec, &client));
  std::mt19937_64 rng(1);
  std::map<std::string, std::vector<double>> times;
  std::vector<std::string> order;
  for (int i = 0; i < 2 + repeats; ++i) {
    if (progress) progress(i, 2 + repeats);
    HETERPS_ASSIGN_OR_RETURN(auto layers, model->ProfileStep(RandomBatch(batch, rng)));
    if (i < 2) continue;  // warm-up: first touches of rows and pages
    for (const auto& [name, seconds] : layers) {
      if (times[name].empty()) order.push_back(name);
      times[name].push_back(seconds);
    }
  }
  HostProfile out;
  out.profile.model = spec.name;
  out.profile.batch_size = batch;
  out.profile.host = base::HostDescription();
  for (const std::string& name : order) {
    std::vector<double>& t = times[name];
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    const double median = t[t.size() / 2];
    out.medians.emplace_back(name, median);
    out.total_seconds += median;
    if (median > 0) out.profile.entries.push_back({name, type, median});
  }
  return out;
}

}  // namespace heterps::tools
