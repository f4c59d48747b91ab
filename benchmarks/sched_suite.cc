// The scheduler benchmark suite: every scheduler on 100 instances, each compared with the best
// known plan (the certified optimum wherever `exact` certifies).
//
//   build/benchmarks/sched_suite [--budget N] [--time-limit S] [--seed S] [--csv FILE]
//                                [--markdown FILE] [--only NAME-PART] [--suite fleet|zoo]
//                                [--schedulers NAME,NAME,...]
//
// Instances: the 5 example models x clusters of 4, 8, 16, 32 and 64 types spread over
// examples/clusters/fleet-64.yaml x a "loose" or "tight" limit (a quarter, or 0.9, of the best
// single type's throughput with all its units) x "plentiful" or "scarce" units (every unit of the
// fleet, or a quarter of them; the limit is set after the units are scaled). The
// searching schedulers (rl, genetic, bo, random) get the same budget of evaluated plans (default
// 1000); exact gets the time limit (default 10 s). Writes one CSV row per (instance, scheduler)
// and replaces the section between the scheduler-suite markers of the markdown file (default
// docs/benchmarks.md) with the summary.
//
// --suite zoo: the models and catalogs of benchmarks/zoo_instances.h instead (8 models x 5
// catalog kinds x 16 or 64 types x a loose or tight limit, 160 instances), written to the
// scheduler-zoo section and build/sched_zoo.csv.
//
// --schedulers: run only these (ratios are then to the best of those run; no markdown is written),
// e.g. `--schedulers exact,rl` while tuning one scheduler.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "benchmarks/machine_description.h"
#include "benchmarks/markdown_section.h"
#include "benchmarks/zoo_instances.h"
#include "heterps/base/file.h"
#include "heterps/sched/default_schedulers.h"
#include "heterps/sched/testing/random_instance.h"

