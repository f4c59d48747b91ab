#include "tools/plan_command.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string_view>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "embedded/heterps_examples.h"
#include "heterps/base/file.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/line_source.h"
#include "heterps/launcher/planning.h"
#include "heterps/sched/default_schedulers.h"
#include "heterps/sched/schedulers.h"
#include "tools/cli_common.h"
#include "tools/html_report.h"
#include "tools/table.h"

namespace heterps::tools {
namespace {

// The embedded main job: the small DLRM at a million samples/s on the cloud catalog.
constexpr double kDefaultThroughput = 1e6;

absl::string_view Text(std::string_view text) { return {text.data(), text.size()}; }

}  // namespace

namespace internal {

absl::StatusOr<launcher::PlanRequest> PlanRequestFrom(const PlanFlags& flags) {
  launcher::PlanRequest request;
  HETERPS_ASSIGN_OR_RETURN(config::ModelSpec model, LoadModelOrDefault(flags.model_path));
  if (!flags.data_paths.empty()) {
    HETERPS_ASSIGN_OR_RETURN(std::vector<std::string> files,
                             data::ExpandDataPaths(flags.data_paths));
    HETERPS_ASSIGN_OR_RETURN(std::vector<std::string> notes, UseIdsOfData(files, &model));
    for (const std::string& note : notes) std::fprintf(stderr, "heterps: note: %s\n", note.c_str());
  }
  config::ClusterSpec cluster;
  if (flags.cluster_path.empty()) {
    HETERPS_ASSIGN_OR_RETURN(
        cluster, config::ParseClusterSpec(Text(embedded::cloud()), "<embedded>/cloud.yaml"));
  } else {
    HETERPS_ASSIGN_OR_RETURN(cluster, config::LoadClusterSpec(flags.cluster_path));
  }
  double throughput = flags.throughput;
  if (std::isnan(throughput)) {
    if (!flags.model_path.empty()) {
      return absl::InvalidArgumentError("--throughput is required with --model");
    }
    throughput = kDefaultThroughput;
  }
  if (!flags.profile_path.empty()) {
    HETERPS_ASSIGN_OR_RETURN(request.profile, cost::LoadProfile(flags.profile_path));
  }
  request.model = std::move(model);
  request.cluster = std::move(cluster);
  request.workload = {throughput, flags.samples};
  request.workload.price_parameter_servers = !flags.stages_only;
  request.workload.access_skew = flags.access_skew;
  request.rules.gpu_tier = flags.gpu_tier;
  request.rules.tier_holds_dense = flags.gpu_tier;  // the default job: synchronous, one block
  request.rules.data_region = flags.data_region;
  request.rules.activations_may_cross = flags.activations_may_cross;
  request.rules.data_source =
      flags.data_paths.empty() ? std::string() : absl::StrJoin(flags.data_paths, ", ");
  request.scheduler = flags.scheduler;
  request.options = OptionsFrom(flags, {});
  return request;
}

absl::Status WritePlanReport(const PlanFlags& flags, const cost::CostModel& model,
                             const std::string& plan, const nlohmann::ordered_json& frontier) {
  using json = nlohmann::ordered_json;
  json baselines = json::array();
  sched::SchedulerRegistry registry = sched::DefaultSchedulers();
  for (const char* name : {"homogeneous", "greedy"}) {
    if (flags.scheduler == name) continue;
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<sched::Scheduler> scheduler, registry.Create(name));
    HETERPS_ASSIGN_OR_RETURN(sched::PricedPlan baseline,
                             scheduler->Schedule(model, OptionsFrom(flags, {})));
    baselines.push_back(json::parse(sched::PlanToJson(model, baseline)));
  }
  const json data = {{"plan", json::parse(plan)}, {"baselines", baselines}, {"frontier", frontier}};
  return base::WriteFileAtomically(flags.report_path, PlanReportHtml(data));
}

absl::Status CheckSchedulerFlags(const PlanFlags& flags) {
  HETERPS_RETURN_IF_ERROR(sched::DefaultSchedulers().Create(flags.scheduler).status());
  // Options a scheduler would silently ignore are errors.
  if ((!flags.policy_in.empty() || !flags.policy_out.empty()) && flags.scheduler != "rl") {
    return absl::InvalidArgumentError(absl::StrCat("--policy-in and --policy-out are rl's; the ",
                                                   flags.scheduler, " scheduler has no policy"));
  }
  if (flags.max_plans > 0 && (flags.scheduler == "exact" || flags.scheduler == "greedy" ||
                              flags.scheduler == "homogeneous" || flags.scheduler == "manual")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-plans: the ", flags.scheduler,
                     " scheduler has no budget of plans (--time-limit bounds exact)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<launcher::PlanRequest> SearchRequestFrom(const PlanFlags& flags,
                                                        ProgressLine& progress) {
  HETERPS_ASSIGN_OR_RETURN(launcher::PlanRequest request, PlanRequestFrom(flags));
  HETERPS_RETURN_IF_ERROR(CheckSchedulerFlags(flags));
  request.options = OptionsFrom(flags, [&progress](int64_t n, double best) {
    progress.Show(absl::StrFormat("searching: %s plans evaluated, best %s", WithCommas(n),
                                  std::isfinite(best) ? base::HumanUsd(best) : "none yet"));
  });
  return request;
}

sched::SchedulerOptions OptionsFrom(const PlanFlags& flags,
                                    std::function<void(int64_t, double)> progress) {
  sched::SchedulerOptions options;
  options.seed = flags.seed;
  options.time_limit_seconds = flags.time_limit;
  options.max_plans = flags.max_plans;
  options.policy_in = flags.policy_in;
  options.policy_out = flags.policy_out;
  options.progress = std::move(progress);
  return options;
}

std::string RenderPlan(const cost::CostModel& model, const sched::PricedPlan& plan) {
  std::string out = absl::StrFormat(
      "%s on %s: %s samples/s needed, %s samples; scheduler %s (%s, %s, %s plans evaluated)\n\n",
      model.model().name, model.cluster().name, WithCommas(model.workload().throughput_limit),
      WithCommas(model.workload().samples), plan.scheduler,
      plan.certified_optimal ? std::string("certified optimal")
      : plan.optimality_gap() >= 0
          ? absl::StrFormat("not certified, at most %.2f%% above the optimum",
                            100 * plan.optimality_gap())
          : std::string("not certified"),
      HumanSeconds(plan.search_seconds), WithCommas(plan.plans_evaluated));
  if (const cost::Workload& job = model.workload(); !job.data_region.empty()) {
    out = absl::StrCat(out.substr(0, out.size() - 1), "data kept in region ", job.data_region,
                       job.data_source.empty() ? "" : absl::StrCat(" (", job.data_source, ")"),
                       model.away_from() < model.num_layers()
                           ? absl::StrCat(": the stages before layer ", model.away_from_name(),
                                          " and the servers run on its types; activations may "
                                          "cross from there on\n\n")
                           : std::string(": the job runs on its types only\n\n"));
  }
  Table table({"stage", "layers", "type", "units", "time/batch", "samples/s", "$/hour"},
              {true, false, false, true, true, true, true});
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const sched::PricedStage& st = plan.stages[s];
    const auto& layers = model.model().layers;
    std::string names = st.spec.first == st.spec.last
                            ? layers[st.spec.first].name
                            : layers[st.spec.first].name + ".." + layers[st.spec.last].name;
    const auto& type = model.type(st.spec.type);
    bool provisioned = st.units > 0;
    table.AddRow({std::to_string(s), names, type.name, provisioned ? std::to_string(st.units) : "-",
                  provisioned ? HumanSeconds(st.seconds_per_batch) : "-",
                  provisioned ? WithCommas(model.batch() / st.seconds_per_batch) : "-",
                  provisioned ? absl::StrFormat("%.2f", st.units * type.price_per_hour) : "-"});
  }
  if (plan.ps.type >= 0) {
    // The parameter servers: one more row, priced like the stages.
    const cost::PsServers& ps = plan.ps;
    constexpr double kGib = 1024.0 * 1024.0 * 1024.0;
    std::string what = absl::StrFormat("servers: %.1f GiB tables", model.table_bytes() / kGib);
    if (ps.ssd_bytes > 0) {
      absl::StrAppend(&what, absl::StrFormat(", %.1f GiB/shard on SSD, %.1f%% from memory",
                                             ps.ssd_bytes / kGib, 100 * ps.hit_rate));
    }
    table.AddRow({"ps", what, model.type(ps.type).name, std::to_string(ps.shards),
                  HumanSeconds(ps.seconds_per_batch),
                  WithCommas(model.batch() / ps.seconds_per_batch),
                  absl::StrFormat("%.2f", ps.usd_per_hour)});
  }
  out += table.Render();
  if (plan.feasible) {
    out += absl::StrFormat("\npipeline %s samples/s, job %s, cost %s (%s/hour)\n",
                           WithCommas(plan.throughput), HumanSeconds(plan.job_seconds),
                           base::HumanUsd(plan.cost_usd), base::HumanUsd(plan.cost_per_hour_usd));
    // Across regions: each link's load and time per batch, and the egress (in the cost above).
    if (!plan.wan.empty()) {
      for (const cost::CostModel::LinkUse& use : model.LinkUses(plan.wan)) {
        out += absl::StrFormat("across %s -> %s: %.3g MB and %g messages per batch, %s\n", use.from,
                               use.to, use.bytes / 1e6, use.messages, HumanSeconds(use.seconds));
      }
      out += absl::StrFormat("egress between regions %s (in the cost)\n",
                             base::HumanUsd(plan.egress_usd));
    }
  }
  return out;
}

}  // namespace internal

