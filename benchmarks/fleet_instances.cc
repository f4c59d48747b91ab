#include "benchmarks/fleet_instances.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>

#include "absl/strings/str_format.h"
#include "heterps/base/status_macros.h"

namespace heterps::benchmarks {

absl::StatusOr<config::ClusterSpec> FleetSubset(const std::string& fleet_path, int types,
                                                double unit_scale) {
  HETERPS_ASSIGN_OR_RETURN(config::ClusterSpec fleet, config::LoadClusterSpec(fleet_path));
  config::ClusterSpec cluster = fleet;
  cluster.name = absl::StrFormat("fleet-%d", types);
  cluster.types.clear();
  const int n = static_cast<int>(fleet.types.size());
  for (int i = 0; i < types && i < n; ++i) {
    cluster.types.push_back(fleet.types[i * n / types]);
    int64_t& units = cluster.types.back().units;
    units = std::max<int64_t>(1, static_cast<int64_t>(std::lround(units * unit_scale)));
  }
  return cluster;
}

cost::CostModel WithRelativeLimit(const config::ModelSpec& model,
                                  const config::ClusterSpec& cluster, double fraction,
                                  bool stages_only) {
  cost::Workload workload{1.0, 4.37e9};
  workload.price_parameter_servers = !stages_only;
  cost::CostModel probe = *cost::CostModel::Create(model, cluster, workload);
  double best = 0, servers = 0;
  for (int t = 0; t < probe.num_types(); ++t) {
    const auto& type = probe.type(t);
    if (probe.HostsPs(t)) {
      const double e = probe.Ps(t, type.units).seconds_per_batch;
      if (std::isfinite(e)) servers = std::max(servers, probe.batch() / e);
    }
    double x = probe.StageSeconds(0, probe.num_layers() - 1, t);
    if (!std::isfinite(x)) continue;
    best =
        std::max(best, probe.batch() / cost::CostModel::ExecSeconds(x, type.dp_loss, type.units));
  }
  if (probe.prices_ps() && servers > 0) {
    best = std::min(best, servers);
  } else {
    workload.price_parameter_servers = false;
  }
  workload.throughput_limit = best > 0 ? best * fraction : 1.0;
  return *cost::CostModel::Create(model, cluster, workload);
}

std::string MachineDescription() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return absl::StrFormat("%s, %ld cores", model, sysconf(_SC_NPROCESSORS_ONLN));
}

}  // namespace heterps::benchmarks
