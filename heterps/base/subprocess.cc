#include "heterps/base/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace heterps::base {

absl::StatusOr<std::unique_ptr<Subprocess>> Subprocess::Start(const std::vector<std::string>& argv,
                                                              const std::string& log_path) {
  if (argv.empty()) return absl::InvalidArgumentError("no program to start");
  int log_fd = -1;
  if (!log_path.empty()) {
    log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      return absl::InternalError(
          absl::StrCat("cannot open log ", log_path, ": ", std::strerror(errno)));
    }
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  // Forked by hand (not posix_spawn) for the parent-death signal, set in the
  // child.
  const pid_t pid = fork();
  if (pid < 0) {
    const int error = errno;
    if (log_fd >= 0) close(log_fd);
    return absl::InternalError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(error)));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent is already gone
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (log_fd >= 0) {
      dup2(log_fd, STDOUT_FILENO);
      dup2(log_fd, STDERR_FILENO);
    }
    execvp(args[0], args.data());
    // Only async-signal-safe calls here: the parent may have had other threads.
    static constexpr char kCannot[] = "heterps: error: cannot run ";
    (void)!write(STDERR_FILENO, kCannot, sizeof(kCannot) - 1);
    (void)!write(STDERR_FILENO, args[0], std::strlen(args[0]));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  return std::unique_ptr<Subprocess>(new Subprocess(pid));
}

Subprocess::~Subprocess() {
  if (!Reap()) {
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
  }
}

bool Subprocess::Reap() {
  if (reaped_) return true;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return false;
  reaped_ = true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

void Subprocess::Signal(int signal) {
  if (!Reap()) kill(pid_, signal);
}

bool Subprocess::Running() { return !Reap(); }

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  while (!Reap()) {
    if (absl::Now() >= end) {
      return absl::DeadlineExceededError(
          absl::StrCat("process ", pid_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(50));
  }
  return exit_code_;
}

}  // namespace heterps::base
