// Scheduler scaling: search time and plan cost as the model grows (layers 4..64) and the cluster
// grows (types 4..64).
//
//   build/benchmarks/sched_scaling [--time-limit SECONDS] [--seed S] [--limit-fraction F]
//                                  [--unit-scale U] [--stages-only 1] [--only LxT]
//
// Models: random layer chains (heterps/sched/testing) of L layers, seeded. Clusters: T types
// spread evenly over examples/clusters/fleet-64.yaml, each type's units multiplied by U (at least
// 1). Limit: F (default 0.25) times the best throughput any one type reaches alone with all its
// units; near 1, a single type barely suffices and mixing types pays. Prints a markdown table: each
// scheduler's wall time and its cost relative to `exact` (1.000 = same cost; "inf" = no feasible
// plan found). --only 64x64: that one instance, and each scheduler's plan (on stderr).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "absl/strings/str_format.h"
#include "benchmarks/machine_description.h"
#include "heterps/sched/default_schedulers.h"
#include "heterps/sched/testing/random_instance.h"

namespace heterps {
namespace {

cost::CostModel Instance(int layers, int types, uint64_t seed, double fraction, double unit_scale,
                         bool stages_only) {
  auto model = sched::testing::ScalingInstance("examples/clusters/fleet-64.yaml", layers, types,
                                               seed, fraction, unit_scale, stages_only);
  if (!model.ok()) {
    std::fprintf(stderr, "sched_scaling: %s (run from the repository root)\n",
                 std::string(model.status().message()).c_str());
    std::exit(2);
  }
  return *std::move(model);
}

}  // namespace
}  // namespace heterps

int main(int argc, char** argv) {
  using namespace heterps;
  double time_limit = 10;
  uint64_t seed = 1;
  double fraction = 0.25, unit_scale = 1;
  bool stages_only = false;  // the parameter servers left out of the model
  int only_layers = 0, only_types = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--time-limit") time_limit = std::atof(argv[i + 1]);
    if (flag == "--seed") seed = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--limit-fraction") fraction = std::atof(argv[i + 1]);
    if (flag == "--unit-scale") unit_scale = std::atof(argv[i + 1]);
    if (flag == "--stages-only") stages_only = std::atoi(argv[i + 1]) != 0;
    if (flag == "--only" && std::sscanf(argv[i + 1], "%dx%d", &only_layers, &only_types) != 2) {
      std::fprintf(stderr, "sched_scaling: --only wants LAYERSxTYPES, e.g. 64x64\n");
      return 2;
    }
  }
  std::printf(
      "machine: %s\nexact time limit: %.0f s, seed %llu, limit fraction %.2f, unit "
      "scale %.2f, %s\n\n",
      benchmarks::MachineDescription().c_str(), time_limit, static_cast<unsigned long long>(seed),
      fraction, unit_scale,
      stages_only ? "the stages priced only" : "the parameter servers priced");
  std::printf(
      "| layers | types | exact s | certified | stages | greedy | manual | homogeneous "
      "| rl | brute |\n");
  std::printf("|---:|---:|---:|:---:|---:|---:|---:|---:|---:|---:|\n");
  const std::vector<std::pair<int, int>> sizes = {{4, 4},   {8, 4},   {16, 4},  {32, 4},  {64, 4},
                                                  {4, 8},   {8, 8},   {16, 8},  {32, 8},  {64, 8},
                                                  {8, 16},  {16, 16}, {32, 16}, {64, 16}, {16, 32},
                                                  {32, 32}, {64, 32}, {16, 64}, {32, 64}, {64, 64}};
  sched::SchedulerRegistry registry = sched::DefaultSchedulers();
  for (auto [layers, types] : sizes) {
    if (only_layers > 0 && (layers != only_layers || types != only_types)) continue;
    cost::CostModel model = Instance(layers, types, seed, fraction, unit_scale, stages_only);
    sched::SchedulerOptions options;
    options.time_limit_seconds = time_limit;
    sched::PricedPlan exact = *(*registry.Create("exact"))->Schedule(model, options);
    if (only_layers > 0) {
      std::fprintf(stderr, "  %-12s %s\n", "exact", sched::PlanLine(model, exact).c_str());
    }
    auto ratio = [&](const char* name) -> std::string {
      auto plan = (*registry.Create(name))->Schedule(model, options);
      if (!plan.ok()) return "-";
      if (only_layers > 0) {
        std::fprintf(stderr, "  %-12s %s\n", name, sched::PlanLine(model, *plan).c_str());
      }
      if (!plan->feasible) return "inf";
      if (!exact.feasible) return "?";
      return absl::StrFormat("%.3f (%.2g s)", plan->cost_usd / exact.cost_usd,
                             plan->search_seconds);
    };
    // Uncertified: the gap to the best lower bound the search had.
    const std::string certified =
        !exact.feasible           ? "infeasible"
        : exact.certified_optimal ? "yes"
        : exact.lower_bound_usd > 0
            ? absl::StrFormat("no (gap %.2f%%)", 100 * (exact.cost_usd / exact.lower_bound_usd - 1))
            : "no";
    std::printf("| %d | %d | %.3f | %s | %zu | %s | %s | %s | %s | %s |\n", layers, types,
                exact.search_seconds, certified.c_str(), exact.stages.size(),
                ratio("greedy").c_str(), ratio("manual").c_str(), ratio("homogeneous").c_str(),
                ratio("rl").c_str(), std::pow(types, layers) <= 1e6 ? ratio("brute").c_str() : "-");
    std::fflush(stdout);
  }
  return 0;
}
