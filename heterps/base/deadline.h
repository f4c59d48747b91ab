// A wall-clock budget for searches that must stop on time.
//
// Thread safety: const methods may be called concurrently.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace heterps::base {

class Deadline {
 public:
  // A deadline `seconds` from now; a non-positive or infinite value never expires.
  explicit Deadline(double seconds)
      : start_(absl::Now()),
        end_(seconds > 0 && seconds < 1e15 ? start_ + absl::Seconds(seconds)
                                           : absl::InfiniteFuture()) {}

  bool Expired() const { return absl::Now() >= end_; }
  // Seconds since construction.
  double Elapsed() const { return absl::ToDoubleSeconds(absl::Now() - start_); }

 private:
  absl::Time start_;
  absl::Time end_;
};

}  // namespace heterps::base
