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