CLI::App* AddPlanCommand(CLI::App& app, PlanFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Assign every layer to a resource type and size each stage, at the lowest cost "
      "that meets the throughput limit");
  cmd->add_option("--model", flags.model_path, "model spec (YAML); default: embedded dlrm-small");
  cmd->add_option("--cluster", flags.cluster_path,
                  "cluster spec (YAML); default: embedded cloud catalog");
  cmd->add_option("--throughput", flags.throughput,
                  "samples/s the plan must reach (default 1000000 with the embedded model)")
      ->check(Positive());
  cmd->add_option("--samples", flags.samples,
                  "samples the job processes (default: one epoch of "
                  "Criteo 1TB, 4373472329)")
      ->check(Positive());
  cmd->add_option("--scheduler", flags.scheduler,
                  "scheduler name (default auto: rl, then exact from its plan)");
  cmd->add_option("--seed", flags.seed, "random seed for randomized schedulers")
      ->check(NonNegative());
  cmd->add_option("--time-limit", flags.time_limit, "search time limit, seconds (default 60)")
      ->check(Positive());
  cmd->add_option("--max-plans", flags.max_plans, "budget of evaluated plans (0: default)")
      ->check(NonNegative());
  cmd->add_option("--profile", flags.profile_path, "measured per-layer times (profile.json)");
  cmd->add_option("--report", flags.report_path,
                  "also write the plan as a page with charts: its cost beside the baselines', and "
                  "with --pareto the frontier");
  cmd->add_option(
      "--data", flags.data_paths,
      "data files or globs of the model's layout: plan multi-hot slots with the ids per "
      "sample measured on its first lines");
  cmd->add_option("--policy-in", flags.policy_in,
                  "rl: start from this trained policy (same cluster types)");
  cmd->add_option("--policy-out", flags.policy_out, "rl: write the trained policy here");
  cmd->add_option("--out", flags.out_path, "write the plan JSON here");
  cmd->add_flag("--json", flags.json, "print the plan JSON instead of the table");
  cmd->add_flag("--pareto", flags.pareto,
                "the cost/throughput frontier: the cheapest plan at each of several limits up to "
                "--throughput");
  cmd->add_option("--pareto-from", flags.pareto_from,
                  "--pareto: the lowest limit, samples/s (default: --throughput / 100)")
      ->check(NonNegative());
  cmd->add_option("--pareto-points", flags.pareto_points, "--pareto: number of limits (default 10)")
      ->check(CLI::Range(2, 1000));
  cmd->add_option("--csv", flags.csv_path, "--pareto: also write the frontier as CSV here");
  cmd->add_flag("--stages-only", flags.stages_only,
                "price the stages only: the parameter servers are not part of the plan (where "
                "they run on the stages' own machines)");
  cmd->add_flag("--gpu-tier", flags.gpu_tier,
                "plan for a job with a GPU tier (heterps train --gpu-cache-gib): its first stage "
                "on one replica");
  cmd->add_option("--access-skew", flags.access_skew,
                  "Zipf exponent of the embedding rows' popularity, for the share of lookups the "
                  "servers' memory serves when the tables spill to SSD (default 1; 0: uniform)")
      ->check(CLI::Range(0.0, 10.0));
  cmd->add_option("--data-region", flags.data_region,
                  "the region the training data is kept in (a `region` of the cluster spec): "
                  "every stage and the parameter servers run on that region's types, as "
                  "nothing derived from the data may leave it");
  cmd->add_flag("--activations-may-cross", flags.activations_may_cross,
                "with --data-region: let pooled activations (and the labels) leave the data's "
                "region, so that the stages past the embeddings and the first learned layer of "
                "the dense features may run on other regions' types")
      ->needs("--data-region");
  CLI::Option* shares =
      cmd->add_option(
             "--data-shares", flags.data_shares,
             "a job whose data is kept in several regions: REGION=SHARE for each (shares of "
             "the samples, adding up to 1, comma-separated); each region gets a plan of its "
             "own and the regions exchange parameter deltas every --sync-steps steps")
          ->delimiter(',')
          ->excludes("--data-region")
          ->excludes("--pareto");
  cmd->add_option("--sync-steps", flags.sync_steps,
                  "with --data-shares: the steps a region takes between two syncs (default 100)")
      ->check(Positive())
      ->needs(shares);
  cmd->add_flag("--sync-eager", flags.sync_eager,
                "with --data-shares: the regions also sync after every step between (heterps "
                "train --sync-eager-threshold), each such sync priced at its bound, all that its "
                "step changed")
      ->needs(shares);
  return cmd;
}

