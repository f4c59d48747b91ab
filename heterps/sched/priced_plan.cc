#include "heterps/sched/priced_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace heterps::sched {

std::vector<cost::StageSpec> StagesOf(const std::vector<int>& assignment) {
  std::vector<cost::StageSpec> stages;
  for (int l = 0; l < static_cast<int>(assignment.size()); ++l) {
    if (stages.empty() || stages.back().type != assignment[l]) {
      stages.push_back({l, l, assignment[l]});
    } else {
      stages.back().last = l;
    }
  }
  return stages;
}

PricedPlan PricePlan(const cost::CostModel& model, const std::vector<int>& assignment) {
  PricedPlan plan;
  plan.assignment = assignment;
  std::vector<cost::StageSpec> specs = StagesOf(assignment);
  cost::Provisioning p = cost::Provision(model, specs);
  plan.feasible = p.feasible;
  plan.why = p.why;
  for (size_t s = 0; s < specs.size(); ++s) {
    PricedStage stage;
    stage.spec = specs[s];
    cost::StageTime time = model.Stage(specs[s].first, specs[s].last, specs[s].type);
    stage.compute_seconds = time.compute;
    stage.comm_seconds = time.comm;
    if (p.feasible) {
      stage.units = p.units[s];
      stage.seconds_per_batch = p.seconds[s];
    }
    plan.stages.push_back(stage);
  }
  plan.throughput = p.throughput;
  plan.cost_usd = p.cost_usd;
  plan.cost_per_hour_usd = p.usd_per_hour;
  plan.job_seconds = p.job_seconds;
  plan.ps = p.ps;
  plan.wan = p.wan;
  plan.link_seconds = p.link_seconds;
  plan.egress_usd = p.egress_usd;
  plan.plans_evaluated = 1;
  return plan;
}

bool Better(const PricedPlan& a, const PricedPlan& b) {
  if (a.feasible != b.feasible) return a.feasible;
  if (!a.feasible) return a.why.shortfall < b.why.shortfall;
  if (a.cost_usd != b.cost_usd) return a.cost_usd < b.cost_usd;
  return a.throughput > b.throughput;
}

double PricedPlan::optimality_gap() const {
  if (!feasible || cost_usd <= 0 || lower_bound_usd <= 0) return -1;
  return std::clamp((cost_usd - lower_bound_usd) / cost_usd, 0.0, 1.0);
}

std::string PlanLine(const cost::CostModel& model, const PricedPlan& plan) {
  std::string line = absl::StrFormat("$%.4f%s", plan.cost_usd, plan.feasible ? "" : " infeasible");
  for (const PricedStage& st : plan.stages) {
    absl::StrAppend(&line, " [", model.model().layers[st.spec.first].name, "..",
                    model.model().layers[st.spec.last].name, " ", st.units, "x ",
                    model.type(st.spec.type).name, "]");
  }
  if (plan.ps.type >= 0) {
    absl::StrAppend(&line, " servers ", plan.ps.shards, "x ", model.type(plan.ps.type).name);
  }
  return line;
}

std::string PlanToJson(const cost::CostModel& model, const PricedPlan& plan) {
  using json = nlohmann::ordered_json;
  json stages = json::array();
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const PricedStage& st = plan.stages[s];
    json layers = json::array();
    for (int l = st.spec.first; l <= st.spec.last; ++l)
      layers.push_back(model.model().layers[l].name);
    const auto& type = model.type(st.spec.type);
    json stage = {{"index", s},
                  {"layers", layers},
                  {"type", type.name},
                  {"region", type.region.empty() ? json(nullptr) : json(type.region)},
                  {"units", st.units},
                  {"seconds_per_batch", st.seconds_per_batch},
                  {"compute_seconds", st.compute_seconds},
                  {"comm_seconds", st.comm_seconds},
                  {"usd_per_hour", static_cast<double>(st.units) * type.price_per_hour}};
    stage["throughput"] = st.seconds_per_batch > 0 ? model.batch() / st.seconds_per_batch : 0.0;
    stages.push_back(stage);
  }
  json root = {
      {"format", "heterps-plan-v1"},
      {"model", model.model().name},
      {"cluster", model.cluster().name},
      {"batch_size", model.model().batch_size},
      {"samples", model.workload().samples},
      {"throughput_limit", model.workload().throughput_limit},
      {"data_region",
       model.workload().data_region.empty() ? json(nullptr) : json(model.workload().data_region)},
      {"activations_may_cross", model.workload().activations_may_cross},
      {"scheduler", plan.scheduler},
      {"feasible", plan.feasible},
      {"certified_optimal", plan.certified_optimal},
      {"cut_short", plan.cut_short},
      {"throughput", plan.throughput},
      {"cost_usd", plan.cost_usd},
      {"cost_per_hour_usd", plan.cost_per_hour_usd},
      {"job_seconds", plan.job_seconds},
      {"search_seconds", plan.search_seconds},
      {"plans_evaluated", plan.plans_evaluated},
      {"lower_bound_usd", plan.lower_bound_usd},
      {"optimality_gap", plan.optimality_gap() < 0 ? json(nullptr) : json(plan.optimality_gap())},
      {"stages", stages}};
  json ps = nullptr;
  if (plan.ps.type >= 0) {
    constexpr double kGib = 1024.0 * 1024.0 * 1024.0;
    const cost::PsServers& p = plan.ps;
    const std::string& region = model.type(p.type).region;
    ps = {{"type", model.type(p.type).name},
          {"region", region.empty() ? json(nullptr) : json(region)},
          {"shards", p.shards},
          {"memory_gib_per_shard", p.memory_bytes / kGib},
          {"ssd_gib_per_shard", p.ssd_bytes / kGib},
          {"table_gib", model.table_bytes() / kGib},
          {"hit_rate", p.hit_rate},
          {"seconds_per_batch", p.seconds_per_batch},
          {"throughput", p.seconds_per_batch > 0 ? model.batch() / p.seconds_per_batch : 0.0},
          {"usd_per_hour", p.usd_per_hour}};
  }
  root["parameter_servers"] = ps;
  // Across regions: each link the plan uses, and the job's egress.
  json links = json::array();
  if (plan.feasible) {
    const double batches = model.workload().samples / model.batch();
    for (const cost::CostModel::LinkUse& use : model.LinkUses(plan.wan)) {
      links.push_back({{"from", use.from},
                       {"to", use.to},
                       {"bytes_per_batch", use.bytes},
                       {"messages_per_batch", use.messages},
                       {"seconds_per_batch", use.seconds},
                       {"egress_usd", use.usd * batches}});
    }
  }
  root["links"] = links;
  root["egress_usd"] = plan.egress_usd;
  if (!plan.feasible) {
    root["infeasible"] = {{"constraint", plan.why.constraint},
                          {"shortfall", plan.why.shortfall},
                          {"reason", plan.why.message}};
  }
  return root.dump(2) + "\n";
}

}  // namespace heterps::sched
