#include "tools/profile_command.h"

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/file.h"
#include "heterps/cost/profile.h"
#include "heterps/data/line_source.h"
#include "heterps/launcher/local_gpus.h"
#include "heterps/worker/profile.h"
#include "tools/cli_common.h"
#include "tools/plan_here.h"
#include "tools/table.h"

namespace heterps::tools {

CLI::App* AddProfileCommand(CLI::App& app, ProfileFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Measure each layer's time per batch and the network of a distributed step on this host, and "
      "write a planner profile");
  cmd->add_option("--model", flags.model_path, "Model spec (default: the embedded dlrm-small)");
  cmd->add_option("--batch", flags.batch, "Samples per batch (default: the spec's batch_size)")
      ->check(NonNegative());
  cmd->add_option("--type", flags.type, "Resource type the figures are for (default host-cpu)");
  cmd->add_option("--repeats", flags.repeats, "Timed batches; the median is kept (default 5)")
      ->check(Positive());
  cmd->add_option("--out", flags.out, "The profile JSON to write")->required();
  cmd->add_option("--data", flags.data,
                  "Data files or globs to profile on, in the model's layout (default: random "
                  "batches shaped as its data)");
  cmd->add_option(
      "--cluster", flags.cluster_path,
      "Cluster spec whose --type's units and data-parallel loss the network is measured "
      "and fitted with (default: the embedded local.yaml)");
  cmd->add_option("--gpu-emulate", flags.gpu_emulate,
                  "For testing: also measure the host twin of a GPU (type gpu-twin)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--gpu-cache-gib", flags.gpu_cache_gib,
                  "Measure each GPU with a GPU tier of this many GiB feeding the stage on it, as "
                  "`heterps train --gpu-cache-gib` runs it")
      ->check(NonNegative());
  return cmd;
}

