// Random small planning instances for tests and benchmarks: a model, a cluster and a workload,
// varied enough that every constraint (memory, throughput, shared units) binds somewhere.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/cost_model.h"

namespace heterps::sched::testing {

struct InstanceShape {
  int layers = 5;     // layers in the model, >= 3
  int types = 3;      // resource types, >= 1
  int max_units = 6;  // units available per type drawn from [1, max_units]
};

struct RandomInstance {
  config::ModelSpec model;
  config::ClusterSpec cluster;
  cost::Workload workload;
  std::string model_yaml;  // the text the model was parsed from, for failure messages
  std::string cluster_yaml;
};

// A model of `shape.layers` layers (input, optionally an embedding and a concat, fc layers of
// random widths, a logit and the loss) and a cluster of `shape.types` types whose figures span
// two orders of magnitude. The throughput limit is drawn around what one unit of a middling type
// reaches, so that some instances are infeasible. Deterministic for a given `rng` state.
RandomInstance MakeRandomInstance(std::mt19937_64& rng, const InstanceShape& shape);

// The instance's cost model (the instance is valid by construction).
cost::CostModel CostModelOf(const RandomInstance& instance);

// The cost model with a limit of `fraction` times the best throughput any single type reaches
// alone with all its units (near 1: one type barely suffices and mixing pays), N = 4.37e9. The
// parameter servers are priced, and the limit is also at most `fraction` times what the fastest
// servers reach; where no type can hold the tables (no SSD tier in the catalog), the instance
// prices the stages only, so that it still compares schedulers. `stages_only`: the stages only,
// always (the model before the servers were priced). The benchmarks' instances (sched_suite,
// sched_scaling) and the tests that reproduce them.
cost::CostModel WithRelativeLimit(const config::ModelSpec& model,
                                  const config::ClusterSpec& cluster, double fraction,
                                  bool stages_only = false);

// `types` types spread evenly over the catalog at `fleet_path` (examples/clusters/fleet-64.yaml),
// each type's units multiplied by `unit_scale` (at least 1). The benchmarks' catalogs.
absl::StatusOr<config::ClusterSpec> FleetSubset(const std::string& fleet_path, int types,
                                                double unit_scale);

// benchmarks/sched_scaling's instance of `layers` layers and `types` types: a random model
// (MakeRandomInstance's, seeded with seed * 1000 + layers) on FleetSubset(fleet_path, types,
// unit_scale) at WithRelativeLimit(fraction, stages_only).
absl::StatusOr<cost::CostModel> ScalingInstance(const std::string& fleet_path, int layers,
                                                int types, uint64_t seed, double fraction,
                                                double unit_scale, bool stages_only);

}  // namespace heterps::sched::testing
