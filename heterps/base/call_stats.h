// Counts and latencies of calls by method: what a server served or a client asked, as a
// Prometheus-style histogram per method (fixed bucket bounds, kCallLatencyBounds).
//
//   CallStats stats;
//   const absl::Time start = absl::Now();
//   ... the call ...
//   stats.Record("PullSparse", ok, absl::Now() - start);
//   std::vector<MethodStats> snapshot = stats.Snapshot();   // sorted by method
//
// A channel made with rpc::ChannelOptions::bytes adds each message's serialized size to its
// method here (AddBytes): what the calls put on the wire and got back, framing and TLS aside.
//
// Thread safety: Record, AddBytes and Snapshot may be called from any thread at once.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace heterps::base {

// Upper bounds of the latency buckets, seconds: 50 us to 10 s, a bucket for anything slower
// after them.
inline constexpr std::array<double, 16> kCallLatencyBounds = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3, 10e-3,
    25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1.0,    2.5,  10.0};

struct MethodStats {
  std::string method;
  int64_t calls = 0;   // every call, failed ones included
  int64_t errors = 0;  // calls that failed
  double seconds = 0;  // the calls' latencies summed
  // Calls per bucket, not cumulative: buckets[i] took at most kCallLatencyBounds[i] seconds
  // (and more than the bound before); the last, kCallLatencyBounds.size(), took longer than all.
  std::vector<int64_t> buckets;
  // The messages' serialized bytes, every attempt's: the requests sent and the replies received
  // (0 where the client does not count them).
  int64_t sent_bytes = 0, received_bytes = 0;
};

// The bucket of a latency in seconds (0 .. kCallLatencyBounds.size()).
int LatencyBucket(double seconds);

class CallStats {
 public:
  void Record(absl::string_view method, bool ok, absl::Duration elapsed);
  // Adds to the method's bytes (a method with no call recorded yet is created).
  void AddBytes(absl::string_view method, int64_t sent, int64_t received);
  std::vector<MethodStats> Snapshot() const;

 private:
  MethodStats& Entry(absl::string_view method) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, MethodStats> methods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterps::base
