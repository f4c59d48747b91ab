#include "tools/profile_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>

#include "absl/strings/str_format.h"
#include "heterps/base/file.h"
#include "heterps/base/host.h"
#include "heterps/cost/profile.h"
#include "heterps/data/criteo.h"
#include "heterps/worker/model.h"
#include "tools/cli_common.h"

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

CLI::App* AddProfileCommand(CLI::App& app, ProfileFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "profile", "Measure each layer's time per batch on this host and write a planner profile");
  cmd->add_option("--model", flags.model_path, "Model spec (default: the embedded dlrm-small)");
  cmd->add_option("--batch", flags.batch, "Samples per batch (default: the spec's batch_size)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--type", flags.type, "Resource type the figures are for (default host-cpu)");
  cmd->add_option("--repeats", flags.repeats, "Timed batches; the median is kept (default 5)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--out", flags.out, "The profile JSON to write")->required();
  return cmd;
}

int RunProfile(const ProfileFlags& flags) {
  absl::StatusOr<config::ModelSpec> spec = LoadModelOrDefault(flags.model_path);
  if (!spec.ok()) return Fail(spec.status());
  const int batch_size = flags.batch > 0 ? flags.batch : static_cast<int>(spec->batch_size);
  ps::InProcessPsClient client(1);
  if (absl::Status created = worker::CreateModelTables(*spec, &client, worker::ModelOptions());
      !created.ok()) {
    return Fail(created);
  }
  absl::StatusOr<std::unique_ptr<worker::Model>> model = worker::Model::Create(*spec, &client);
  if (!model.ok()) return Fail(model.status());
  std::mt19937_64 rng(1);
  std::map<std::string, std::vector<double>> times;
  std::vector<std::string> order;
  ProgressLine progress(true);
  for (int i = 0; i < 2 + flags.repeats; ++i) {
    progress.Show(absl::StrFormat("profiling %s batch %d of %d", Bar(i, 2 + flags.repeats), i + 1,
                                  2 + flags.repeats));
    const data::Batch batch = RandomBatch(batch_size, rng);
    auto layers = (*model)->ProfileStep(batch);
    if (!layers.ok()) return Fail(layers.status());
    if (i < 2) continue;  // warm-up: first touches of rows and pages
    for (const auto& [name, seconds] : *layers) {
      if (times[name].empty()) order.push_back(name);
      times[name].push_back(seconds);
    }
  }
  progress.Clear();
  cost::Profile profile;
  profile.model = spec->name;
  profile.batch_size = batch_size;
  profile.host = base::HostDescription();
  double total = 0;
  std::vector<std::pair<std::string, double>> medians;
  for (const std::string& name : order) {
    std::vector<double>& t = times[name];
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    const double median = t[t.size() / 2];
    medians.emplace_back(name, median);
    total += median;
    if (median > 0) profile.entries.push_back({name, flags.type, median});
  }
  absl::Status written = base::WriteFileAtomically(flags.out, cost::ProfileToJson(profile));
  if (!written.ok()) return Fail(written);
  std::printf("%s, batch %d, on %s: median of %d batches\n\n", spec->name.c_str(), batch_size,
              profile.host.c_str(), flags.repeats);
  std::printf("%-16s %12s %7s\n", "layer", "ms/batch", "share");
  for (const auto& [name, seconds] : medians) {
    std::printf("%-16s %12.3f %6.1f%%\n", name.c_str(), 1e3 * seconds,
                total > 0 ? 100 * seconds / total : 0.0);
  }
  std::printf("%-16s %12.3f %6.1f%%\n\nwrote %s (resource type %s)%s\n", "total", 1e3 * total,
              100.0, flags.out.c_str(), flags.type.c_str(),
              batch_size == spec->batch_size ? ""
                                             : "; the planner reads only profiles taken at the "
                                               "spec's batch size");
  return 0;
}

}  // namespace heterps::tools
