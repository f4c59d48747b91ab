#include "heterps/launcher/replanner.h"

#include <algorithm>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "heterps/base/log.h"
#include "heterps/base/numbers.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "heterps/launcher/cluster_state.h"
#include "heterps/launcher/local_gpus.h"

namespace heterps::launcher {
namespace {

// A watched file: its text when last read, so that a change is seen whatever the clock's
// granularity (the files are small).
struct Watched {
  std::string path;
  std::optional<std::string> text;  // nullopt: absent
  std::string refused;              // why the file is refused now (said once), else empty
};

bool SameLayout(const worker::JobSpec& a, const worker::JobSpec& b) {
  if (a.stages() != b.stages() || a.settings.ps_shards != b.settings.ps_shards) return false;
  for (int s = 0; s < a.stages(); ++s) {
    const sched::RunStage &x = a.plan.stages[s], &y = b.plan.stages[s];
    if (x.first != y.first || x.last != y.last || x.type != y.type || x.units != y.units) {
      return false;
    }
  }
  return true;
}

// What differs between two catalogs, type by type: "v100-spot: 4 -> 0 units".
std::vector<std::string> Differences(const config::ClusterSpec& before,
                                     const config::ClusterSpec& after) {
  std::vector<std::string> out;
  for (const config::ResourceType& t : after.types) {
    const int i = before.FindType(t.name);
    if (i < 0) {
      out.push_back(absl::StrCat(t.name, ": new, ", t.units, " units"));
      continue;
    }
    const config::ResourceType& old = before.types[i];
    if (old.units != t.units) {
      out.push_back(absl::StrCat(t.name, ": ", old.units, " -> ", t.units, " units"));
    }
    if (old.price_per_hour != t.price_per_hour) {
      out.push_back(absl::StrCat(t.name, ": ", base::HumanUsd(old.price_per_hour), " -> ",
                                 base::HumanUsd(t.price_per_hour), " per hour"));
    }
  }
  for (const config::ResourceType& t : before.types) {
    if (after.FindType(t.name) < 0) out.push_back(absl::StrCat(t.name, ": gone"));
  }
  return out;
}

class ElasticReplanner final : public Replanner {
 public:
  explicit ElasticReplanner(ElasticOptions o) : o_(std::move(o)), base_(o_.cluster) {
    limit_ = o_.throughput_limit;
    spec_file_.path = o_.cluster_watch;
    state_file_.path = o_.cluster_state;
    control_file_.path = o_.control;
    // What is there when the job starts is what it was planned with (the first Check compares
    // against it): a state file already present applies from the start.
    Changed(spec_file_);
    Changed(control_file_);
    if (Changed(state_file_) && state_file_.text) {
      absl::StatusOr<ClusterState> state =
          ParseClusterState(*state_file_.text, o_.cluster_state, base_);
      if (state.ok()) {
        state_ = *state;
      } else {
        Log(absl::StrCat("refused: ", state.status().message()));
      }
    }
  }

  void Running(const worker::JobSpec& job) override {
    if (!first_) first_ = job;
    current_ = job;
    // A plan from a file may carry no prediction: the cost model's, on the catalog of now.
    if (current_->plan.throughput <= 0) current_->plan.throughput = Predict(job.plan, Catalog());
  }

  std::optional<PlanSwitch> Check(const JobPosition& position) override {
    // The running plan's measured/predicted ratio; before a new plan's first steps are measured,
    // the last plan's stands.
    if (current_ && current_->plan.throughput > 0 && position.samples_per_second > 0) {
      calibration_ =
          std::clamp(position.samples_per_second / current_->plan.throughput, 0.05, 20.0);
    }
    const absl::Time now = absl::Now();
    if (reasons_.empty() && now - last_poll_ < o_.poll) return std::nullopt;
    last_poll_ = now;
    Poll();
    if (reasons_.empty() || !current_) return std::nullopt;
    const std::string why = absl::StrJoin(reasons_, "; ");
    reasons_.clear();
    return Decide(position, why);
  }

  void RoleLost(const std::string& type) override {
    last_poll_ = absl::InfinitePast();  // what else changed is read at once
    if (++deaths_[type] < o_.max_losses) return;
    deaths_[type] = 0;
    ++given_up_[type];
    reasons_.push_back(
        absl::StrCat(type, ": one unit given up after ", o_.max_losses, " deaths of its roles"));
  }

  double CostPerHour() const override {
    if (!current_) return 0;
    return PlanCostPerHour(current_->plan, Catalog()).value_or(current_->plan.cost_per_hour_usd);
  }

