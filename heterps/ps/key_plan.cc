#include "heterps/ps/key_plan.h"

#include <algorithm>

namespace heterps::ps {

KeyPlan PlanKeys(absl::Span<const uint64_t> keys, int num_servers) {
  KeyPlan plan;
  plan.keys.resize(num_servers);
  const size_t n = keys.size();
  plan.where.resize(n);
  if (n == 0) return plan;
  // An open-addressing set of the batch's keys (linear probing, at most half full), each entry
  // holding its key's index among its server's keys; the entry of the key kAhead positions on is
  // fetched ahead, so that the cache misses of several keys overlap. A table of up to kKept
  // entries is the calling thread's, kept between calls of the same size: an entry belongs to
  // this call only if it carries this call's generation, so that nothing is cleared. A larger one
  // (a batch of more than kKept / 2 keys, as a checkpoint's) is the call's own.
  struct Entry {
    uint64_t key;
    uint32_t generation;
    int32_t index;
  };
  constexpr size_t kKept = size_t{1} << 18;  // 4 MiB a thread at most
  thread_local std::vector<Entry> kept;
  thread_local uint32_t generation = 0;
  int shift = 64 - 4;  // the slot is the mixed key's top bits
  while ((size_t{1} << (64 - shift)) < 2 * n) --shift;
  const size_t mask = (size_t{1} << (64 - shift)) - 1;
  std::vector<Entry> own;
  std::vector<Entry>* table = &own;
  uint32_t now = 1;
  if (mask + 1 > kKept) {
    own.assign(mask + 1, Entry{0, 0, 0});
  } else {
    if (kept.size() != mask + 1 || ++generation == 0) {
      kept.assign(mask + 1, Entry{0, 0, 0});
      generation = 1;
    }
    table = &kept;
    now = generation;
  }
  Entry* const entries = table->data();
  const uint64_t servers = static_cast<uint64_t>(num_servers);
  for (auto& server_keys : plan.keys) server_keys.reserve(n / num_servers + n / (4 * num_servers));
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < std::min(n, kAhead); ++i) {
    __builtin_prefetch(&entries[MixKey(keys[i]) >> shift], 1);
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(&entries[MixKey(keys[i + kAhead]) >> shift], 1);
    const uint64_t key = keys[i], mixed = MixKey(key);
    // ServerOf, from the mix already computed (no division for one server).
    const int server = servers == 1 ? 0 : static_cast<int>(mixed % servers);
    size_t slot = mixed >> shift;
    while (entries[slot].generation == now && entries[slot].key != key) slot = (slot + 1) & mask;
    Entry& entry = entries[slot];
    if (entry.generation != now) {
      entry = Entry{key, now, static_cast<int32_t>(plan.keys[server].size())};
      plan.keys[server].push_back(key);
    }
    plan.where[i] = {server, entry.index};
  }
  return plan;
}

}  // namespace heterps::ps
