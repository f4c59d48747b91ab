#include "heterps/launcher/rpc/coordinator.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/reader.h"
#include "heterps/launcher/attempt.h"
#include "heterps/launcher/job_checkpoint.h"
#include "heterps/launcher/job_status.h"
#include "heterps/launcher/layout.h"
#include "heterps/launcher/rpc/coordinator_service.h"
#include "heterps/launcher/rpc/grpc_processes.h"
#include "heterps/launcher/segment_ledger.h"
#include "heterps/rpc/rpc.h"

namespace heterps::launcher::rpc {
namespace {

// Failures that a fresh set of processes may not meet again: a process gone or hung, a call cut
// off. A bad layout or bad data would fail the same way again.
bool Recoverable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

absl::Status CheckOptions(const worker::JobSpec& job, const RunOptions& o) {
  if (o.job_dir.empty()) return absl::InvalidArgumentError("job: a job directory is required");
  if (o.env == nullptr) return absl::InvalidArgumentError("job: no Env");
  if (job.plan.stages.empty()) return absl::InvalidArgumentError("job: the plan has no stages");
  if (job.files.empty()) return absl::InvalidArgumentError("job: no data files");
  for (const std::string& f : job.files) {
    if (!o.env->FileExists(f) || o.env->IsDirectory(f)) {
      return absl::NotFoundError(absl::StrCat(f, ": no such data file"));
    }
  }
  return absl::OkStatus();
}

// The type a rank ran on: its stage's (a parameter server: stage 0's, whose hosts hold them).
std::string TypeOf(const worker::JobSpec& job, const JobLayout& layout, int rank) {
  if (rank < 1 || rank >= layout.world()) return "";
  const RoleSlot& slot = layout.ranks[rank];
  const int stage = slot.kind == RoleSlot::Kind::kWorker ? slot.stage : 0;
  return job.plan.stages[stage].type;
}

// The role that ended, if one did: at once, or, for a failure that may be a death seen from a
// peer (UNAVAILABLE, a deadline), within `wait`.
std::optional<RoleLauncher::DeadRole> AwaitDead(RoleLauncher& launcher, const absl::Status& why,
                                                absl::Duration wait) {
  const bool maybe_death =
      absl::IsUnavailable(why) || absl::IsDeadlineExceeded(why) || absl::IsUnknown(why);
  const absl::Time deadline = absl::Now() + (maybe_death ? wait : absl::ZeroDuration());
  for (;;) {
    if (std::optional<RoleLauncher::DeadRole> dead = launcher.Dead()) return dead;
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(50));
  }
}

void Tell(const RunOptions& o, const JobProgress& p) {
  if (o.progress) {
    o.progress(p);
  } else {
    base::LogLine(p.event);
  }
}

}  // namespace