int RunPlan(const PlanFlags& flags) {
  if (flags.pareto) return RunPareto(flags);
  if (!flags.data_shares.empty()) return RunRegionsPlan(flags);
  ProgressLine progress(!flags.json);
  absl::StatusOr<launcher::PlanRequest> request = internal::SearchRequestFrom(flags, progress);
  if (!request.ok()) return Fail(request.status());
  absl::StatusOr<launcher::MadePlan> made = launcher::MakePlan(*request);
  if (!made.ok()) {
    progress.Clear();
    return Fail(made.status());
  }
  const cost::CostModel* model = &made->model;
  absl::StatusOr<sched::PricedPlan> plan = std::move(made->plan);
  if (plan.ok() && plan->feasible && plan->lower_bound_usd <= 0) {
    // Every plan says how far it may be from the best: the exact method's bound, within what is
    // left of the time limit (at least a second).
    progress.Show("bounding the optimum");
    const double left =
        flags.time_limit > 0 ? std::max(1.0, flags.time_limit - plan->search_seconds) : 10.0;
    *plan = sched::BoundPlan(*model, *std::move(plan), left);
  }
  progress.Clear();
  if (!plan.ok()) return Fail(plan.status());
  std::string json = sched::PlanToJson(*model, *plan);
  if (!flags.out_path.empty()) {
    absl::Status written = base::WriteFileAtomically(flags.out_path, json);
    if (!written.ok()) return Fail(written);
  }
  if (!flags.report_path.empty()) {
    absl::Status written =
        internal::WritePlanReport(flags, *model, json, nlohmann::ordered_json::array());
    if (!written.ok()) return Fail(written);
  }
  std::cout << (flags.json ? json : internal::RenderPlan(*model, *plan)) << std::flush;
  if (!plan->feasible && plan->cut_short) {
    std::cerr << absl::StrFormat(
        "heterps: no feasible plan found before the time limit (%s plans evaluated in %s); "
        "the search was cut short, so one may exist: raise --time-limit\n",
        WithCommas(plan->plans_evaluated), HumanSeconds(plan->search_seconds));
    return 1;
  }
  if (!plan->feasible) {
    // A shortfall of 0.36% is not "0% over", nor one of 35,000x a 7-digit percentage.
    const double s = plan->why.shortfall;
    const std::string over = s < 0.001 ? std::string("less than 0.1% over")
                             : s < 1
                                 ? absl::StrFormat("%.1f%% over", 100 * s)
                                 : absl::StrCat("needs ", HumanNumber(1 + s), "x what is there");
    std::cerr << absl::StrFormat("heterps: no feasible plan (%s constraint, %s): %s\n",
                                 plan->why.constraint, over, plan->why.message);
    return 1;
  }
  return 0;
}

}  // namespace heterps::tools