namespace heterps::benchmarks {
namespace {

const std::vector<std::string> kSchedulers = {"exact",  "auto",   "rl",     "genetic",    "bo",
                                              "random", "greedy", "manual", "homogeneous"};

struct Row {
  std::string instance, scheduler;
  bool feasible = false, certified_instance = false;
  double cost = 0, ratio = 0, seconds = 0;
  double lower_bound = 0;  // the scheduler's lower bound on the optimum (exact's, where it has one)
  int64_t plans = 0;
};

struct Flags {
  int64_t budget = 1000;
  double time_limit = 10;
  uint64_t seed = 1;
  std::string suite = "fleet";
  std::string csv;  // default: build/sched_suite.csv (fleet) or build/sched_zoo.csv (zoo)
  std::string markdown = "docs/benchmarks.md";
  std::string only;  // run only instances whose name contains this (and write no markdown)
  std::vector<std::string> schedulers = kSchedulers;  // a subset: no markdown either
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--budget") f.budget = std::stoll(value);
    if (flag == "--time-limit") f.time_limit = std::stod(value);
    if (flag == "--seed") f.seed = std::stoull(value);
    if (flag == "--csv") f.csv = value;
    if (flag == "--markdown") f.markdown = value;
    if (flag == "--only") f.only = value;
    if (flag == "--suite") f.suite = value;
    if (flag == "--schedulers") f.schedulers = absl::StrSplit(value, ',');
  }
  if (f.suite != "fleet" && f.suite != "zoo") {
    std::fprintf(stderr, "sched_suite: --suite is fleet or zoo, not %s\n", f.suite.c_str());
    std::exit(2);
  }
  for (const std::string& s : f.schedulers) {
    if (std::find(kSchedulers.begin(), kSchedulers.end(), s) == kSchedulers.end()) {
      std::fprintf(stderr, "sched_suite: --schedulers: no scheduler named '%s'\n", s.c_str());
      std::exit(2);
    }
  }
  if (f.csv.empty()) f.csv = f.suite == "zoo" ? "build/sched_zoo.csv" : "build/sched_suite.csv";
  return f;
}

std::vector<Row> RunInstance(const std::string& name, const cost::CostModel& model,
                             const Flags& flags) {
  sched::SchedulerRegistry registry = sched::DefaultSchedulers();
  std::vector<Row> rows;
  for (const std::string& s : flags.schedulers) {
    sched::SchedulerOptions options;
    options.seed = flags.seed;
    options.time_limit_seconds = flags.time_limit;
    options.max_plans = s == "exact" ? 0 : flags.budget;
    sched::PricedPlan plan = *(*registry.Create(s))->Schedule(model, options);
    if (!flags.only.empty()) {
      // One instance asked for: its plans, one line each.
      std::fprintf(stderr, "  %-12s %s\n", s.c_str(), sched::PlanLine(model, plan).c_str());
    }
    Row row{name,
            s,
            plan.feasible,
            false,
            plan.cost_usd,
            0,
            plan.search_seconds,
            plan.lower_bound_usd,
            plan.plans_evaluated};
    if (s == "exact") row.certified_instance = plan.certified_optimal;
    rows.push_back(row);
  }
  double best = cost::kInfinity;
  bool certified = false;
  for (const Row& r : rows) {
    if (r.feasible) best = std::min(best, r.cost);
    if (r.scheduler == "exact") certified = r.certified_instance;
  }
  for (Row& r : rows) {
    r.certified_instance = certified;
    r.ratio = r.feasible ? r.cost / best : cost::kInfinity;
  }
  return rows;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string Summary(const std::vector<Row>& rows, const Flags& flags, int instances) {
  std::map<std::string, std::vector<const Row*>> by;
  std::map<std::string, bool> any_feasible;
  for (const Row& r : rows) {
    by[r.scheduler].push_back(&r);
    any_feasible[r.instance] = any_feasible[r.instance] || r.feasible;
  }
  int certified = 0, feasible_instances = 0;
  for (const Row* r : by["exact"]) certified += r->certified_instance && r->feasible;
  for (const auto& [name, any] : any_feasible) feasible_instances += any;
  std::string out = absl::StrFormat(
      "Machine: %s. %d instances (%d with a feasible plan, %d certified optimal by exact); "
      "budget %d evaluated plans for the searching schedulers, %.0f s for exact.\n\n"
      "| scheduler | feasible | geomean cost / best | within 1%% of the optimum (certified) | "
      "worst / optimum (certified) | missed where another was feasible | median s |\n"
      "|---|---:|---:|---:|---:|---:|---:|\n",
      MachineDescription(), instances, feasible_instances, certified, flags.budget,
      flags.time_limit);
  for (const std::string& s : flags.schedulers) {
    int feasible = 0, within = 0, missed = 0;
    double log_sum = 0, worst = 1;
    std::vector<double> seconds;
    for (const Row* r : by[s]) {
      seconds.push_back(r->seconds);
      if (!r->feasible) {
        missed += any_feasible[r->instance];
        continue;
      }
      ++feasible;
      log_sum += std::log(r->ratio);
      if (r->certified_instance) {
        within += r->ratio <= 1.01 + 1e-12;
        worst = std::max(worst, r->ratio);
      }
    }
    const bool none = feasible == 0;
    out += absl::StrFormat(
        "| %s | %d / %d | %s | %d / %d | %s | %d | %.3f |\n", s, feasible, feasible_instances,
        none ? "-" : absl::StrFormat("%.3f", std::exp(log_sum / feasible)), within, certified,
        none ? "-" : absl::StrFormat("%.3f", worst), missed, Median(seconds));
  }
  // exact's gap where it did not certify, and auto against the best plan known.
  int uncertified = 0, auto_within = 0, auto_feasible = 0;
  double gap = 0, auto_worst = 1;
  for (const Row* r : by["exact"]) {
    if (!r->feasible || r->certified_instance) continue;
    ++uncertified;
    gap = std::max(gap, r->lower_bound > 0 ? r->cost / r->lower_bound - 1 : cost::kInfinity);
  }
  for (const Row* r : by["auto"]) {
    if (!r->feasible) continue;
    ++auto_feasible;
    auto_within += r->ratio <= 1.01 + 1e-12;
    auto_worst = std::max(auto_worst, r->ratio);
  }
  out += absl::StrFormat(
      "\n`exact` ended uncertified at the time limit on %d of %d feasible instances, with a "
      "gap (its cost over its lower bound, less 1) of at most %.2f%%. `auto` was within 1%% of "
      "the best plan any scheduler found on %d of %d, at worst %.3f of it.\n",
      uncertified, feasible_instances, 100 * gap, auto_within, auto_feasible, auto_worst);
  return out;
}

}  // namespace
}  // namespace heterps::benchmarks

