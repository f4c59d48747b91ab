#include "heterps/ps/key_plan.h"

#include <algorithm>

#include "heterps/base/key_index.h"

namespace heterps::ps {

KeyPlan PlanKeys(absl::Span<const uint64_t> keys, int num_servers) {
  KeyPlan plan;
  plan.keys.resize(num_servers);
  const size_t n = keys.size();
  plan.where.resize(n);
  if (n == 0) return plan;
  // The batch's distinct keys, each with its index among its server's keys; the slot of the key
  // kAhead positions on is fetched ahead, so that the cache misses of several keys overlap. The
  // calling thread's table is kept between calls up to kKept bytes; a larger one (a batch of more
  // than 128Ki keys, as a checkpoint's) is freed when the call returns.
  constexpr size_t kKept = size_t{4} << 20;
  thread_local base::KeyIndex index;
  index.Reset(n);
  const uint64_t servers = static_cast<uint64_t>(num_servers);
  for (auto& server_keys : plan.keys) server_keys.reserve(n / num_servers + n / (4 * num_servers));
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < std::min(n, kAhead); ++i) index.Prefetch(keys[i]);
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) index.Prefetch(keys[i + kAhead]);
    const uint64_t key = keys[i];
    // ServerOf (no division for one server).
    const int server = servers == 1 ? 0 : static_cast<int>(MixKey(key) % servers);
    std::vector<uint64_t>& mine = plan.keys[server];
    auto [at, fresh] = index.Insert(key, static_cast<uint32_t>(mine.size()));
    if (fresh) mine.push_back(key);
    plan.where[i] = {server, static_cast<int>(at)};
  }
  index.Trim(kKept);
  return plan;
}

}  // namespace heterps::ps
