// `heterps plan --pareto`: the cheapest plan at each of several throughput limits — the
// cost/throughput frontier a buyer reads before choosing a limit.
#include <cmath>
#include <iostream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "heterps/base/file.h"
#include "nlohmann/json.hpp"
#include "tools/plan_command.h"
#include "tools/table.h"

namespace heterps::tools {
namespace {

using json = nlohmann::ordered_json;

std::string StageSummary(const cost::CostModel& model, const sched::PricedPlan& plan) {
  std::string out;
  for (const sched::PricedStage& st : plan.stages) {
    if (!out.empty()) out += " + ";
    out += absl::StrFormat("%dx %s", st.units, model.type(st.spec.type).name);
  }
  return out;
}

}  // namespace

int RunPareto(const PlanFlags& flags) {
  absl::StatusOr<launcher::PlanRequest> request = internal::PlanRequestFrom(flags);
  if (!request.ok()) return Fail(request.status());
  const double hi = request->workload.throughput_limit;
  const double lo = flags.pareto_from > 0 ? flags.pareto_from : hi / 100;
  if (!(lo < hi)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--pareto-from (", HumanNumber(lo),
                                                        ") must be below the throughput limit (",
                                                        HumanNumber(hi), ")")));
  }
  json frontier = json::array();
  std::string csv =
      "throughput_limit,feasible,throughput,cost_usd,cost_per_hour_usd,job_seconds,"
      "certified_optimal,stages\n";
  Table table({"limit", "samples/s", "cost", "$/hour", "job", "plan", "certified"},
              {true, true, true, true, true, false, false});
  bool any = false;
  for (int i = 0; i < flags.pareto_points; ++i) {
    const double limit = lo * std::pow(hi / lo, static_cast<double>(i) / (flags.pareto_points - 1));
    request->workload.throughput_limit = limit;
    absl::StatusOr<launcher::MadePlan> made = launcher::MakePlan(*request);
    if (!made.ok()) return Fail(made.status());
    const cost::CostModel* model = &made->model;
    const sched::PricedPlan* plan = &made->plan;
    any = any || plan->feasible;
    frontier.push_back(json::parse(sched::PlanToJson(*model, *plan)));
    const std::string stages = plan->feasible ? StageSummary(*model, *plan) : "-";
    csv += absl::StrFormat("%.6g,%d,%.6g,%.6f,%.6f,%.3f,%d,\"%s\"\n", limit, plan->feasible,
                           plan->throughput, plan->cost_usd, plan->cost_per_hour_usd,
                           plan->job_seconds, plan->certified_optimal, stages);
    if (plan->feasible) {
      table.AddRow({WithCommas(limit), WithCommas(plan->throughput), base::HumanUsd(plan->cost_usd),
                    absl::StrFormat("%.2f", plan->cost_per_hour_usd),
                    HumanSeconds(plan->job_seconds), stages,
                    plan->certified_optimal ? "yes" : "no"});
    } else {
      table.AddRow(
          {WithCommas(limit), "-", "-", "-", "-", "infeasible: " + plan->why.constraint, "-"});
    }
  }
  const std::string text = json{{"format", "heterps-pareto-v1"},
                                {"model", request->model.name},
                                {"cluster", request->cluster.name},
                                {"scheduler", flags.scheduler},
                                {"frontier", frontier}}
                               .dump(2) +
                           "\n";
  if (!flags.out_path.empty()) {
    if (auto s = base::WriteFileAtomically(flags.out_path, text); !s.ok()) {
      return Fail(s);
    }
  }
  if (!flags.report_path.empty()) {
    // The plan marked on the frontier: the one at the limit asked for, the last.
    request->workload.throughput_limit = hi;
    auto model = launcher::PlanningModel(*request);
    if (!model.ok()) return Fail(model.status());
    if (auto s = internal::WritePlanReport(flags, *model, frontier.back().dump(), frontier);
        !s.ok()) {
      return Fail(s);
    }
  }
  if (!flags.csv_path.empty()) {
    if (auto s = base::WriteFileAtomically(flags.csv_path, csv); !s.ok()) {
      return Fail(s);
    }
  }
  if (flags.json) {
    std::cout << text;
  } else {
    std::cout << absl::StrFormat(
                     "%s on %s: the cheapest plan (%s) at %d limits from %s to %s "
                     "samples/s\n\n",
                     request->model.name, request->cluster.name, flags.scheduler,
                     flags.pareto_points, WithCommas(lo), WithCommas(hi))
              << table.Render();
  }
  std::cout << std::flush;
  if (!any) {
    std::cerr << "heterps: no feasible plan at any limit\n";
    return 1;
  }
  return 0;
}

}  // namespace heterps::tools
