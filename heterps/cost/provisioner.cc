#include "heterps/cost/provisioner.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/numbers.h"

namespace heterps::cost {
namespace {

double Gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

// The types the plan's servers may run on, each tried across regions: those that may hold them
// where they are priced, else -1 (none).
std::vector<int> ServerTypes(const CostModel& model) {
  if (!model.prices_ps()) return {-1};
  std::vector<int> types;
  for (int t = 0; t < model.num_types(); ++t) {
    if (model.HostsPs(t)) types.push_back(t);
  }
  return types;
}

// The first constraint the plan fails even at its most generous provisioning.
Infeasibility Explain(const CostModel& model, absl::Span<const StageSpec> stages,
                      const std::vector<double>& x) {
  const double e_max = model.max_bottleneck_seconds();
  if (const int through = model.workload().first_stage_through;
      through >= 0 && !stages.empty() && stages[0].last < through) {
    return {"first stage", 1,
            absl::StrFormat("stage 0 (%s) ends before layer %s, which the first stage must hold "
                            "(a GPU tier's stage looks the embeddings up)",
                            DescribeStage(model, stages[0]), model.model().layers[through].name)};
  }
  const cost::Workload& job = model.workload();
  for (size_t s = 0; s < stages.size(); ++s) {
    if (model.MayRun(stages[s].first, stages[s].type)) continue;
    return {"residency", 1,
            ResidencyBreach(absl::StrFormat("stage %d (%s)", s, DescribeStage(model, stages[s])),
                            model.type(stages[s].type).region, job, model.away_from_name())};
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& type = model.type(stages[s].type);
    double need = model.StageMemoryBytes(stages[s].first, stages[s].last);
    if (need > type.memory) {
      return {
          "memory", need / type.memory - 1,
          absl::StrFormat("stage %d (%s) needs %.2f GiB per unit; %s has %.2f GiB", s,
                          DescribeStage(model, stages[s]), Gib(need), type.name, Gib(type.memory))};
    }
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    const auto& type = model.type(stages[s].type);
    const int64_t most = model.MaxStageUnits(stages[s].first, stages[s].type);
    double best = CostModel::ExecSeconds(x[s], type.dp_loss, most);
    if (best > e_max) {
      double reach = model.batch() / best;
      return {"throughput", best / e_max - 1,
              absl::StrFormat("stage %d (%s) reaches at most %s samples/s %s; the limit is %s", s,
                              DescribeStage(model, stages[s]), base::HumanNumber(reach),
                              most < type.units
                                  ? absl::StrFormat("on %d unit%s, the most the first stage may "
                                                    "have (a GPU tier's stage runs on one replica)",
                                                    most, most == 1 ? "" : "s")
                                  : absl::StrFormat("with all %d units", type.units),
                              base::HumanNumber(model.workload().throughput_limit))};
    }
  }
  if (model.prices_ps() && !std::isfinite(model.CheapestPsRate(e_max))) {
    // The fastest the servers get on any type, with all its units.
    double fastest = kInfinity;
    std::string type;
    bool hosts = false;  // some type may hold them
    for (int t = 0; t < model.num_types(); ++t) {
      if (!model.HostsPs(t)) continue;
      hosts = true;
      const PsServers ps = model.Ps(t, model.type(t).units);
      if (ps.seconds_per_batch < fastest) {
        fastest = ps.seconds_per_batch;
        type = model.type(t).name;
      }
    }
    if (!hosts) {
      return {"residency", 1,
              absl::StrFormat("%s is kept in region '%s', which has no CPU type for the "
                              "parameter servers (they receive its ids)",
                              DataName(job), job.data_region)};
    }
    if (!std::isfinite(fastest)) {
      return {"parameter servers", 1,
              absl::StrFormat("the parameter servers: no CPU type can hold the embedding tables "
                              "(%.2f GiB with their optimizer state) in the memory and SSD of "
                              "all its units",
                              Gib(model.table_bytes()))};
    }
    return {"parameter servers", fastest / e_max - 1,
            absl::StrFormat("the parameter servers reach at most %s samples/s (%s, all "
                            "units); the limit is %s",
                            base::HumanNumber(model.batch() / fastest), type,
                            base::HumanNumber(model.workload().throughput_limit))};
  }
  if (model.num_regions() > 1) {
    // The plan's links with the servers where they load them least.
    WanLoad best;
    double fastest = kInfinity;
    std::vector<int> server_types = ServerTypes(model);
    if (server_types.empty()) server_types.push_back(-1);
    for (int p : server_types) {
      WanLoad load = PlanWanLoad(model, stages, p);
      if (const double seconds = model.LinkSeconds(load); seconds < fastest) {
        fastest = seconds;
        best = std::move(load);
      }
    }
    if (fastest > e_max) {
      return {"links", fastest / e_max - 1,
              absl::StrFormat("%s takes %.3g s per batch, more than the %.3g s the limit allows",
                              model.DescribeSlowestLink(best), fastest, e_max)};
    }
  }
  // Every stage can meet the limit alone; together they need more units of a type than exist.
  std::vector<int64_t> need(model.num_types(), 0);
  for (size_t s = 0; s < stages.size(); ++s) {
    need[stages[s].type] += model.MinUnits(x[s], stages[s].type, e_max);
  }
  if (model.prices_ps()) {
    // The stages fit; the servers do not fit beside them.
    bool fits = true;
    for (int t = 0; t < model.num_types(); ++t) fits = fits && need[t] <= model.type(t).units;
    if (fits && model.CheapestPs(e_max, need).type < 0) {
      // The type that comes closest: its servers' shards beside the stages' units.
      double shortfall = kInfinity;
      std::string message;
      for (int t = 0; t < model.num_types(); ++t) {
        const int64_t shards =
            model.HostsPs(t) ? model.MinPsShards(t, e_max, model.type(t).units) : 0;
        if (shards == 0) continue;
        const double over = static_cast<double>(need[t] + shards) / model.type(t).units - 1;
        if (over < shortfall) {
          shortfall = over;
          message = absl::StrFormat(
              "the parameter servers need %d units of %s to reach %s samples/s, beside the "
              "stages' %d; %d are available",
              shards, model.type(t).name, base::HumanNumber(model.workload().throughput_limit),
              need[t], model.type(t).units);
        }
      }
      return {"units", shortfall, message};
    }
  }
  for (int t = 0; t < model.num_types(); ++t) {
    if (need[t] > model.type(t).units) {
      return {"units", static_cast<double>(need[t]) / model.type(t).units - 1,
              absl::StrFormat("its stages on %s need %d units together to reach %s samples/s; "
                              "%d are available",
                              model.type(t).name, need[t],
                              base::HumanNumber(model.workload().throughput_limit),
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
  std::vector<int64_t> k_min(n);      // fewest units meeting the limit itself, under the rules
  std::vector<int64_t> max_units(n);  // most units the stage may have
  bool possible = n > 0;
  for (size_t s = 0; s < n; ++s) {
    const StageSpec& st = stages[s];
    x[s] = model.StageSeconds(st.first, st.last, st.type);
    k_min[s] = model.MinStageUnits(st.first, st.last, x[s], st.type, e_max);
    max_units[s] = model.MaxStageUnits(st.first, st.type);
    possible = possible && k_min[s] > 0;
  }
  Provisioning best;
  best.cost_usd = kInfinity;
  std::vector<int64_t> units(n), used(model.num_types());
  // Across regions: the stages' boundaries, and with each choice of the servers' type their
  // traffic too; the servers' region moves the plan's traffic, so each type that may hold them
  // is tried, not only the cheapest (docs/cost_model.md, "Links between regions").
  const bool wan = model.num_regions() > 1;
  const std::vector<int> server_types = wan ? ServerTypes(model) : std::vector<int>();
  std::vector<WanLoad> loads;  // [i]: the plan's traffic with the servers on server_types[i]
  for (int p : server_types) loads.push_back(PlanWanLoad(model, stages, p));
  // Where the plan is cheapest at bottleneck e: as `candidate` below, with each server type's
  // links and egress.
  const auto consider = [&](double e, double rate, double bottleneck, const PsServers& ps,
                            WanLoad load) {
    const double link = model.LinkSeconds(load);
    if (link > e) return;  // the links' own bottleneck is a candidate of its own
    bottleneck = std::max(bottleneck, link);
    const double egress = model.JobEgressUsd(load);
    const double cost = model.JobCost(bottleneck, rate) + egress;
    const bool better =
        cost < best.cost_usd || (cost == best.cost_usd && bottleneck < best.bottleneck_seconds);
    if (!better) return;
    best.feasible = true;
    best.units = units;
    best.bottleneck_seconds = bottleneck;
    best.usd_per_hour = rate;
    best.cost_usd = cost;
    best.ps = ps;
    best.link_seconds = link;
    best.egress_usd = egress;
    best.wan = std::move(load);
  };
  // The fewest units of each stage at bottleneck e, and the cheapest servers beside them.
  auto candidate = [&](double e) {
    std::fill(used.begin(), used.end(), 0);
    double rate = 0, bottleneck = 0;
    for (size_t s = 0; s < n; ++s) {
      const int t = stages[s].type;
      units[s] = model.MinStageUnits(stages[s].first, stages[s].last, x[s], t, e);
      used[t] += units[s];
      if (units[s] == 0 || used[t] > model.type(t).units) return;
      rate += static_cast<double>(units[s]) * model.type(t).price_per_hour;
      bottleneck =
          std::max(bottleneck, CostModel::ExecSeconds(x[s], model.type(t).dp_loss, units[s]));
    }
    if (wan) {
      for (size_t i = 0; i < server_types.size(); ++i) {
        const int p = server_types[i];
        PsServers ps;
        if (p >= 0) {
          const int64_t shards = model.MinPsShards(p, e, model.type(p).units - used[p]);
          if (shards == 0) continue;
          ps = model.Ps(p, shards);
        }
        consider(e, rate + ps.usd_per_hour, std::max(bottleneck, ps.seconds_per_batch), ps,
                 loads[i]);
      }
      return;
    }
    PsServers ps;
    if (model.prices_ps()) {
      ps = model.CheapestPs(e, used);
      if (ps.type < 0) return;
      rate += ps.usd_per_hour;
      bottleneck = std::max(bottleneck, ps.seconds_per_batch);
    }
    consider(e, rate, bottleneck, ps, model.NoWanLoad());
  };
  double floor = 0;  // no bottleneck below it: a stage's ET with all its units
  for (size_t c = 0; possible && c < n; ++c) {
    const auto& ct = model.type(stages[c].type);
    floor = std::max(floor, CostModel::ExecSeconds(x[c], ct.dp_loss, max_units[c]));
    for (int64_t kc = k_min[c]; kc <= max_units[c]; ++kc) {
      candidate(CostModel::ExecSeconds(x[c], ct.dp_loss, kc));
    }
  }
  // Bottlenecks where the servers are the slowest stage.
  const std::vector<double>& ps = model.ps_candidates();
  for (auto it = std::lower_bound(ps.begin(), ps.end(), floor); possible && it != ps.end(); ++it) {
    candidate(*it);
  }
  // Bottlenecks where a link is the slowest: between two candidates the units are those of the
  // lower one, so the link's own time is where such a plan is cheapest.
  for (size_t i = 0; possible && i < loads.size(); ++i) {
    const double link = model.LinkSeconds(loads[i]);
    if (link >= floor && link <= e_max) candidate(link);
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

WanLoad PlanWanLoad(const CostModel& model, absl::Span<const StageSpec> stages, int ps_type) {
  WanLoad load = model.NoWanLoad();
  for (size_t s = 0; s < stages.size(); ++s) {
    if (s > 0) {
      model.AddBoundaryLoad(stages[s - 1].last, stages[s - 1].type, stages[s].type, &load);
    }
    model.AddServerLoad(stages[s].first, stages[s].last, stages[s].type, ps_type, &load);
  }
  return load;
}

}  // namespace heterps::cost
