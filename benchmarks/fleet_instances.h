// Benchmark instances built from the example fleet: a cluster of T of its types (the throughput
// limit relative to what the best single type can do: sched::testing::WithRelativeLimit).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"

namespace heterps::benchmarks {

// T types spread evenly over examples/clusters/fleet-64.yaml (read from `fleet_path`), each type's
// units multiplied by `unit_scale` (at least 1).
absl::StatusOr<config::ClusterSpec> FleetSubset(const std::string& fleet_path, int types,
                                                double unit_scale);

// "Intel(R) Xeon(R) ..., 2 cores": what the figures were measured on.
std::string MachineDescription();

}  // namespace heterps::benchmarks
