// The scheduler zoo: models and catalogs that neither the examples nor the fleet subsets of
// sched_suite contain, for a suite of instances nobody tuned the schedulers on.
//
// Models: two-tower, DeepFM, DCN (cross layers as custom layers), CTR-DNN (the example), an
// NCE-style model (a sampled output layer over a million classes, a gigabyte of dense
// parameters), a multi-hot model (50 ids per slot), a 46-layer deep model and a compute-heavy
// model of custom layers. Catalogs of T types (8 to 64) of five kinds: on-prem (few hardware
// kinds, many units, amortised prices), GCP-like and Azure-like (the same hardware at each
// cloud's price ratios, in regions), spot-heavy (most types spot pools of a few units, with a
// higher data-parallel loss) and random (every figure drawn log-uniformly). Deterministic.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"

namespace heterps::benchmarks {

// The zoo's model names, and each model's spec ("ctr-dnn" is read from examples/models: run from
// the repository root).
std::vector<std::string> ZooModels();
absl::StatusOr<config::ModelSpec> ZooModel(const std::string& name);

// The catalog kinds ("onprem", "gcp", "azure", "spot", "random"), and a catalog of `types` types
// of one kind (types >= 1).
std::vector<std::string> ZooCatalogs();
absl::StatusOr<config::ClusterSpec> ZooCatalog(const std::string& kind, int types);

}  // namespace heterps::benchmarks
