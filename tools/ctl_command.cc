#include "tools/ctl_command.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "heterps/base/env.h"
#include "heterps/cost/cost_model.h"
#include "heterps/launcher/cluster_state.h"
#include "heterps/launcher/job_status.h"
#include "tools/cli_common.h"

namespace heterps::tools {

CLI::App* AddCtlCommand(CLI::App& app, CtlFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "ctl", "Ask a running job for a new throughput, a deadline or another plan");
  cmd->add_option("job_dir", flags.job_dir, "The job's directory (heterps train --job-dir)")
      ->required();
  CLI::Option* throughput =
      cmd->add_option("--throughput", flags.throughput, "Samples/s the plan must reach from now on")
          ->check(Positive());
  CLI::Option* deadline = cmd->add_option(
      "--deadline", flags.deadline,
      "Finish by this time (RFC 3339, e.g. 2026-11-24T06:00:00Z) at the lowest cost");
  CLI::Option* plan =
      cmd->add_option("--plan", flags.plan_path, "Switch to this plan (from heterps plan)");
  cmd->add_option("--ps-shards", flags.ps_shards,
                  "With --plan: parameter servers of the new plan (default: sized for it)")
      ->check(CLI::Range(int64_t{1}, cost::kMaxPsShards))
      ->needs(plan);
  throughput->excludes(deadline);
  return cmd;
}

int RunCtl(const CtlFlags& flags) {
  base::Env* env = base::DefaultEnv();
  if (!env->FileExists(flags.job_dir + "/job.json")) {
    return Fail(absl::NotFoundError(
        absl::StrCat(flags.job_dir, ": not a job directory (it has no job.json)")));
  }
  // A job that has ended reads no more requests: one left behind would be read by nothing, or
  // mistaken for a new one. A stopped job is resumable, and reads it when it resumes.
  if (absl::StatusOr<launcher::JobStatus> status = launcher::ReadJobStatus(env, flags.job_dir);
      status.ok() && (status->state == "done" || status->state == "failed")) {
    return Fail(absl::FailedPreconditionError(absl::StrCat(flags.job_dir, ": the job has ended (",
                                                           status->state,
                                                           "); nothing would read the request")));
  }
  launcher::JobControl control;
  control.throughput = flags.throughput;
  if (!flags.deadline.empty()) {
    absl::Time when;
    std::string why;
    if (!absl::ParseTime(absl::RFC3339_full, flags.deadline, &when, &why)) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--deadline: '", flags.deadline, "' is not an RFC 3339 time: ", why)));
    }
    control.deadline = when;
  }
  if (!flags.plan_path.empty()) {
    // The request carries the plan: it must fit what the job reads (kMaxClusterStateBytes).
    absl::StatusOr<std::string> text =
        base::ReadFile(env, flags.plan_path, launcher::kMaxClusterStateBytes - 4096);
    if (!text.ok()) return Fail(text.status());
    control.plan_json = *text;
    control.plan_source = flags.plan_path;
    control.ps_shards = flags.ps_shards;
  }
  if (control.throughput <= 0 && !control.deadline && control.plan_json.empty()) {
    return Fail(absl::InvalidArgumentError("give --throughput, --deadline or --plan"));
  }
  absl::Status written = launcher::WriteJobControl(env, flags.job_dir, control);
  if (!written.ok()) return Fail(written);
  std::printf("asked: %s (the job reads it between steps; its log says what it decided)\n",
              launcher::JobControlPath(flags.job_dir).c_str());
  return 0;
}

}  // namespace heterps::tools
