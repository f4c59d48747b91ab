#include "heterps/cost/provisioner.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heterps::cost {
namespace {

double Gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

// The first constraint the plan fails even at its most generous provisioning.
Infeasibility Explain(const CostModel& model, absl::Span<const StageSpec> stages,
                      const std::vector<double>& x) {
  const double e_max = model.max_bottleneck_seconds();
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& type = model.type(stages[s].type);
    double need = model.StageMemoryBytes(stages[s].first, stages[s].last);
    if (need > type.memory) {
      return {"memory", need / type.memory - 1,
              absl::StrFormat("stage %d (%s) needs %.2f GiB per unit; %s has %.2f GiB", s,
                              DescribeStage(model, stages[s]), Gib(need), type.name,
                              Gib(type.memory))};
    }
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& type = model.type(stages[s].type);
    double best = CostModel::ExecSeconds(x[s], type.dp_loss, type.units);
    if (best > e_max) {
      double reach = model.batch() / best;
      return {"throughput", best / e_max - 1,
              absl::StrFormat("stage %d (%s) reaches at most %.0f samples/s with all %d units; "
                              "the limit is %.0f",
                              s, DescribeStage(model, stages[s]), reach, type.units,
                              model.workload().throughput_limit)};
    }
  }
  // Every stage can meet the limit alone; together they need more units of a type than exist.
  std::vector<int64_t> need(model.num_types(), 0);
  for (size_t s = 0; s < stages.size(); ++s) {
    need[stages[s].type] += model.MinUnits(x[s], stages[s].type, e_max);
  }
  for (int t = 0; t < model.num_types(); ++t) {
    if (need[t] > model.type(t).units) {
      return {"units", static_cast<double>(need[t]) / model.type(t).units - 1,
              absl::StrFormat("its stages on %s need %d units together to reach %.0f samples/s; "
                              "%d are available",
                              model.type(t).name, need[t], model.workload().throughput_limit,
                              model.type(t).units)};
    }
  }
  return {"units", 0, "no provisioning meets the limit"};
}

}  // namespace

std::string DescribeStage(const CostModel& model, const StageSpec& stage) {
  const auto& layers = model.model().layers;
  std::string names = stage.first == stage.last
                          ? layers[stage.first].name
                          : absl::StrCat(layers[stage.first].name, "..", layers[stage.last].name);
  return absl::StrCat(names, " on ", model.type(stage.type).name);
}

Provisioning Provision(const CostModel& model, absl::Span<const StageSpec> stages) {
  const size_t n = stages.size();
  const double e_max = model.max_bottleneck_seconds();
  std::vector<double> x(n);
  std::vector<int64_t> k_min(n);  // fewest units meeting the limit itself
  bool possible = true;
  for (size_t s = 0; s < n; ++s) {
    x[s] = model.StageSeconds(stages[s].first, stages[s].last, stages[s].type);
    k_min[s] = model.MinUnits(x[s], stages[s].type, e_max);
    possible = possible && k_min[s] > 0;
  }
  Provisioning best;
  best.cost_usd = kInfinity;
  std::vector<int64_t> units(n), used(model.num_types());
  for (size_t c = 0; possible && c < n; ++c) {
    const auto& ct = model.type(stages[c].type);
    for (int64_t kc = k_min[c]; kc <= ct.units; ++kc) {
      const double e = CostModel::ExecSeconds(x[c], ct.dp_loss, kc);
      std::fill(used.begin(), used.end(), 0);
      double rate = 0, bottleneck = 0;
      bool ok = true;
      for (size_t s = 0; s < n && ok; ++s) {
        const int t = stages[s].type;
        units[s] = model.MinUnits(x[s], t, e);
        used[t] += units[s];
        ok = units[s] > 0 && used[t] <= model.type(t).units;
        rate += static_cast<double>(units[s]) * model.type(t).price_per_hour;
        bottleneck = std::max(bottleneck, CostModel::ExecSeconds(x[s], model.type(t).dp_loss,
                                                                 units[s]));
      }
      if (!ok) continue;
      double cost = model.JobCost(bottleneck, rate);
      bool better = cost < best.cost_usd ||
                    (cost == best.cost_usd && bottleneck < best.bottleneck_seconds);
      if (!better) continue;
      best.feasible = true;
      best.units = units;
      best.bottleneck_seconds = bottleneck;
      best.usd_per_hour = rate;
      best.cost_usd = cost;
    }
  }
  if (!best.feasible) {
    Provisioning none;
    none.why = Explain(model, stages, x);
    return none;
  }
  for (size_t s = 0; s < n; ++s) {
    best.seconds.push_back(
        CostModel::ExecSeconds(x[s], model.type(stages[s].type).dp_loss, best.units[s]));
  }
  best.throughput = model.batch() / best.bottleneck_seconds;
  best.job_seconds = model.JobSeconds(best.bottleneck_seconds);
  return best;
}

}  // namespace heterps::cost
