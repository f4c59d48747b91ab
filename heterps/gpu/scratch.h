// Temporary storage for Thrust's algorithms (sorts, merges, scans, reduce_by_key), taken from a
// device's memory once and kept: Thrust's default allocates and frees device memory at every call
// that needs scratch, and on a GPU each free waits for the whole device. Passed to the execution
// policy (gpu/target.h, Policy(stream, scratch)), so that it serves every call of one engine:
//
//   gpu::Scratch scratch(device);
//   thrust::sort(gpu::HETERPS_GPU_TARGET::Policy(device->stream(), scratch), first, last);
//
// Blocks are kept by size (a request takes the smallest free block that holds it, else a new one
// of the next power of two) and go back to the device when the Scratch goes. Reuse is safe with
// one stream: a block freed by one call is only handed to a later call on the same stream, whose
// work the stream orders after the first's.
//
// Errors: the device's budget is the limit (Device::Allocate); a request over it throws
// std::bad_alloc, as Thrust's own allocator does when device memory runs out. On the twin, a
// request made inside one of Thrust's OpenMP parallel regions (a sort's merges) that throws ends
// the process (an exception cannot leave such a region): give the twin a budget that holds the
// scratch (its default is 16 GiB).
//
// Thread safety: thread-safe. Thrust's OpenMP backend (the host twin) allocates from inside its
// parallel regions: a sort's merges, one per thread, each take their scratch at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "heterps/gpu/device.h"

namespace heterps::gpu {

class Scratch {
 public:
  using value_type = char;

  explicit Scratch(Device* device) : device_(device) {}
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  ~Scratch() {
    absl::MutexLock lock(&mu_);
    for (const auto& [bytes, p] : free_) device_->Free(p);
    for (const auto& [p, bytes] : used_) device_->Free(p);
  }

  char* allocate(std::ptrdiff_t n) {
    const size_t want = Round(static_cast<size_t>(n > 0 ? n : 1));
    absl::MutexLock lock(&mu_);
    auto it = free_.lower_bound(want);
    char* p;
    size_t bytes;
    if (it != free_.end()) {
      bytes = it->first;
      p = it->second;
      free_.erase(it);
    } else {
      absl::StatusOr<void*> got = device_->Allocate(want);
      if (!got.ok()) throw std::bad_alloc();
      p = static_cast<char*>(*got);
      bytes = want;
      held_bytes_ += static_cast<int64_t>(want);
    }
    used_.emplace(p, bytes);
    return p;
  }

  void deallocate(char* p, size_t) {
    absl::MutexLock lock(&mu_);
    auto it = used_.find(p);
    if (it == used_.end()) return;
    free_.emplace(it->second, p);
    used_.erase(it);
  }

  // Device memory the Scratch holds, bytes (in use and kept).
  int64_t held_bytes() const {
    absl::MutexLock lock(&mu_);
    return held_bytes_;
  }

 private:
  static size_t Round(size_t n) {
    size_t r = 256;
    while (r < n) r <<= 1;
    return r;
  }

  Device* const device_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, char*> free_ ABSL_GUARDED_BY(mu_);  // by size
  std::map<char*, size_t> used_ ABSL_GUARDED_BY(mu_);
  int64_t held_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace heterps::gpu
