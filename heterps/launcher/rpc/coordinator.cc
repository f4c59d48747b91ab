#include "heterps/launcher/rpc/coordinator.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/reader.h"
#include "heterps/launcher/job_checkpoint.h"
#include "heterps/launcher/layout.h"
#include "heterps/launcher/rpc/attempt.h"
#include "heterps/launcher/rpc/coordinator_service.h"
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

}  // namespace

absl::StatusOr<JobResult> RunJob(const worker::JobSpec& job, const RunOptions& o) {
  HETERPS_RETURN_IF_ERROR(CheckOptions(job, o));
  HETERPS_RETURN_IF_ERROR(o.env->CreateDirs(o.job_dir));
  const JobLayout layout = MakeLayout(job);
  HETERPS_ASSIGN_OR_RETURN(const int64_t lines, data::CountLines(job.files));
  const int64_t eval_every = job.eval_every();
  const int64_t train_lines = eval_every > 0 ? lines - lines / eval_every : lines;
  if (train_lines < 1) return absl::InvalidArgumentError("job: the data has no training lines");
  // The description every role reads, kept beside the job's other files.
  const std::string job_json = worker::JobToJson(job);
  HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(o.env, o.job_dir + "/job.json", job_json));

  // Ready before the first call can arrive: an external launcher's processes may already wait.
  CoordinatorService service(o.token, o.job_dir, job_json, layout);
  heterps::rpc::Endpoint endpoint;
  endpoint.host = o.host;
  endpoint.port = o.port;
  absl::StatusOr<heterps::rpc::Server> server = heterps::rpc::StartServer(endpoint, {&service});
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("coordinator: ", server.status().message()));
  }
  if (o.on_listening) o.on_listening(server->address);

  JobResult result;
  result.ps_shards = layout.ps_shards;
  const absl::Time start = absl::Now();
  absl::Status status;
  for (int64_t generation = 1;; ++generation) {
    if (generation > 1) service.Reset(generation);
    Attempt attempt(job, o, layout, service, result, generation, start);
    status = attempt.Run(server->address, train_lines);
    if (status.ok()) break;
    service.Stop();
    if (o.launcher == nullptr || result.restarts >= job.settings.max_restarts ||
        !Recoverable(status)) {
      break;
    }
    o.launcher->StopAll(absl::ZeroDuration());
    ++result.restarts;
    result.failures.push_back(std::string(status.message()));
    absl::StatusOr<std::optional<JobCheckpoint>> c = ReadJobCheckpoint(o.env, o.job_dir);
    const int64_t step = c.ok() && c->has_value() ? (*c)->step : 0;
    const std::string event = absl::StrCat("restarting from step ", step, ": ", status.message());
    if (o.progress) {
      o.progress(
          {step, 0, 0, absl::ToDoubleSeconds(absl::Now() - start), 0, result.restarts, event});
    } else {
      base::LogLine(event);
    }
  }
  service.Stop();
  service.AwaitStopHeard(absl::Seconds(5));
  if (status.ok()) {
    // The job is complete: a new job in the same directory starts afresh.
    status = RemoveJobCheckpoint(o.env, o.job_dir);
  }
  if (o.launcher != nullptr) o.launcher->StopAll(absl::Seconds(5));
  server->server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  HETERPS_RETURN_IF_ERROR(status);
  return result;
}

}  // namespace heterps::launcher::rpc