int main(int argc, char** argv) {
  using namespace heterps;
  using namespace heterps::benchmarks;
  const Flags flags = ParseFlags(argc, argv);
  std::vector<Row> rows;
  int instances = 0;
  auto run = [&](const std::string& name, const cost::CostModel& cm) {
    if (!flags.only.empty() && name.find(flags.only) == std::string::npos) return;
    std::vector<Row> r = RunInstance(name, cm, flags);
    // A scheduler's row, or nullptr where --schedulers left it out.
    auto find = [&](const char* s) -> const Row* {
      for (const Row& row : r) {
        if (row.scheduler == s) return &row;
      }
      return nullptr;
    };
    auto ratio = [&](const char* s) {
      const Row* row = find(s);
      return row == nullptr ? std::string("-") : absl::StrFormat("%.3f", row->ratio);
    };
    const Row* exact = find("exact");
    std::fprintf(
        stderr, "%-32s exact %s  auto %s  rl %s  genetic %s  bo %s\n", name.c_str(),
        exact == nullptr            ? "-"
        : exact->certified_instance ? "certified"
        : exact->feasible && exact->lower_bound > 0
            ? absl::StrFormat("gap %.2f%%", 100 * (exact->cost / exact->lower_bound - 1)).c_str()
            : "-",
        ratio("auto").c_str(), ratio("rl").c_str(), ratio("genetic").c_str(), ratio("bo").c_str());
    rows.insert(rows.end(), r.begin(), r.end());
    ++instances;
  };
  // An input the suite cannot build (a model or catalog file): one line, exit 2.
  auto failed = [](const absl::Status& status) {
    std::fprintf(stderr, "sched_suite: %s (run from the repository root)\n",
                 std::string(status.message()).c_str());
    return 2;
  };
  const bool zoo = flags.suite == "zoo";
  if (zoo) {
    for (const std::string& m : ZooModels()) {
      auto model = ZooModel(m);
      if (!model.ok()) return failed(model.status());
      for (const std::string& kind : ZooCatalogs()) {
        for (int types : {16, 64}) {
          auto cluster = ZooCatalog(kind, types);
          if (!cluster.ok()) return failed(cluster.status());
          for (bool tight : {false, true}) {
            run(absl::StrFormat("%s/%s-%d/%s", m, kind, types, tight ? "tight" : "loose"),
                sched::testing::WithRelativeLimit(*model, *cluster, tight ? 0.9 : 0.25));
          }
        }
      }
    }
  } else {
    for (const char* m : {"dlrm-small", "ctr-dnn", "wide-deep", "dlrm-large", "bst-attention"}) {
      auto model = config::LoadModelSpec(absl::StrCat("examples/models/", m, ".yaml"));
      if (!model.ok()) return failed(model.status());
      for (int types : {4, 8, 16, 32, 64}) {
        for (int regime = 0; regime < 4; ++regime) {
          const bool tight = regime & 1, scarce = regime & 2;
          auto cluster = sched::testing::FleetSubset("examples/clusters/fleet-64.yaml", types,
                                                     scarce ? 0.25 : 1);
          if (!cluster.ok()) return failed(cluster.status());
          run(absl::StrFormat("%s/%d/%s/%s", m, types, tight ? "tight" : "loose",
                              scarce ? "scarce" : "plentiful"),
              sched::testing::WithRelativeLimit(*model, *cluster, tight ? 0.9 : 0.25));
        }
      }
    }
  }
  std::ostringstream csv;
  csv << "instance,scheduler,feasible,cost_usd,ratio_to_best,certified_instance,seconds,plans\n";
  for (const Row& r : rows) {
    csv << absl::StrFormat("%s,%s,%d,%.6f,%.6f,%d,%.6f,%d\n", r.instance, r.scheduler, r.feasible,
                           r.cost, r.ratio, r.certified_instance, r.seconds, r.plans);
  }
  if (auto s = base::WriteFileAtomically(flags.csv, csv.str()); !s.ok()) {
    std::fprintf(stderr, "sched_suite: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  std::string summary = Summary(rows, flags, instances);
  std::printf("%s", summary.c_str());
  std::string section = absl::StrFormat(
      "```\nbuild/benchmarks/sched_suite --budget %d --time-limit %.0f%s\n```\n\n%s\nPer-instance "
      "figures: the CSV it writes (%s).\n",
      flags.budget, flags.time_limit, zoo ? " --suite zoo" : "", summary, flags.csv);
  if (!flags.only.empty() || flags.schedulers != kSchedulers) return 0;
  if (auto s = ReplaceSection(flags.markdown, zoo ? "scheduler-zoo" : "scheduler-suite", section);
      !s.ok()) {
    std::fprintf(stderr, "sched_suite: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return 0;
}
