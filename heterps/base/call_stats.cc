#include "heterps/base/call_stats.h"

#include <algorithm>

namespace heterps::base {

int LatencyBucket(double seconds) {
  return static_cast<int>(
      std::lower_bound(kCallLatencyBounds.begin(), kCallLatencyBounds.end(), seconds) -
      kCallLatencyBounds.begin());
}

MethodStats& CallStats::Entry(absl::string_view method) {
  auto [it, inserted] = methods_.try_emplace(method);
  MethodStats& m = it->second;
  if (inserted) {
    m.method = std::string(method);
    m.buckets.assign(kCallLatencyBounds.size() + 1, 0);
  }
  return m;
}

void CallStats::Record(absl::string_view method, bool ok, absl::Duration elapsed) {
  const double seconds = absl::ToDoubleSeconds(elapsed);
  const int bucket = LatencyBucket(seconds);
  absl::MutexLock lock(&mu_);
  MethodStats& m = Entry(method);
  ++m.calls;
  if (!ok) ++m.errors;
  m.seconds += seconds;
  ++m.buckets[bucket];
}

void CallStats::AddBytes(absl::string_view method, int64_t sent, int64_t received) {
  absl::MutexLock lock(&mu_);
  MethodStats& m = Entry(method);
  m.sent_bytes += sent;
  m.received_bytes += received;
}

std::vector<MethodStats> CallStats::Snapshot() const {
  std::vector<MethodStats> out;
  {
    absl::MutexLock lock(&mu_);
    out.reserve(methods_.size());
    for (const auto& [name, m] : methods_) out.push_back(m);
  }
  std::sort(out.begin(), out.end(),
            [](const MethodStats& a, const MethodStats& b) { return a.method < b.method; });
  return out;
}

}  // namespace heterps::base