  std::optional<double> FirstPlanCostPerHour() const override {
    if (!first_) return std::nullopt;
    return PlanCostPerHour(first_->plan, Catalog());
  }

 private:
  // Reads `w` again; true when it changed (appeared, vanished or was rewritten). A file larger
  // than kMaxClusterStateBytes is refused with one line, said once for as long as it stays so;
  // one that cannot be read just now (a writer without an atomic rename, say) is looked at again
  // next time.
  bool Changed(Watched& w) {
    if (w.path.empty()) return false;
    std::optional<std::string> now;
    if (o_.env->FileExists(w.path)) {
      absl::StatusOr<std::string> text = base::ReadFile(o_.env, w.path, kMaxClusterStateBytes);
      if (!text.ok()) {
        if (absl::IsResourceExhausted(text.status()) && w.refused != text.status().message()) {
          w.refused = std::string(text.status().message());
          Log(absl::StrCat("refused: ", w.refused, "; the job carries on as it was"));
        }
        return false;
      }
      now = std::move(*text);
    }
    w.refused.clear();
    if (now == w.text) return false;
    w.text = std::move(now);
    return true;
  }

  void Log(const std::string& line) const {
    if (o_.log) {
      o_.log(line);
    } else {
      base::LogLine(line);
    }
  }

  // The catalog of now: the cluster spec (the watched one, when it changed), the state's units
  // and prices, less the units given up.
  config::ClusterSpec Catalog() const {
    config::ClusterSpec c = ApplyClusterState(base_, state_);
    for (const auto& [type, n] : given_up_) {
      if (const int i = c.FindType(type); i >= 0) {
        c.types[i].units = std::max<int64_t>(0, c.types[i].units - n);
      }
    }
    return c;
  }

  // Reads what changed; every accepted change adds a reason, every refused one a log line.
  void Poll() {
    const config::ClusterSpec before = Catalog();
    bool spec_changed = false;
    if (Changed(spec_file_)) {
      if (!spec_file_.text) {
        Log(absl::StrCat("refused: ", o_.cluster_watch,
                         " is gone; the job keeps the catalog it has"));
      } else {
        absl::StatusOr<config::ClusterSpec> spec =
            config::ParseClusterSpec(*spec_file_.text, o_.cluster_watch);
        if (spec.ok() && o_.gpu_emulate > 0) AddLocalGpus(&*spec, o_.gpu_emulate);
        if (spec.ok()) {
          base_ = *spec;
          spec_changed = true;
        } else {
          Log(absl::StrCat("refused: ", spec.status().message(),
                           "; the job keeps the catalog it has"));
        }
      }
    }
    if (Changed(state_file_) || spec_changed) {
      if (!state_file_.text) {
        state_ = {};
      } else {
        absl::StatusOr<ClusterState> state =
            ParseClusterState(*state_file_.text, o_.cluster_state, base_);
        if (state.ok()) {
          state_ = *state;
        } else {
          Log(absl::StrCat("refused: ", state.status().message(),
                           "; the job keeps the catalog it has"));
        }
      }
    }
    for (std::string& d : Differences(before, Catalog())) reasons_.push_back(std::move(d));
    if (Changed(control_file_) && control_file_.text) {
      absl::StatusOr<JobControl> control = ParseJobControl(*control_file_.text, o_.control);
      if (!control.ok()) {
        Log(absl::StrCat("refused: ", control.status().message(), "; the job carries on"));
      } else {
        control_ = *control;
        if (control_.throughput > 0) {
          limit_ = control_.throughput;
          deadline_.reset();
          reasons_.push_back(
              absl::StrCat("throughput limit ", base::HumanNumber(limit_), " samples/s"));
        } else if (control_.deadline) {
          deadline_ = control_.deadline;
          reasons_.push_back(absl::StrCat("deadline ", absl::FormatTime(*deadline_)));
        }
        if (!control_.plan_json.empty()) {
          plan_requested_ = true;
          reasons_.push_back(absl::StrCat("plan requested: ", control_.plan_source));
        }
      }
    }
  }

