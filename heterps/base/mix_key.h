// The mixing hash of 64-bit keys: SplitMix64's finalizer. It spreads embedding keys over
// parameter-server shards and lock shards (docs/ps.md) and derives a categorical value's key from
// its slot (docs/data.md). Part of the data's and the checkpoints' format: never change it.
//
// Thread safety: a pure function.
#pragma once

#include <cstdint>

namespace heterps::base {

inline uint64_t MixKey(uint64_t key) {
  key += 0x9e3779b97f4a7c15ull;
  key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ull;
  key = (key ^ (key >> 27)) * 0x94d049bb133111ebull;
  return key ^ (key >> 31);
}

// The parameter server a key belongs to: MixKey(key) % num_servers (docs/ps.md), for clients,
// servers and checkpoints alike.
inline int ServerOf(uint64_t key, int num_servers) {
  return static_cast<int>(MixKey(key) % static_cast<uint64_t>(num_servers));
}

}  // namespace heterps::base
