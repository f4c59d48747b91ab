// A fixed set of threads running queued tasks in submission order.
//
//   base::ThreadPool pool(4);
//   pool.Schedule([] { ... });
//
// The destructor runs every task already scheduled, then joins the threads.
//
// Thread safety: Schedule may be called from any thread, including from a task.
#pragma once

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace heterps::base {

class ThreadPool {
 public:
  explicit ThreadPool(int threads) {
    for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { Work(); });
  }
  ~ThreadPool() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    for (std::thread& t : threads_) t.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void Schedule(std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(task));
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](ThreadPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
              return p->stopping_ || !p->queue_.empty();
            },
            this));
        if (queue_.empty()) return;  // stopping, and nothing left
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();
    }
  }

  absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace heterps::base
