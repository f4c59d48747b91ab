// SIGTERM and SIGINT for a command that runs a job: the first asks the job to stop cleanly (a flag
// the job reads between steps), the second ends the process at once (after `on_second`, which
// must be quick: the children of a local launcher die with it by the parent-death signal).
//
//   StopSignals signals([&] { MarkEnded(); });
//   options.stop = signals.flag();
//   ... RunJob ...
//   if (signals.received() != 0) return 128 + signals.received();
//
// The signals are blocked in the constructing thread (and so in the threads it starts later) and
// taken by a thread of this object's; the destructor unblocks them. Construct it before starting
// any thread that should not see them. One at a time per process.
#pragma once

#include <atomic>
#include <csignal>
#include <functional>
#include <thread>

namespace heterps::tools {

class StopSignals {
 public:
  explicit StopSignals(std::function<void(int signal)> on_second);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  const std::atomic<bool>* flag() const { return &stop_; }
  // The first signal received (SIGTERM or SIGINT), 0 if none.
  int received() const { return signal_.load(); }

 private:
  sigset_t set_;
  std::atomic<bool> stop_{false};
  std::atomic<int> signal_{0};
  std::atomic<bool> done_{false};
  std::thread waiter_;
};

}  // namespace heterps::tools
