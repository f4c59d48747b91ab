#include "heterps/launcher/role_launcher.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/env.h"
#include "heterps/base/status_macros.h"
#include "heterps/launcher/job_checkpoint.h"

namespace heterps::launcher {

absl::Status LocalLauncher::Start(const std::string& coordinator, int world, int64_t generation) {
  StopAll(absl::Seconds(2));
  const std::string logs = options_.job_dir + "/logs";
  HETERPS_RETURN_IF_ERROR(options_.env->CreateDirs(logs));
  for (int rank = 1; rank < world; ++rank) {
    std::vector<std::string> argv = {options_.binary, "node",
                                     "--coordinator", coordinator,
                                     "--rank",        std::to_string(rank),
                                     "--world",       std::to_string(world),
                                     "--host",        options_.host,
                                     "--generation",  std::to_string(generation)};
    if (!options_.token_file.empty()) {
      argv.push_back("--token-file");
      argv.push_back(options_.token_file);
    }
    if (!options_.tls_cert.empty()) {
      argv.insert(argv.end(), {"--tls-cert", options_.tls_cert, "--tls-key", options_.tls_key});
    }
    HETERPS_ASSIGN_OR_RETURN(
        auto child, base::Subprocess::Start(argv, absl::StrCat(logs, "/rank-", rank, ".log")));
    children_.push_back(std::move(child));
  }
  // Which process is which rank, for people and tools that look at the job from outside.
  std::string pids = absl::StrCat("{\"generation\": ", generation, ", \"ranks\": {");
  for (size_t i = 0; i < children_.size(); ++i) {
    absl::StrAppend(&pids, i == 0 ? "" : ", ", "\"", i + 1, "\": ", children_[i]->pid());
  }
  absl::StrAppend(&pids, "}}\n");
  return JobFileError(
      base::WriteFileAtomically(options_.env, options_.job_dir + "/processes.json", pids));
}

std::optional<RoleLauncher::DeadRole> LocalLauncher::Dead() {
  for (size_t i = 0; i < children_.size(); ++i) {
    base::Subprocess& child = *children_[i];
    if (child.Running()) continue;
    const absl::StatusOr<int> code = child.Wait(absl::ZeroDuration());
    const int rank = static_cast<int>(i) + 1;
    std::string how = "ended";
    if (code.ok()) {
      how = *code > 128 ? absl::StrCat("was killed by signal ", *code - 128)
                        : absl::StrCat("exited with code ", *code);
    }
    return DeadRole{rank, absl::StrCat("rank ", rank, " (pid ", child.pid(), ") ", how,
                                       " (log: ", options_.job_dir, "/logs/rank-", rank, ".log)")};
  }
  return std::nullopt;
}

void LocalLauncher::StopAll(absl::Duration grace) {
  for (auto& child : children_) child->Signal(SIGTERM);
  const absl::Time deadline = absl::Now() + grace;
  for (auto& child : children_) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    if (!child->Wait(left).ok()) {
      child->Signal(SIGKILL);
      child->Wait(absl::Seconds(5)).IgnoreError();
    }
  }
  children_.clear();
}

pid_t LocalLauncher::pid(int rank) const {
  if (rank < 1 || rank > static_cast<int>(children_.size())) return -1;
  return children_[rank - 1]->pid();
}

}  // namespace heterps::launcher
