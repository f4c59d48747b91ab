// Measuring a model's layers on this host: what `heterps profile` writes and what `heterps train`
// plans with (docs/cost_model.md, "Profiles").
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/profile.h"

namespace heterps::tools {

struct HostProfile {
  cost::Profile profile;                                // entries for the measured type
  std::vector<std::pair<std::string, double>> medians;  // seconds per batch, in layer order
  double total_seconds = 0;                             // their sum: one unit's step
};

// Builds the model against in-process tables and trains it on random Criteo-shaped batches of
// `batch` samples (2 to warm up, then `repeats` timed); per layer, the median forward + backward
// seconds of one batch, as profile entries for resource type `type`. `progress(done, total)` is
// called before each batch.
absl::StatusOr<HostProfile> ProfileHost(const config::ModelSpec& spec, int batch,
                                        const std::string& type, int repeats,
                                        const std::function<void(int, int)>& progress);

}  // namespace heterps::tools
