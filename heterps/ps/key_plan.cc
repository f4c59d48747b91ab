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

std::vector<ServerRows> SplitRows(absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                                  int dim, int num_servers) {
  std::vector<ServerRows> out(num_servers);
  for (size_t i = 0; i < keys.size(); ++i) {
    ServerRows& to = out[ServerOf(keys[i], num_servers)];
    to.keys.push_back(keys[i]);
    to.rows.insert(to.rows.end(), rows.begin() + i * dim, rows.begin() + (i + 1) * dim);
  }
  return out;
}

void MergePendingParts(PendingParts more, PendingParts* into) {
  for (PendingParts::Sparse& p : more.sparse) {
    auto at = std::find_if(into->sparse.begin(), into->sparse.end(),
                           [&](const auto& q) { return q.table == p.table && q.part == p.part; });
    if (at == into->sparse.end()) {
      into->sparse.push_back(std::move(p));
      continue;
    }
    at->keys.insert(at->keys.end(), p.keys.begin(), p.keys.end());
    at->grads.insert(at->grads.end(), p.grads.begin(), p.grads.end());
  }
  // A dense block lives on one server: its parts come from it alone.
  for (PendingParts::Dense& p : more.dense) into->dense.push_back(std::move(p));
}

}  // namespace heterps::ps
