// The plan reader (sched/run_plan.h) against the example model and cluster, and the profile
// reader (cost/profile.h), on the same text. Run from the repository root (the examples are read
// from examples/).
#include <cstdio>
#include <cstdlib>

#include "fuzz/fuzz_target.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/profile.h"
#include "heterps/sched/run_plan.h"

namespace {

template <typename T>
const T& OrDie(const absl::StatusOr<T>& value) {
  if (!value.ok()) {
    std::fprintf(stderr, "fuzz_plan_json: %s (run from the repository root)\n",
                 std::string(value.status().message()).c_str());
    std::exit(2);
  }
  return *value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* model = new absl::StatusOr<heterps::config::ModelSpec>(
      heterps::config::LoadModelSpec("examples/models/dlrm-small.yaml"));
  static const auto* cluster = new absl::StatusOr<heterps::config::ClusterSpec>(
      heterps::config::LoadClusterSpec("examples/clusters/cloud.yaml"));
  const absl::string_view text = heterps::fuzz::Text(data, size);
  (void)heterps::sched::ReadRunPlan(text, "plan.json", OrDie(*model), OrDie(*cluster));
  (void)heterps::cost::ParseProfile(text, "profile.json");
  return 0;
}