int RunProfile(const ProfileFlags& flags) {
  absl::StatusOr<config::ModelSpec> spec = LoadModelOrDefault(flags.model_path);
  if (!spec.ok()) return Fail(spec.status());
  const int batch_size = flags.batch > 0 ? flags.batch : static_cast<int>(spec->batch_size);
  // This host's CPU as `--type`, and its GPUs (and emulated ones) as the local catalog names them.
  config::ClusterSpec local;
  config::ResourceType cpu;
  cpu.name = flags.type;
  cpu.local_device = "cpu";
  local.types.push_back(cpu);
  for (const std::string& line : launcher::AddLocalGpus(&local, flags.gpu_emulate)) {
    std::printf("device %s\n", line.c_str());
  }
  // The network profile's replicas and each type's dp_loss, as the cluster has them; a type it
  // lacks: one replica per hardware thread, no loss.
  absl::StatusOr<config::ClusterSpec> cluster = LoadClusterOrLocal(flags.cluster_path);
  if (!cluster.ok()) return Fail(cluster.status());
  std::vector<const config::ResourceType*> types;
  for (config::ResourceType& t : local.types) {
    const int found = cluster->FindType(t.name);
    t.units = found >= 0 ? cluster->types[found].units : 0;
    t.dp_loss = found >= 0 ? cluster->types[found].dp_loss : 0.0;
    if (t.units == 0 && &t == &local.types.front()) t.units = std::thread::hardware_concurrency();
    types.push_back(&t);
  }
  worker::rpc::NetworkProfileOptions network_options;
  if (!flags.data.empty()) {
    absl::StatusOr<std::vector<std::string>> files = data::ExpandDataPaths(flags.data);
    if (!files.ok()) return Fail(files.status());
    // Multi-hot slots are counted as the data holds them, as `heterps train` plans them.
    absl::StatusOr<std::vector<std::string>> notes = UseIdsOfData(*files, &*spec);
    if (!notes.ok()) return Fail(notes.status());
    for (const std::string& note : *notes) std::printf("%s\n", note.c_str());
    network_options.batches = DataBatches(*spec, *files, data::BadLinePolicy::kStop);
  }
  cost::Profile profile;
  std::vector<worker::HostProfile> measured;
  ProgressLine progress(true);
  TrainFlags job;  // the default synchronous job, with the tier asked for
  job.gpu_cache_gib = flags.gpu_cache_gib;
  for (const config::ResourceType& t : local.types) {
    worker::ProfileOptions options = TierProfileOptions(job, *spec, t.local_device);
    options.type = t.name;
    options.repeats = flags.repeats;
    options.progress = [&](int done, int total) {
      progress.Show(absl::StrFormat("profiling %s %s batch %d of %d", t.local_device,
                                    Bar(done, total), done + 1, total));
    };
    absl::StatusOr<worker::HostProfile> one =
        worker::ProfileHost(*spec, batch_size, options, network_options.batches);
    if (!one.ok()) {
      progress.Clear();
      return Fail(one.status());
    }
    MergeProfile(one->profile, &profile);
    measured.push_back(*std::move(one));
  }
  absl::StatusOr<NetworkMeasured> network =
      AddNetworkProfile(*spec, batch_size, measured.front().total_seconds, local.types.front(),
                        types, network_options, progress, &profile);
  if (network.ok()) {
    const absl::Status tier = AddTierNetworkProfiles(
        *spec, batch_size, types,
        [&](const config::ResourceType& t) {
          return TierProfileOptions(job, *spec, t.local_device);
        },
        network_options, progress, &profile);
    if (!tier.ok()) network = tier;
  }
  progress.Clear();
  if (!network.ok()) return Fail(network.status());
  absl::Status written = base::WriteFileAtomically(flags.out, cost::ProfileToJson(profile));
  if (!written.ok()) return Fail(written);
  std::printf("%s, batch %d, on %s: median of %d batches, ms per batch\n\n", spec->name.c_str(),
              batch_size, profile.host.c_str(), flags.repeats);
  std::vector<std::string> header = {"layer"};
  for (const config::ResourceType& t : local.types) {
    header.push_back(absl::StrCat(t.name, " (", t.local_device, ")"));
  }
  Table table(header, std::vector<bool>(header.size(), true));
  for (size_t l = 0; l < measured[0].medians.size(); ++l) {
    std::vector<std::string> row = {measured[0].medians[l].first};
    for (const worker::HostProfile& m : measured) {
      row.push_back(l < m.medians.size() ? absl::StrFormat("%.3f", 1e3 * m.medians[l].second)
                                         : "-");
    }
    table.AddRow(row);
  }
  std::vector<std::string> total = {"total"};
  for (const worker::HostProfile& m : measured) {
    total.push_back(absl::StrFormat("%.3f", 1e3 * m.total_seconds));
  }
  table.AddRow(total);
  std::printf("%s\n", table.Render().c_str());
  for (const cost::TierEntry& e : profile.tier) {
    std::printf(
        "GPU tier of %s (%s GiB): of a batch's %.0f lookups, %.0f loaded from the servers and "
        "%.0f passed through to them (%.1f%%), dense parameters %s\n",
        e.type.c_str(), HumanNumber(flags.gpu_cache_gib).c_str(), e.lookups_per_batch,
        e.loaded_rows_per_batch, e.passed_rows_per_batch,
        100 * (e.loaded_rows_per_batch + e.passed_rows_per_batch) / e.lookups_per_batch,
        e.dense_held ? "held on the device" : "on the servers");
  }
  if (!profile.tier.empty()) std::printf("\n");
  // The network: a synchronous step through the real client and server, beyond the layers.
  const worker::rpc::NetworkFit& fit = network->fits.front();
  Table steps({"batch", "layers, 1 unit (ms)", "step of the replicas (ms)", "network, 1 unit (ms)",
               "model's bytes (MB)"},
              {true, true, true, true, true});
  for (size_t i = 0; i < network->points.size(); ++i) {
    const worker::rpc::NetworkPoint& p = network->points[i];
    steps.AddRow({absl::StrCat(p.batch), absl::StrFormat("%.3f", 1e3 * p.layer_seconds),
                  absl::StrFormat("%.3f", 1e3 * p.step_seconds),
                  absl::StrFormat("%.3f", 1e3 * fit.network_seconds[i]),
                  absl::StrFormat("%.2f", p.bytes / 1e6)});
  }
  std::printf(
      "a synchronous step of %d replicas through the parameter-server client and a server on "
      "loopback:\n\n%s\n",
      network->replicas, steps.Render().c_str());
  for (size_t i = 0; i < types.size(); ++i) {
    const bool tier =
        std::any_of(profile.tier.begin(), profile.tier.end(),
                    [&](const cost::TierEntry& e) { return e.type == types[i]->name; });
    auto entry =
        std::find_if(profile.network.begin(), profile.network.end(),
                     [&](const cost::NetworkEntry& e) { return e.type == types[i]->name; });
    if (tier && entry != profile.network.end()) {
      std::printf("network of %s: %.1f MB/s and %.3f ms per message (the GPU tier's own step)\n",
                  types[i]->name.c_str(), entry->bytes_per_second / 1e6,
                  1e3 * entry->seconds_per_message);
      continue;
    }
    std::printf("network of %s: %.1f MB/s and %.3f ms per message (%s fit)\n",
                types[i]->name.c_str(), network->fits[i].bytes_per_second / 1e6,
                1e3 * network->fits[i].seconds_per_message, network->fits[i].fit.c_str());
  }
  std::printf("wrote %s%s\n", flags.out.c_str(),
              batch_size == spec->batch_size ? ""
                                             : "; the planner reads only profiles taken at the "
                                               "spec's batch size");
  return 0;
}

}  // namespace heterps::tools
