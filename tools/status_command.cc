#include "tools/status_command.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "heterps/base/env.h"
#include "heterps/launcher/job_status.h"
#include "tools/cli_common.h"
#include "tools/table.h"

namespace heterps::tools {

CLI::App* AddStatusCommand(CLI::App& app, StatusFlags& flags) {
  CLI::App* cmd = app.add_subcommand("status", "Show a training job's progress and counters");
  cmd->add_option("job_dir", flags.job_dir, "The job's directory (heterps train --job-dir)")
      ->required();
  return cmd;
}

int RunStatus(const StatusFlags& flags) {
  absl::StatusOr<launcher::JobStatus> read =
      launcher::ReadJobStatus(base::DefaultEnv(), flags.job_dir);
  if (!read.ok()) {
    if (read.status().code() == absl::StatusCode::kNotFound) {
      return Fail(absl::NotFoundError(
          absl::StrCat(flags.job_dir,
                       "/status.json: no status (not a job directory, or the job has not "
                       "started)")));
    }
    return Fail(read.status());
  }
  launcher::JobStatus s = *std::move(read);
  // A "running" job whose coordinator is gone, or that has not written for a while, says so.
  std::string note;
  if (s.state == "running") {
    if (s.pid > 0 && ::kill(static_cast<pid_t>(s.pid), 0) != 0 && errno == ESRCH) {
      s.state = "gone";
      note = absl::StrCat("the coordinator (pid ", s.pid,
                          ") has ended without a word: run the same command again to resume from "
                          "the last checkpoint");
    } else if (absl::Time updated;
               absl::ParseTime(absl::RFC3339_full, s.updated, &updated, nullptr)) {
      const absl::Duration age = absl::Now() - updated;
      if (age > absl::Seconds(30)) {
        note =
            absl::StrCat("no update for ", absl::FormatDuration(absl::Trunc(age, absl::Seconds(1))),
                         ": the coordinator may be stopped or its host unreachable");
      } else if (s.phase == "evaluating") {
        // An evaluation is one long pass: no step to compare it with.
      } else if (s.phase == "checkpointing") {
        if (s.step_seconds > 10) {
          note = absl::StrCat(
              "writing the checkpoint of step ", s.step, " has taken ",
              absl::FormatDuration(absl::Seconds(static_cast<int64_t>(s.step_seconds))),
              " so far: it may hang (a parameter server stopped or unreachable; the job gives up "
              "on it "
              "after its RPC deadline and restarts from the last checkpoint)");
        }
      } else if (const double typical =
                     s.step > 0 && s.samples_per_second > 0
                         ? static_cast<double>(s.samples) / s.step / s.samples_per_second
                         : 0;
                 s.step_seconds > std::max(5.0, 10 * typical)) {
        note =
            absl::StrCat("step ", s.step + 1, " has run for ",
                         absl::FormatDuration(absl::Seconds(static_cast<int64_t>(s.step_seconds))),
                         ": it may hang (the job gives up on it after its step timeout); the "
                         "replicas' queues below show where its micro-batches are");
      }
    }
  }
  if (!s.error.empty()) note = s.error;
  std::printf("%s: step %lld of %lld %s, %s samples, %s samples/s", s.state.c_str(),
              static_cast<long long>(s.step), static_cast<long long>(s.total_steps),
              Bar(s.step, std::max<int64_t>(s.total_steps, 1)).c_str(),
              WithCommas(s.samples).c_str(), WithCommas(s.samples_per_second).c_str());
  if (s.predicted_samples_per_second > 0) {
    std::printf(" (plan: %s)", WithCommas(s.predicted_samples_per_second).c_str());
  }
  if (s.state == "running" && s.phase == "evaluating") std::printf(", evaluating");
  if (s.state == "running" && s.phase == "checkpointing") std::printf(", writing a checkpoint");
  std::printf(", loss %.4f", s.loss);
  if (s.eval_step >= 0) {
    std::printf(", eval AUC %.4f after step %lld", s.eval_auc, static_cast<long long>(s.eval_step));
  }
  std::printf(", %d restarts; updated %s\n", s.restarts, s.updated.c_str());
  if (!note.empty()) std::printf("%s\n", EscapeForTerminal(note).c_str());
  std::printf("\n");
  Table replicas({"stage", "replica", "micro-batches", "busy", "idle", "send", "ps wait", "sent",
                  "queue", "in flight"},
                 {true, true, true, true, true, true, true, true, true, true});
  for (const launcher::ReplicaStatus& r : s.replicas) {
    replicas.AddRow({std::to_string(r.stage), std::to_string(r.replica),
                     WithCommas(r.micro_batches), HumanSeconds(r.busy_seconds),
                     HumanSeconds(r.idle_seconds), HumanSeconds(r.send_seconds),
                     HumanSeconds(r.ps_seconds), absl::StrFormat("%.1f MB", r.bytes_sent / 1e6),
                     std::to_string(r.queue_depth), std::to_string(r.in_flight)});
  }
  std::printf("%s\n", replicas.Render().c_str());
  Table shards(
      {"shard", "table", "rows in memory", "memory", "rows on SSD", "hits", "misses", "spills"},
      {true, true, true, true, true, true, true, true});
  for (const launcher::ShardStatus& shard : s.parameter_servers) {
    for (const launcher::TableStatus& t : shard.tables) {
      shards.AddRow({std::to_string(shard.shard), std::to_string(t.table),
                     WithCommas(t.memory_rows), absl::StrFormat("%.1f MB", t.memory_bytes / 1e6),
                     WithCommas(t.cold_rows), WithCommas(t.hits), WithCommas(t.misses),
                     WithCommas(t.spills)});
    }
  }
  std::printf("%s", shards.Render().c_str());
  return 0;
}

}  // namespace heterps::tools
