// Memory for large arrays read at random (hash-table entries, embedding rows), backed by 2 MiB
// transparent huge pages where the kernel allows it (Linux's MADV_HUGEPAGE), so that random
// accesses miss the TLB far less often. Small requests are plain heap memory.
//
// Thread safety: the functions may be called concurrently.
#pragma once

#include <cstddef>
#include <new>

namespace heterps::base {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// `bytes` of memory, 2 MiB-aligned, zeroed and advised for huge pages when at least 2 MiB (mapped
// directly, and returned to the system when freed); uninitialized heap memory when smaller.
// Throws std::bad_alloc, like operator new, when there is no memory.
void* AllocateHuge(size_t bytes);
// Releases memory from AllocateHuge(bytes), with the same `bytes`.
void FreeHuge(void* p, size_t bytes);

// A std allocator on AllocateHuge, for std::vector of large element arrays.
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(AllocateHuge(n * sizeof(T))); }
  void deallocate(T* p, size_t n) { FreeHuge(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const HugePageAllocator<U>&) const {
    return false;
  }
};

// Deleter for memory from AllocateHuge(bytes).
struct HugeDeleter {
  size_t bytes = 0;
  void operator()(void* p) const { FreeHuge(p, bytes); }
};

}  // namespace heterps::base
