#include "heterps/sched/testing/random_instance.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/status_macros.h"

namespace heterps::sched::testing {
namespace {

double LogUniform(std::mt19937_64& rng, double lo, double hi) {
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  return std::exp(u(rng));
}

int Uniform(std::mt19937_64& rng, int lo, int hi) {
  return std::uniform_int_distribution<int>(lo, hi)(rng);
}

// input, then (embedding, concat) when there is room and a coin says so, fc layers of random
// widths, a logit and the loss.
std::string ModelYaml(std::mt19937_64& rng, int layers) {
  std::string y =
      absl::StrCat("name: random\nbatch_size: ", 1 << Uniform(rng, 6, 12), "\nlayers:\n");
  bool sparse = layers >= 5 && Uniform(rng, 0, 1) == 1;
  int dense = Uniform(rng, 1, 32), slots = Uniform(rng, 1, 26), dim = Uniform(rng, 2, 64);
  absl::StrAppend(&y, "  - {name: in, kind: input, dense: ", dense,
                  sparse ? absl::StrCat(", sparse: ", slots) : std::string(), "}\n");
  int width = dense, fcs = layers - 3;
  if (sparse) {
    absl::StrAppend(&y, "  - {name: emb, kind: embedding, rows: ", Uniform(rng, 1000, 1000000),
                    ", dim: ", dim, "}\n  - {name: cat, kind: interaction, op: concat}\n");
    width += slots * dim;
    fcs -= 2;
  }
  for (int i = 0; i < fcs; ++i) {
    int out = static_cast<int>(LogUniform(rng, 4, 4096));
    absl::StrAppend(&y, "  - {name: fc", i, ", kind: fc, in: ", width, ", out: ", out,
                    ", activation: relu}\n");
    width = out;
  }
  absl::StrAppend(&y, "  - {name: logit, kind: fc, in: ", width,
                  ", out: 1}\n  - {name: loss, kind: logloss}\n");
  return y;
}

std::string ClusterYaml(std::mt19937_64& rng, const InstanceShape& shape) {
  std::string y = "name: random\ntypes:\n";
  for (int t = 0; t < shape.types; ++t) {
    bool gpu = Uniform(rng, 0, 1) == 1;
    double scale = gpu ? 10 : 1;
    // Most CPU types have an SSD tier for the parameter servers.
    std::string ssd;
    if (!gpu && Uniform(rng, 0, 3) > 0) {
      ssd = absl::StrFormat(", ssd_gib: %.4g, ssd_kiops: %.4g", LogUniform(rng, 20, 4000),
                            LogUniform(rng, 50, 1000));
    }
    absl::StrAppend(
        &y, absl::StrFormat(
                "  - {name: t%d, kind: %s, tflops: %.4g, mem_gbs: %.4g, lookup_mrows: %.4g, "
                "memory_gib: %.4g, network_gbps: %.4g, overhead_us: %.3g, price_per_hour: %.4g, "
                "units: %d, dp_loss: %.3g%s}\n",
                t, gpu ? "gpu" : "cpu", scale * LogUniform(rng, 0.2, 4),
                scale * LogUniform(rng, 20, 200), scale * LogUniform(rng, 20, 400),
                LogUniform(rng, 0.05, 64), LogUniform(rng, 5, 100), LogUniform(rng, 0.5, 20),
                scale * LogUniform(rng, 0.1, 3), Uniform(rng, 1, shape.max_units),
                LogUniform(rng, 0.001, 0.3), ssd));
  }
  return y;
}

}  // namespace

RandomInstance MakeRandomInstance(std::mt19937_64& rng, const InstanceShape& shape) {
  RandomInstance instance;
  instance.model_yaml = ModelYaml(rng, std::max(3, shape.layers));
  instance.cluster_yaml = ClusterYaml(rng, shape);
  auto model = config::ParseModelSpec(instance.model_yaml, "random-model");
  auto cluster = config::ParseClusterSpec(instance.cluster_yaml, "random-cluster");
  if (!model.ok() || !cluster.ok()) {  // a bug in this generator, not in the code under test
    std::cerr << model.status() << "\n" << cluster.status() << "\n";
    std::abort();
  }
  instance.model = *model;
  instance.cluster = *cluster;
  // The limit: around what the whole model reaches on one unit of a random type.
  cost::CostModel probe = *cost::CostModel::Create(*model, *cluster, {1.0, 1e9});
  int t = Uniform(rng, 0, shape.types - 1);
  double one_unit = probe.batch() / probe.Stage(0, probe.num_layers() - 1, t).total();
  instance.workload.throughput_limit = one_unit * LogUniform(rng, 0.1, 8);
  instance.workload.samples = LogUniform(rng, 1e6, 1e10);
  instance.workload.access_skew = LogUniform(rng, 0.3, 1.5);
  return instance;
}

cost::CostModel CostModelOf(const RandomInstance& instance) {
  return *cost::CostModel::Create(instance.model, instance.cluster, instance.workload);
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

absl::StatusOr<cost::CostModel> ScalingInstance(const std::string& fleet_path, int layers,
                                                int types, uint64_t seed, double fraction,
                                                double unit_scale, bool stages_only) {
  std::mt19937_64 rng(seed * 1000 + layers);
  const config::ModelSpec model = MakeRandomInstance(rng, {layers, 1, 1}).model;
  HETERPS_ASSIGN_OR_RETURN(config::ClusterSpec cluster, FleetSubset(fleet_path, types, unit_scale));
  return WithRelativeLimit(model, cluster, fraction, stages_only);
}

}  // namespace heterps::sched::testing
