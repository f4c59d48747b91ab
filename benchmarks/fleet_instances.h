// Benchmark instances built from the example fleet: a cluster of T of its types and a throughput
// limit set relative to what the best single type can do.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/cost_model.h"

namespace heterps::benchmarks {

// T types spread evenly over examples/clusters/fleet-64.yaml (read from `fleet_path`), each type's
// units multiplied by `unit_scale` (at least 1).
absl::StatusOr<config::ClusterSpec> FleetSubset(const std::string& fleet_path, int types,
                                                double unit_scale);

// The cost model with a limit of `fraction` times the best throughput any single type reaches
// alone with all its units (near 1: one type barely suffices and mixing pays), N = 4.37e9. The
// parameter servers are priced, and the limit is also at most `fraction` times what the fastest
// servers reach; where no type can hold the tables (no SSD tier in the fleet), the instance
// prices the stages only, so that it still compares schedulers. `stages_only`: the stages only,
// always (the model before the servers were priced).
cost::CostModel WithRelativeLimit(const config::ModelSpec& model,
                                  const config::ClusterSpec& cluster, double fraction,
                                  bool stages_only = false);

// "Intel(R) Xeon(R) ..., 2 cores": what the figures were measured on.
std::string MachineDescription();

}  // namespace heterps::benchmarks
