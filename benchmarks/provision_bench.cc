// Micro-benchmark: exact provisioning of a fixed plan as the number of stages grows.
//
//   build/benchmarks/provision_bench
//
// The plan cuts examples/models/dlrm-large.yaml into S stages and puts them on alternating types
// of examples/clusters/cloud.yaml, at a throughput limit every plan meets.
#include <benchmark/benchmark.h>

#include "heterps/cost/provisioner.h"

namespace heterps::cost {
namespace {

void BM_Provision(benchmark::State& state) {
  const int num_stages = static_cast<int>(state.range(0));
  auto model = config::LoadModelSpec("examples/models/dlrm-large.yaml");
  auto cluster = config::LoadClusterSpec("examples/clusters/cloud.yaml");
  if (!model.ok() || !cluster.ok()) {
    state.SkipWithError("run from the repository root");
    return;
  }
  auto cm = CostModel::Create(*model, *cluster, {20000, 4.37e9});
  const int layers = cm->num_layers();
  std::vector<StageSpec> stages;
  for (int s = 0; s < num_stages; ++s) {
    int first = s * layers / num_stages, last = (s + 1) * layers / num_stages - 1;
    stages.push_back(
        {first, last,
         s % 2 == 0 ? cluster->FindType("c6i.8xlarge") : cluster->FindType("g5.xlarge")});
  }
  int64_t units = 0;
  for (const StageSpec& s : stages) units += cm->type(s.type).units;
  bool feasible = false;
  for (auto _ : state) {
    Provisioning p = Provision(*cm, stages);
    feasible = p.feasible;
    benchmark::DoNotOptimize(p);
  }
  state.counters["stages"] = num_stages;
  state.counters["candidate_units"] = static_cast<double>(units);
  state.counters["feasible"] = feasible;
}
BENCHMARK(BM_Provision)->DenseRange(1, 8)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace heterps::cost

BENCHMARK_MAIN();