  // The cost model's samples/s for `plan` on `catalog` (0 when it cannot say): the bottleneck
  // stage's seconds per batch with its units.
  double Predict(const sched::RunPlan& plan, const config::ClusterSpec& catalog) const {
    absl::StatusOr<cost::CostModel> model = cost::CostModel::Create(
        o_.model, catalog,
        WithRules(o_.model, o_.rules, cost::ColocatedWorkload(std::max(limit_, 1.0), 1e6)),
        o_.profile ? &*o_.profile : nullptr);
    if (!model.ok()) return 0;
    double bottleneck = 0;
    for (const sched::RunStage& s : plan.stages) {
      const int t = catalog.FindType(s.type);
      if (t < 0 || s.units < 1) return 0;
      bottleneck =
          std::max(bottleneck, cost::CostModel::ExecSeconds(model->StageSeconds(s.first, s.last, t),
                                                            catalog.types[t].dp_loss, s.units));
    }
    return bottleneck > 0 && bottleneck < cost::kInfinity ? model->batch() / bottleneck : 0;
  }

  // The throughput the plan must reach now.
  double Limit(const JobPosition& p) {
    if (!deadline_) {
      if (limit_ > 0) return limit_;
      // No limit was ever given: the speed the job has.
      return std::max(1.0, p.samples_per_second > 0 ? p.samples_per_second
                                                    : current_->plan.throughput * calibration_);
    }
    const double left = absl::ToDoubleSeconds(*deadline_ - absl::Now()) - p.switch_seconds;
    if (left <= 0) {
      Log(absl::StrCat("the deadline ", absl::FormatTime(*deadline_),
                       " cannot be met any more; the job keeps its throughput limit"));
      deadline_.reset();
      return limit_;
    }
    limit_ = static_cast<double>(p.samples_left) / left;
    return limit_;
  }

  absl::StatusOr<sched::RunPlan> Replan(const config::ClusterSpec& catalog, double limit,
                                        int64_t samples, std::string* why_not) {
    PlanRequest request;
    request.model = o_.model;
    request.cluster = catalog;
    request.profile = o_.profile;
    request.workload =
        cost::ColocatedWorkload(limit, static_cast<double>(std::max<int64_t>(samples, 1)));
    request.rules = o_.rules;
    request.scheduler = o_.scheduler;
    request.options.seed = o_.seed;
    request.options.time_limit_seconds = o_.time_limit_seconds;
    request.options.policy_out = o_.policy;
    if (!o_.policy.empty() && o_.env->FileExists(o_.policy)) request.options.policy_in = o_.policy;
    absl::StatusOr<MadePlan> made = MakePlan(request);
    if (!made.ok() && !request.options.policy_in.empty()) {
      // A policy for another catalog (a type came or went): start afresh.
      request.options.policy_in.clear();
      made = MakePlan(request);
    }
    HETERPS_RETURN_IF_ERROR(made.status());
    if (!made->plan.feasible) *why_not = made->plan.why.message;
    return std::move(made->run);
  }

