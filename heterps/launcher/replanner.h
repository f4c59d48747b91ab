// Elastic jobs (docs/elastic.md): between steps, the coordinator asks a Replanner whether the
// running plan should give way to another, and switches when told to (checkpoint at the step
// boundary, stop the processes, start the new layout, load the checkpoint re-sharded by key,
// resume at the same step).
//
// The ElasticReplanner watches what changes a plan: the cluster spec file (`--cluster-watch`),
// the cluster state file (`--cluster-state`: units and prices per type), the job's control file
// (`heterps ctl`: throughput, deadline, an explicit plan), and roles that keep dying on a type.
// When one of them changes, it re-plans with the current catalog and the job's profile and
// switches when
//
//   - the current plan cannot run any more (its units are gone, or it misses the new limit), or
//   - keep - (new + switch) > threshold x keep, where keep and new are what the samples left
//     cost on each plan (USD per hour / samples per second; the current plan at its measured
//     rate, the new one at its predicted rate scaled by the current plan's measured/predicted),
//     and switch is what the switch costs: its measured seconds (start-up, checkpoint written
//     and read) at the dearer plan's price, or
//   - `heterps ctl --plan` names the plan.
//
// An update that cannot be read (unparseable, a negative unit count, an unknown type) is
// refused with one line through `log`, and the job carries on with what it had.
//
//   ElasticOptions options;
//   options.model = job.model; options.cluster = cluster; options.profile = profile;
//   options.cluster_state = "/etc/fleet/state.json"; options.control = JobControlPath(dir);
//   options.recipe = recipe;  // the user's settings for every job (planning.h)
//   std::unique_ptr<Replanner> replanner = NewElasticReplanner(std::move(options));
//   run_options.replanner = replanner.get();
//
// Thread safety: one thread at a time (the coordinator's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterps/base/env.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/profile.h"
#include "heterps/launcher/planning.h"
#include "heterps/sched/run_plan.h"
#include "heterps/worker/job.h"

namespace heterps::launcher {

// Where the job stands, as the coordinator sees it between steps.
struct JobPosition {
  int64_t step = 0, total_steps = 0;
  int64_t samples_left = 0;       // training samples not trained yet (every pass counted)
  double samples_per_second = 0;  // measured on the current plan; 0: not yet
  double switch_seconds = 0;      // a switch's measured cost: start-up, checkpoint written, read
};

// A plan to switch to, and why.
struct PlanSwitch {
  worker::JobSpec job;
  std::string reason;     // "v100-spot: 4 -> 0 units", "price of cpu-spot 0.80 -> 0.35", ...
  bool required = false;  // the current plan could not go on
  double keep_usd = 0;    // the samples left on the current plan (0 when it cannot go on)
  double new_usd = 0;     // the samples left on the new one
  double switch_usd = 0;  // the switch itself
};

class Replanner {
 public:
  virtual ~Replanner() = default;
  // The job runs `job` from now on (its first plan, or the one Check returned).
  virtual void Running(const worker::JobSpec& job) = 0;
  // A plan to switch to, or nullopt. Cheap while nothing has changed (a few stat calls, at most
  // every poll interval).
  virtual std::optional<PlanSwitch> Check(const JobPosition& position) = 0;
  // A role of the running plan on `type` died; the coordinator restarts the plan unless Check
  // then says otherwise.
  virtual void RoleLost(const std::string& type) = 0;
  // USD per hour of the running plan, and of the job's first plan, at the prices of now;
  // nullopt when the first plan could not run now (its units are gone).
  virtual double CostPerHour() const = 0;
  virtual std::optional<double> FirstPlanCostPerHour() const = 0;
};

struct ElasticOptions {
  config::ModelSpec model;      // the job's
  // The catalog as its spec says, before any cluster state: the re-planner applies the state
  // file to it, every version of the file to these figures (the one there at the start
  // included, which is what the job was planned with).
  config::ClusterSpec cluster;
  // The files watched (empty: none). cluster_watch: a cluster spec that replaces `cluster`
  // whenever it changes; cluster_state: units and prices (cluster_state.h); control: the job's
  // control file.
  std::string cluster_watch, cluster_state, control;
  // Above 0: every version of cluster_watch gains this many units of the host twin of a GPU
  // (local_gpus.h, AddLocalGpus), as `heterps train --gpu-emulate` gave the job's first catalog.
  int gpu_emulate = 0;
  std::optional<cost::Profile> profile;  // measured layer times (the job's calibrated ones)
  std::string scheduler = "exact";       // by name (sched/default_schedulers.h)
  uint64_t seed = 1;
  double time_limit_seconds = 10;  // per re-plan
  std::string policy;              // rl: the policy file it starts from and saves to
  double throughput_limit = 0;     // the job's, until `heterps ctl` changes it
  double threshold = 0.05;         // share of the remaining cost a switch must save, net
  int max_losses = 3;              // deaths on a type before one of its units is given up
  absl::Duration poll = absl::Milliseconds(500);
  // Every new plan is made (MakePlan) with the job's rules and becomes a job (JobOfPlan) with the
  // user's settings, its stages placed on this host's devices (PlaceStagesHere) when
  // `place_here`.
  JobRules rules;
  JobRecipe recipe;
  bool place_here = false;
  std::function<void(const std::string&)> log;  // refused updates and decisions; empty: LogLine
  base::Env* env = base::DefaultEnv();
};

std::unique_ptr<Replanner> NewElasticReplanner(ElasticOptions options);

// USD per hour of `plan`'s units at `cluster`'s prices; nullopt when the cluster lacks its
// units (a type gone, or fewer units than the plan's stages take together).
std::optional<double> PlanCostPerHour(const sched::RunPlan& plan,
                                      const config::ClusterSpec& cluster);

// "input..emb cpu x2 | top mlp gpu x1; 3 ps".
std::string DescribePlan(const worker::JobSpec& job);

// US dollars for people: base::HumanUsd ("$12.34", "$0.0123", "$0.0000510").
std::string FormatUsd(double usd);

}  // namespace heterps::launcher