absl::StatusOr<JobResult> RunJob(const worker::JobSpec& first_job, const RunOptions& o) {
  HETERPS_RETURN_IF_ERROR(CheckOptions(first_job, o));
  HETERPS_RETURN_IF_ERROR(o.env->CreateDirs(o.job_dir));
  worker::JobSpec job = first_job;
  JobLayout layout = MakeLayout(job);
  HETERPS_ASSIGN_OR_RETURN(const int64_t lines, data::CountLines(job.files, job.model.data.header));
  const int64_t eval_every = job.eval_every();
  const int64_t train_lines = eval_every > 0 ? lines - lines / eval_every : lines;
  if (train_lines < 1) return absl::InvalidArgumentError("job: the data has no training lines");
  // The description every role reads, kept beside the job's other files.
  std::string job_json = worker::JobToJson(job);
  HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(o.env, o.job_dir + "/job.json", job_json));

  // The job's id: an unfinished job's, resumed, or a new one.
  if (o.fresh) HETERPS_RETURN_IF_ERROR(RemoveJobCheckpoint(o.env, o.job_dir));
  HETERPS_ASSIGN_OR_RETURN(std::optional<JobCheckpoint> record,
                           ReadJobCheckpoint(o.env, o.job_dir));
  std::string job_id;
  if (record) {
    // A resume continues the same job: what it trains on and how must not have changed.
    if (!record->identity.empty()) {
      const std::vector<std::string> now = worker::JobIdentity(job);
      std::vector<std::string> differs;
      for (const std::string& was : record->identity) {
        const std::string name = was.substr(0, was.find('='));
        auto it = std::find_if(now.begin(), now.end(), [&](const std::string& line) {
          return line.substr(0, line.find('=')) == name;
        });
        const std::string value = it == now.end() ? "" : it->substr(it->find('=') + 1);
        if (it == now.end() || *it != was) {
          differs.push_back(absl::StrCat(
              name, " ", value, " (the checkpoint's: ", was.substr(was.find('=') + 1), ")"));
        }
      }
      if (!differs.empty()) {
        return absl::FailedPreconditionError(absl::StrCat(
            o.job_dir, "/checkpoint.json: the unfinished job in this directory differs: ",
            absl::StrJoin(differs, "; "),
            ". Run it as it was to resume it, or --fresh to start this job beside it"));
      }
    }
    if (o.regions != nullptr && !o.regions->begun()) {
      return absl::FailedPreconditionError(absl::StrCat(
          o.job_dir, "/checkpoint.json: the unfinished job in this directory (at step ",
          record->step, ") is one region's of a run across regions, which resumes only within "
          "its run (the windows the other regions exchanged since are gone with it): start every "
          "region again with --fresh"));
    }
    job_id = record->job_id;
  } else {
    HETERPS_ASSIGN_OR_RETURN(job_id, NewJobId());
  }

  // Ready before the first call can arrive: an external launcher's processes may already wait.
  CoordinatorService service(o.token, job_id, o.job_dir, job_json, layout);
  heterps::rpc::Endpoint endpoint;
  endpoint.host = o.host;
  endpoint.port = o.port;
  endpoint.tls_cert_pem = o.tls.cert_pem;
  endpoint.tls_key_pem = o.tls.key_pem;
  absl::StatusOr<heterps::rpc::Server> server = heterps::rpc::StartServer(endpoint, {&service});
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("coordinator: ", server.status().message()));
  }
  if (o.on_listening) o.on_listening(server->address);

  JobResult result;
  result.ps_shards = layout.ps_shards;
  const absl::Time start = absl::Now();
  SegmentLedger ledger(o.replanner);
  if (o.replanner != nullptr) o.replanner->Running(job);
  ledger.Begin(job, "start", record ? record->step : 0, start, start);
  AttemptOptions engine;
  engine.job_dir = o.job_dir;
  engine.env = o.env;
  engine.job_id = job_id;
  engine.launcher = o.launcher;
  engine.register_timeout = o.register_timeout;
  engine.progress = o.progress;
  engine.replanner = o.replanner;
  engine.regions = o.regions;
  absl::Status status;
  int restarts = 0;  // of the current plan
  for (int64_t generation = 1;; ++generation) {
    GrpcProcesses processes(service, o, layout);
    Attempt attempt(job, engine, layout, processes, result, ledger, generation, start);
    status = attempt.Run(server->address, train_lines);
    if (status.ok() && attempt.stopped()) {
      status = absl::CancelledError(
          o.regions != nullptr
              ? absl::StrCat("stopped at step ", attempt.stop_step(),
                             " on request; across regions the run ends with it (the other "
                             "regions are told): start every region again with --fresh")
              : absl::StrCat("stopped at step ", attempt.stop_step(),
                             " on request; its checkpoint is written: run "
                             "the same command again (same --job-dir) to resume from step ",
                             attempt.stop_step()));
      break;
    }
    std::optional<PlanSwitch> next = status.ok() ? attempt.switch_to() : std::nullopt;
    int64_t step = status.ok() ? attempt.switch_step() : 0;
    absl::Time trigger = attempt.switch_trigger();
    if (status.ok() && !next) break;
    if (!status.ok()) {
      // A death often shows first as a peer's UNAVAILABLE: the launcher is given a moment to
      // see the process end, so that the loss is counted against its type whatever the timing.
      std::optional<RoleLauncher::DeadRole> dead;
      if (o.launcher != nullptr) dead = AwaitDead(*o.launcher, status, absl::Seconds(2));
      service.Stop();
      if (o.launcher == nullptr || !Recoverable(status)) break;
      // Across regions a restart needs the windows since the last checkpoint (kept) and every
      // exchange whole: the other regions went on with them.
      if (o.regions != nullptr) {
        if (const absl::Status why = o.regions->Recoverable(); !why.ok()) {
          status = absl::Status(status.code(), absl::StrCat(status.message(), "; no restart: ",
                                                            why.message()));
          break;
        }
      }
      if (service.StopAsked(o.stop)) break;  // asked to stop: no restart
      o.launcher->StopAll(absl::ZeroDuration());
      absl::StatusOr<std::optional<JobCheckpoint>> c = ReadJobCheckpoint(o.env, o.job_dir);
      if (!c.ok()) {
        status = c.status();
        break;
      }
      step = c->has_value() ? (*c)->step : 0;
      ledger.RolledBack(step);
      // The re-planner hears of the loss, and may prefer another plan to a restart.
      if (o.replanner != nullptr) {
        if (dead) o.replanner->RoleLost(TypeOf(job, layout, dead->rank));
        const JobPosition position = ledger.Position(job, step, train_lines);
        trigger = absl::Now();
        ledger.Trigger(trigger);
        next = o.replanner->Check(position);
      }
      if (!next && restarts >= job.settings.max_restarts) {
        status = absl::Status(status.code(), absl::StrCat(status.message(), " (after ", restarts,
                                                          " restarts: --max-restarts ",
                                                          job.settings.max_restarts, " reached)"));
        break;
      }
      ++restarts;
      ++result.restarts;
      result.failures.push_back(std::string(status.message()));
      if (!next) {
        Tell(o,
             {step, 0, 0, absl::ToDoubleSeconds(absl::Now() - start), 0, result.restarts,
              absl::StrCat("restarting from step ", step, ": ", status.message()), std::nullopt});
        service.Reset(generation + 1);
        continue;
      }
    }
    // A switch: the processes of this plan end, the new plan's start from the checkpoint of
    // `step`. An external launcher's processes stay and take the new roles (the attempt asked
    // for no plan that needs another number of them).
    const JobLayout next_layout = MakeLayout(next->job);
    if (o.launcher != nullptr) {
      service.Stop();
      o.launcher->StopAll(absl::Seconds(2));
    }
    Tell(o, {step, 0, 0, absl::ToDoubleSeconds(absl::Now() - start), 0, result.restarts,
             absl::StrCat(
                 "switching at step ", step, " to ", DescribePlan(next->job), " (", next->reason,
                 next->required
                     ? ")"
                     : absl::StrCat("; ", FormatUsd(next->new_usd), " instead of ",
                                    FormatUsd(next->keep_usd), " for the samples left, the switch ",
                                    FormatUsd(next->switch_usd), ")")),
             std::nullopt});
    job = next->job;
    layout = next_layout;
    job_json = worker::JobToJson(job);
    HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(o.env, o.job_dir + "/job.json", job_json));
    service.Relayout(generation + 1, job_json, layout, o.launcher == nullptr);
    ledger.End(absl::Now());  // the old plan's last stretch, at its prices
    o.replanner->Running(job);
    ledger.Begin(job, next->reason, step, trigger, absl::Now());
    result.ps_shards = layout.ps_shards;
    restarts = 0;
    status = absl::OkStatus();
  }
  service.Stop();
  service.AwaitStopHeard(absl::Seconds(5));
  if (status.ok()) {
    // The job is complete: a new job in the same directory starts afresh.
    status = RemoveJobCheckpoint(o.env, o.job_dir);
  }
  if (o.launcher != nullptr) o.launcher->StopAll(absl::Seconds(5));
  server->server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  if (!status.ok()) {
    // `heterps status` says the job is over, and why.
    const bool stopped = service.StopAsked(o.stop) && absl::IsCancelled(status);
    MarkJobEnded(o.env, o.job_dir, stopped ? "stopped" : "failed", std::string(status.message()))
        .IgnoreError();
    return status;
  }
  ledger.End(absl::Now());
  ledger.Fill(&result);
  result.wall_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  result.job = job;
  return result;
}

ShardStatus ToShardStatus(const ps::rpc::ShardStats& stats) {
  ShardStatus out{stats.shard, stats.calls, {}, stats.rpcs};
  for (const auto& [id, t] : stats.sparse) {
    out.tables.push_back(
        {id, t.memory_rows, t.memory_bytes, t.cold_rows, t.hits, t.misses, t.spills});
  }
  return out;
}

}  // namespace heterps::launcher::rpc
