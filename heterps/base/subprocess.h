// A child process: started from an argument vector, signalled, waited for with
// a time limit. The runtime starts its roles with it, and multi-process tests
// their servers.
//
//   HETERPS_ASSIGN_OR_RETURN(auto child, base::Subprocess::Start({"heterps",
//   "ps-server", ...},
//                                                                 "ps0.log"));
//   child->Signal(SIGTERM);
//   HETERPS_ASSIGN_OR_RETURN(int status, child->Wait(absl::Seconds(5)));
//
// The child's stdout and stderr go to `log_path` (appended; empty: inherited).
// It is put in a process group of its own and, if the parent dies, receives
// SIGKILL (Linux's parent-death signal), so that no child outlives the process
// that started it. The destructor kills a child that is still running and reaps
// it.
//
// Thread safety: one thread at a time per object.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace heterps::base {

class Subprocess {
 public:
  // Starts argv[0] (looked up in PATH if it has no slash). Internal, naming the
  // program and the reason, if it cannot be started.
  static absl::StatusOr<std::unique_ptr<Subprocess>> Start(const std::vector<std::string>& argv,
                                                           const std::string& log_path = "");
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // Sends `signal` unless the child has been reaped.
  void Signal(int signal);
  // Waits up to `timeout` for the child to end; returns its exit code, or 128 +
  // the signal that ended it. DeadlineExceeded if it is still running.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // Whether the child has not ended yet (reaping it if it has).
  bool Running();

 private:
  explicit Subprocess(pid_t pid) : pid_(pid) {}
  // Reaps the child if it has ended, without blocking.
  bool Reap();
  pid_t pid_;
  bool reaped_ = false;
  int exit_code_ = -1;
};

}  // namespace heterps::base
