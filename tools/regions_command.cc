// `heterps plan --data-shares`: a job whose data is kept in several regions — a plan per region
// and the parameter syncs between them (launcher::MakeRegionsPlan, docs/cost_model.md, "Training
// across regions").
#include <iostream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "heterps/base/file.h"
#include "heterps/sched/default_schedulers.h"
#include "tools/plan_command.h"
#include "tools/table.h"

namespace heterps::tools {
namespace {

// Bytes in decimal units, three significant digits: "4.78 MB" (999,999 bytes: "1 MB").
std::string HumanBytes(double bytes) {
  for (const auto& [unit, name] :
       {std::pair<double, const char*>{1e12, "TB"}, {1e9, "GB"}, {1e6, "MB"}, {1e3, "kB"}}) {
    if (bytes >= 0.9995 * unit) return absl::StrFormat("%.3g %s", bytes / unit, name);
  }
  return absl::StrFormat("%.0f B", bytes);
}

// "every step", "every 100 steps".
std::string Every(int64_t steps) {
  return steps == 1 ? std::string("every step") : absl::StrFormat("every %d steps", steps);
}

std::string RenderSync(const launcher::RegionsPlan& made) {
  const cost::SyncPrice& sync = made.sync;
  std::string out = absl::StrFormat(
      "\nsync %s%s: %s (of peer to peer and a hub in each region, the least egress that keeps "
      "up)\n",
      Every(made.sync_steps),
      made.eager ? ", and after every step between (eager, at their bound)" : "", sync.name());
  Table table({"from", "to", "syncs of", "per sync", "syncs", "time per sync", "between syncs",
               "load", "egress"},
              {false, false, false, true, true, true, true, true, true});
  for (const cost::SyncFlow& f : sync.flows) {
    table.AddRow({f.from, f.to, f.eager ? "steps between" : Every(made.sync_steps),
                  HumanBytes(f.bytes_per_sync), WithCommas(f.syncs),
                  HumanSeconds(f.seconds_per_sync), HumanSeconds(f.seconds_between_syncs),
                  absl::StrFormat("%.1f%%", 100 * f.load()), base::HumanUsd(f.egress_usd)});
  }
  out += table.Render();
  out += absl::StrFormat("between regions %s over the job, egress %s\n", HumanBytes(sync.bytes),
                         base::HumanUsd(sync.egress_usd));
  return out;
}

}  // namespace

int RunRegionsPlan(const PlanFlags& flags) {
  if (!flags.report_path.empty()) {
    return Fail(absl::InvalidArgumentError(
        "--report: a plan across regions (--data-shares) has no page yet; use --out or --json"));
  }
  absl::StatusOr<std::vector<cost::DataShare>> shares = ParseDataShares(flags.data_shares);
  if (!shares.ok()) return Fail(shares.status());
  ProgressLine progress(!flags.json);
  absl::StatusOr<launcher::PlanRequest> request = internal::SearchRequestFrom(flags, progress);
  if (!request.ok()) return Fail(request.status());
  absl::StatusOr<launcher::RegionsPlan> made =
      launcher::MakeRegionsPlan(*request, *shares, flags.sync_steps, flags.sync_eager);
  progress.Clear();
  if (!made.ok()) {
    // The syncs' pricing names the job's fields; the user gave flags.
    const absl::string_view message = made.status().message();
    for (const auto& [field, flag] :
         {std::pair<absl::string_view, absl::string_view>{"shares: ", "--data-shares: "},
          {"sync_steps: ", "--sync-steps: "}}) {
      if (absl::StartsWith(message, field)) {
        return Fail(absl::InvalidArgumentError(absl::StrCat(flag, message.substr(field.size()))));
      }
    }
    return Fail(made.status());
  }
  std::string text = absl::StrFormat(
      "a job across %d regions, each share of the data kept in its region, syncing parameter "
      "deltas %s\n",
      made->regions.size(), Every(made->sync_steps));
  for (size_t r = 0; r < made->regions.size(); ++r) {
    const cost::DataShare& share = made->shares[r];
    const launcher::MadePlan& plan = made->regions[r];
    text +=
        absl::StrFormat("\nregion %s: %.4g%% of the samples\n", share.region, 100 * share.share);
    text += internal::RenderPlan(plan.model, plan.plan);
    if (plan.plan.feasible && made->throughput[r] < plan.plan.throughput * (1 - 1e-9)) {
      text += absl::StrFormat(
          "the regions step together, at the pace of the slowest with its syncs: this one at %s "
          "samples/s, job %s, cost %s\n",
                              WithCommas(made->throughput[r]), HumanSeconds(made->job_seconds[r]),
                              base::HumanUsd(made->cost_usd[r]));
    }
  }
  text += RenderSync(*made);
  if (made->feasible()) {
    text += absl::StrFormat("\njob %s (the slowest region), cost %s: the regions %s, egress %s\n",
                            HumanSeconds(made->total_job_seconds()),
                            base::HumanUsd(made->total_cost_usd()),
                            base::HumanUsd(made->total_cost_usd() - made->sync.egress_usd),
                            base::HumanUsd(made->sync.egress_usd));
  }
  const std::string dumped = launcher::RegionsPlanToJson(*made);
  if (!flags.out_path.empty()) {
    absl::Status written = base::WriteFileAtomically(flags.out_path, dumped);
    if (!written.ok()) return Fail(written);
  }
  std::cout << (flags.json ? dumped : text) << std::flush;
  for (size_t r = 0; r < made->regions.size(); ++r) {
    const sched::PricedPlan& plan = made->regions[r].plan;
    if (!plan.feasible && plan.cut_short) {
      std::cerr << absl::StrFormat(
          "heterps: no feasible plan found in region %s before its share of the time limit (%s "
          "plans evaluated in %s); the search was cut short, so one may exist: raise "
          "--time-limit\n",
          made->shares[r].region, WithCommas(plan.plans_evaluated),
          HumanSeconds(plan.search_seconds));
      return 1;
    }
    if (!plan.feasible) {
      std::cerr << absl::StrFormat("heterps: no feasible plan in region %s (%s constraint): %s\n",
                                   made->shares[r].region, plan.why.constraint, plan.why.message);
      return 1;
    }
  }
  if (!made->sync.keeps_up()) {
    const cost::SyncFlow& f = made->sync.flows[made->sync.busiest()];
    std::cerr << absl::StrFormat(
        "heterps: no feasible plan (sync constraint): the link %s -> %s takes %s per sync "
        "against %s between %s's syncs (%.0f%%); %s\n",
        f.from, f.to, HumanSeconds(f.seconds_per_sync), HumanSeconds(f.seconds_between_syncs),
        f.cadence, 100 * f.load(),
        made->eager ? "with --sync-eager every sync has one step to cross: drop it, or lower "
                      "--throughput"
                    : "raise --sync-steps");
    return 1;
  }
  return 0;
}

}  // namespace heterps::tools
