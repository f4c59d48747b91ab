#include "tools/plan_links.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/numbers.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "heterps/cost/provisioner.h"
#include "tools/job_report.h"
#include "tools/table.h"

namespace heterps::tools {
namespace {

// The index of `region` in `regions`, or -1 (also for an empty name).
int IndexOf(const std::vector<std::string>& regions, const std::string& region) {
  const auto at = std::find(regions.begin(), regions.end(), region);
  return region.empty() || at == regions.end() ? -1 : static_cast<int>(at - regions.begin());
}

// A type of `cluster` in `region` (-1: none): where the plan names no type for its servers,
// their region is all the links ask of them.
int TypeIn(const config::ClusterSpec& cluster, const std::string& region) {
  for (size_t t = 0; t < cluster.types.size(); ++t) {
    if (cluster.types[t].region == region) return static_cast<int>(t);
  }
  return -1;
}

// What the cost model predicts for each link (from, to) of the plan, per batch; an error where
// it cannot price the plan.
absl::StatusOr<std::map<std::pair<std::string, std::string>, double>> Predicted(
    const worker::JobSpec& job, const config::ClusterSpec& cluster,
    const std::optional<cost::Profile>& profile, int ps_type) {
  HETERPS_ASSIGN_OR_RETURN(cost::CostModel model, JobCostModel(job, cluster, profile));
  std::vector<cost::StageSpec> stages;
  for (const sched::RunStage& st : job.plan.stages) {
    const int t = cluster.FindType(st.type);
    if (t < 0) return absl::NotFoundError(absl::StrCat("no type '", st.type, "'"));
    stages.push_back({st.first, st.last, t});
  }
  std::map<std::pair<std::string, std::string>, double> out;
  for (const cost::CostModel::LinkUse& use :
       model.LinkUses(cost::PlanWanLoad(model, stages, ps_type))) {
    out[{use.from, use.to}] = use.bytes;
  }
  return out;
}

}  // namespace

double PlanLinks::egress_usd() const {
  double usd = 0;
  for (const LinkTraffic& l : links) usd += l.egress_usd(steps);
  return usd;
}

double PlanLinks::rows_crossed() const {
  double rows = 0;
  for (const LinkTraffic& l : links) rows += l.rows;
  return rows;
}

PlanLinks MeasurePlanLinks(const worker::JobSpec& job, const launcher::JobResult& result,
                           const config::ClusterSpec& cluster,
                           const std::optional<cost::Profile>& profile) {
  PlanLinks out;
  out.steps = result.steps;
  out.data_region = job.plan.data_region;
  const std::vector<std::string> regions = cluster.Regions();
  if (regions.size() < 2) return out;
  int ps_type = job.plan.servers.type.empty() ? -1 : cluster.FindType(job.plan.servers.type);
  if (ps_type < 0 && !out.data_region.empty()) ps_type = TypeIn(cluster, out.data_region);
  if (ps_type >= 0) out.servers_region = cluster.types[ps_type].region;
  const int ps = IndexOf(regions, out.servers_region);

  const int n = static_cast<int>(regions.size());
  std::vector<LinkTraffic> pairs(n * n);
  const auto at = [&](int a, int b) -> LinkTraffic* {
    return a < 0 || b < 0 || a == b ? nullptr : &pairs[a * n + b];
  };
  const std::vector<sched::RunStage>& stages = job.plan.stages;
  std::vector<int> region_of(stages.size(), -1);
  for (size_t s = 0; s < stages.size(); ++s) {
    const int t = cluster.FindType(stages[s].type);
    if (t >= 0) region_of[s] = IndexOf(regions, cluster.types[t].region);
  }
  for (size_t s = 0; s < stages.size() && s < result.stages.size(); ++s) {
    const launcher::StageReport& r = result.stages[s];
    const int here = region_of[s];
    if (s + 1 < stages.size()) {
      if (LinkTraffic* l = at(here, region_of[s + 1])) l->activations += r.forward_bytes;
    }
    if (s > 0) {
      if (LinkTraffic* l = at(here, region_of[s - 1])) l->gradients += r.back_bytes;
    }
    if (LinkTraffic* l = at(here, ps)) {
      l->rows += r.rows_sent_bytes;
      l->dense += r.dense_sent_bytes;
    }
    if (LinkTraffic* l = at(ps, here)) {
      l->rows += r.rows_received_bytes;
      l->dense += r.dense_received_bytes;
    }
  }
  absl::StatusOr<std::map<std::pair<std::string, std::string>, double>> predicted =
      Predicted(job, cluster, profile, ps_type);
  if (!predicted.ok()) out.predicted_error = std::string(predicted.status().message());
  for (int a = 0; a < n; ++a) {
    for (int b = 0; b < n; ++b) {
      LinkTraffic& l = pairs[a * n + b];
      if (a == b) continue;
      l.from = regions[a];
      l.to = regions[b];
      if (predicted.ok()) {
        const auto it = predicted->find({l.from, l.to});
        l.predicted = it == predicted->end() ? 0 : it->second;
      }
      if (l.bytes() == 0 && l.predicted <= 0) continue;
      if (const config::RegionLink* link = cluster.FindLink(l.from, l.to)) {
        l.egress_per_byte = link->egress_per_byte;
      }
      out.links.push_back(l);
    }
  }
  return out;
}

std::string PlanLinksSummary(const PlanLinks& p) {
  if (p.links.empty()) return "";
  Table table({"from", "to", "activations", "gradients", "rows", "dense", "per step", "predicted",
               "ratio", "egress"},
              {false, false, true, true, true, true, true, true, true, true});
  for (const LinkTraffic& l : p.links) {
    table.AddRow({l.from, l.to, WithCommas(l.activations), WithCommas(l.gradients),
                  WithCommas(l.rows), WithCommas(l.dense), WithCommas(l.bytes()),
                  l.predicted >= 0 ? WithCommas(l.predicted) : "-",
                  l.predicted > 0 ? absl::StrFormat("%.2fx", l.bytes() / l.predicted) : "-",
                  base::HumanUsd(l.egress_usd(p.steps))});
  }
  std::string out =
      "\nbetween regions (bytes per step, measured while training; predicted per batch by the "
      "cost model";
  if (!p.predicted_error.empty()) absl::StrAppend(&out, ": not priced, ", p.predicted_error);
  absl::StrAppend(&out, "):\n", table.Render());
  absl::StrAppendFormat(&out, "egress %s over %s steps, at the cluster's prices\n",
                        base::HumanUsd(p.egress_usd()), WithCommas(static_cast<double>(p.steps)));
  if (p.servers_region.empty()) {
    absl::StrAppend(&out,
                    "the parameter servers' region is not known (the plan names no type for "
                    "them, and no data region): their calls are on no link\n");
  } else if (!p.data_region.empty()) {
    absl::StrAppend(
        &out,
        p.rows_crossed() == 0
            ? absl::StrCat("the data's ids and raw features stayed in region '", p.data_region,
                           "': its reading stage and the parameter servers are there, and no "
                           "call that carries keys crossed a link\n")
            : absl::StrCat("calls that carry keys crossed out of region '", p.data_region,
                           "' (", WithCommas(p.rows_crossed()), " bytes a step)\n"));
  }
  return out;
}

nlohmann::ordered_json PlanLinksJson(const PlanLinks& p) {
  nlohmann::ordered_json links = nlohmann::ordered_json::array();
  for (const LinkTraffic& l : p.links) {
    links.push_back(
        {{"from", l.from},
         {"to", l.to},
         {"bytes_per_step", l.bytes()},
         {"activations_bytes_per_step", l.activations},
         {"gradients_bytes_per_step", l.gradients},
         {"rows_bytes_per_step", l.rows},
         {"dense_bytes_per_step", l.dense},
         {"predicted_bytes_per_batch",
          l.predicted >= 0 ? nlohmann::ordered_json(l.predicted) : nlohmann::ordered_json(nullptr)},
         {"egress_usd", l.egress_usd(p.steps)}});
  }
  return links;
}

void ReportPlanLinks(const worker::JobSpec& job, const launcher::JobResult& result,
                     const config::ClusterSpec& cluster,
                     const std::optional<cost::Profile>& profile, std::string* summary,
                     nlohmann::ordered_json* metrics) {
  const PlanLinks links = MeasurePlanLinks(job, result, cluster, profile);
  *summary += PlanLinksSummary(links);
  (*metrics)["links"] = PlanLinksJson(links);
  (*metrics)["egress_usd"] = links.egress_usd();
  // The region the ids stayed in, where the summary could say so (a data region and the servers'
  // region known); null otherwise.
  (*metrics)["data_region"] = !links.data_region.empty() && !links.servers_region.empty()
                                  ? nlohmann::ordered_json(links.data_region)
                                  : nlohmann::ordered_json(nullptr);
}

}  // namespace heterps::tools