  std::optional<PlanSwitch> Decide(const JobPosition& p, const std::string& why) {
    const config::ClusterSpec catalog = Catalog();
    const double limit = Limit(p);
    const std::optional<double> keep_per_hour = PlanCostPerHour(current_->plan, catalog);
    const bool current_ok =
        keep_per_hour.has_value() &&
        (current_->plan.throughput <= 0 || current_->plan.throughput >= limit * (1 - 1e-9));
    PlanSwitch out;
    out.reason = why;
    out.required = !current_ok;
    const auto keep_going = [&](const std::string& what) -> std::optional<PlanSwitch> {
      Log(absl::StrCat(why, ": ", what,
                       current_ok ? "; keeping the current plan"
                                  : "; the current plan cannot go on either and is kept until "
                                    "it fails"));
      return std::nullopt;
    };
    sched::RunPlan plan;
    int ps_shards = 0;
    const bool requested = plan_requested_;
    if (requested) {
      plan_requested_ = false;
      absl::StatusOr<sched::RunPlan> requested =
          sched::ReadRunPlan(control_.plan_json, control_.plan_source, o_.model, catalog);
      if (!requested.ok())
        return keep_going(absl::StrCat("refused: ", requested.status().message()));
      if (absl::Status kept =
              CheckResidency(*requested, control_.plan_source, o_.model, catalog, o_.rules);
          !kept.ok()) {
        return keep_going(absl::StrCat("refused: ", kept.message()));
      }
      plan = *requested;
      if (plan.throughput <= 0) plan.throughput = Predict(plan, catalog);
      ps_shards = control_.ps_shards;
      out.required = true;
    } else {
      std::string why_not;
      absl::StatusOr<sched::RunPlan> replanned = Replan(catalog, limit, p.samples_left, &why_not);
      if (!replanned.ok())
        return keep_going(absl::StrCat("re-plan failed: ", replanned.status().message()));
      if (!why_not.empty()) return keep_going(absl::StrCat("no feasible plan: ", why_not));
      plan = *replanned;
    }
    if (o_.place_here) {
      for (const std::string& note : PlaceStagesHere(o_.model, &plan)) Log(note);
    }
    absl::StatusOr<worker::JobSpec> job = JobOfPlan(o_.recipe, plan, catalog, ps_shards);
    if (!job.ok())
      return keep_going(absl::StrCat("the new plan cannot run: ", job.status().message()));
    out.job = *job;
    const double new_per_hour =
        PlanCostPerHour(out.job.plan, catalog).value_or(plan.cost_per_hour_usd);
    const double predicted = current_->plan.throughput;
    const double calibration = calibration_;  // see Check
    const double measured =
        p.samples_per_second > 0 ? p.samples_per_second : predicted * calibration;
    const double new_rate =
        out.job.plan.throughput > 0 ? out.job.plan.throughput * calibration : measured;
    const double left = static_cast<double>(p.samples_left);
    out.keep_usd = current_ok && measured > 0 ? left / measured * *keep_per_hour / 3600 : 0;
    out.new_usd = new_rate > 0 ? left / new_rate * new_per_hour / 3600 : 0;
    out.switch_usd = p.switch_seconds * std::max(keep_per_hour.value_or(0.0), new_per_hour) / 3600;
    if (SameLayout(out.job, *current_)) {
      return keep_going(requested ? "the requested plan is the running one"
                                  : "the running plan is still the best");
    }
    // A switch is a decision too: replan.log records it beside those that kept the plan.
    const auto switching = [&]() -> std::optional<PlanSwitch> {
      Log(absl::StrCat(why, ": switching to ", DescribePlan(out.job),
                       requested      ? " (requested)"
                       : out.required ? " (the current plan cannot go on)"
                                      : absl::StrCat(" (", FormatUsd(out.new_usd), " instead of ",
                                                     FormatUsd(out.keep_usd),
                                                     " for the samples left, the "
                                                     "switch ",
                                                     FormatUsd(out.switch_usd), ")")));
      return out;
    };
    if (out.required) return switching();
    const double saving = out.keep_usd - out.new_usd - out.switch_usd;
    if (saving > o_.threshold * out.keep_usd) return switching();
    return keep_going(absl::StrCat(DescribePlan(out.job), " would cost ", FormatUsd(out.new_usd),
                                   " plus ", FormatUsd(out.switch_usd), " to switch, against ",
                                   FormatUsd(out.keep_usd), " on the current plan, over the ",
                                   p.samples_left, " samples left (threshold ", o_.threshold * 100,
                                   "%)"));
  }

  const ElasticOptions o_;
  config::ClusterSpec base_;
  ClusterState state_;
  Watched spec_file_, state_file_, control_file_;
  JobControl control_;
  bool plan_requested_ = false;
  double limit_ = 0;
  // The last measured/predicted throughput of a running plan: it corrects the predictions of a
  // plan that has not been measured yet (one that just started) as it corrected the one before.
  double calibration_ = 1.0;
  std::optional<absl::Time> deadline_;
  std::map<std::string, int> deaths_, given_up_;
  std::vector<std::string> reasons_;
  std::optional<worker::JobSpec> first_, current_;
  absl::Time last_poll_ = absl::InfinitePast();
};

}  // namespace

std::optional<double> PlanCostPerHour(const sched::RunPlan& plan,
                                      const config::ClusterSpec& cluster) {
  std::map<std::string, int64_t> units;
  for (const sched::RunStage& s : plan.stages) units[s.type] += s.units;
  double usd = 0;
  for (const auto& [type, n] : units) {
    const int t = cluster.FindType(type);
    if (t < 0 || cluster.types[t].units < n) return std::nullopt;
    usd += static_cast<double>(n) * cluster.types[t].price_per_hour;
  }
  return usd;
}

std::string DescribePlan(const worker::JobSpec& job) {
  std::vector<std::string> stages;
  for (int s = 0; s < job.stages(); ++s) {
    const sched::RunStage& st = job.plan.stages[s];
    stages.push_back(absl::StrCat(job.plan.StageName(job.model, s), " ", st.type, " x", st.units));
  }
  return absl::StrCat(absl::StrJoin(stages, " | "), "; ", job.settings.ps_shards, " ps");
}

std::string FormatUsd(double usd) { return base::HumanUsd(usd); }

std::unique_ptr<Replanner> NewElasticReplanner(ElasticOptions options) {
  return std::make_unique<ElasticReplanner>(std::move(options));
}

}  // namespace heterps::launcher
