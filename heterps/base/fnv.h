// FNV-1a 64 over bytes: a small, stable hash (the same on every build and host) for checksums of
// small files and identities written to disk. Large files use XXH3 (ps/checkpoint.cc).
//
//   uint64_t h = base::Fnv1a64(text.data(), text.size());
//   h = base::Fnv1a64(&key, sizeof(key), h);  // continues a hash
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <cstdint>

namespace heterps::base {

// The offset basis the project's files have always used: FNV's 14695981039346656037 with its last
// digit dropped. Policy files and v1 checkpoints carry hashes from it, so it stays.
inline constexpr uint64_t kFnv1a64Offset = 1469598103934665603ull;

// The hash of `size` bytes at `data`, continuing from `h` (kFnv1a64Offset for a new hash).
inline uint64_t Fnv1a64(const void* data, size_t size, uint64_t h = kFnv1a64Offset) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < size; ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace heterps::base
