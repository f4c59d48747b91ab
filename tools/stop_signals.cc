#include "tools/stop_signals.h"

#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

namespace heterps::tools {

StopSignals::StopSignals(std::function<void(int signal)> on_second) {
  sigemptyset(&set_);
  sigaddset(&set_, SIGTERM);
  sigaddset(&set_, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set_, nullptr);
  waiter_ = std::thread([this, on_second = std::move(on_second)] {
    const timespec tick = {0, 100 * 1000 * 1000};
    while (!done_.load()) {
      const int signal = sigtimedwait(&set_, nullptr, &tick);
      if (signal <= 0) continue;
      if (!stop_.exchange(true)) {
        signal_.store(signal);
        static constexpr char kStopping[] =
            "\nheterps: stopping at the next step (a checkpoint first); a second signal ends it "
            "at once\n";
        (void)!write(STDERR_FILENO, kStopping, sizeof(kStopping) - 1);
        continue;
      }
      if (on_second) on_second(signal);
      _exit(128 + signal);
    }
  });
}

StopSignals::~StopSignals() {
  done_.store(true);
  waiter_.join();
  pthread_sigmask(SIG_UNBLOCK, &set_, nullptr);
}

}  // namespace heterps::tools
