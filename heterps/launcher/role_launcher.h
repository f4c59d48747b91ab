// Starts the processes of a job's roles and watches them. The coordinator asks it for every
// attempt of the job, and for a fresh set of processes after a failure (docs/runtime.md).
//
// LocalLauncher starts them on this host as children (`heterps node --rank R ...`), each with its
// log in <job_dir>/logs/, each killed if the launching process dies (base/subprocess.h), and
// writes <job_dir>/processes.json: {"generation": G, "ranks": {"1": pid, ...}}.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "heterps/base/env.h"
#include "heterps/base/subprocess.h"

namespace heterps::launcher {

class RoleLauncher {
 public:
  virtual ~RoleLauncher() = default;
  // Starts ranks 1 .. world-1 of attempt `generation`, to find the coordinator at `coordinator`
  // (host:port).
  virtual absl::Status Start(const std::string& coordinator, int world, int64_t generation) = 0;
  // A rank that has ended since Start, and how ("rank 3 (pid 1234) was killed by signal 9"), or
  // nullopt while all run.
  struct DeadRole {
    int rank = 0;
    std::string what;
  };
  virtual std::optional<DeadRole> Dead() = 0;
  // Ends every process: SIGTERM, then SIGKILL to those still running after `grace`.
  virtual void StopAll(absl::Duration grace) = 0;
};

struct LocalLauncherOptions {
  std::string binary;                   // the heterps executable
  std::string token_file;               // the job's token, passed to every process
  std::string job_dir;                  // logs go to <job_dir>/logs/rank-<r>.log
  std::string host = "127.0.0.1";       // the address the roles serve on
  base::Env* env = base::DefaultEnv();  // logs/ and processes.json go through it
  std::string tls_cert, tls_key;        // the job's certificate and key files, where it has TLS
};

class LocalLauncher : public RoleLauncher {
 public:
  explicit LocalLauncher(const LocalLauncherOptions& options) : options_(options) {}
  ~LocalLauncher() override { StopAll(absl::Seconds(2)); }

  absl::Status Start(const std::string& coordinator, int world, int64_t generation) override;
  std::optional<DeadRole> Dead() override;
  void StopAll(absl::Duration grace) override;

  // The pid of rank `rank`'s process, or -1 (for tests that kill one).
  pid_t pid(int rank) const;

 private:
  LocalLauncherOptions options_;
  std::vector<std::unique_ptr<base::Subprocess>> children_;  // [rank - 1]
};

}  // namespace heterps::launcher
