#include "heterps/base/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>

namespace heterps::base {
namespace {

size_t RoundUp(size_t bytes) {
  return (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
}

}  // namespace

void* AllocateHuge(size_t bytes) {
  if (bytes < kHugePageBytes) {
    void* p = std::malloc(bytes == 0 ? 1 : bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  // Mapped directly (and unmapped when freed, so that the memory goes back to the system), with
  // a huge page of slack to align the start.
  const size_t rounded = RoundUp(bytes);
  void* raw = mmap(nullptr, rounded + kHugePageBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (begin + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  if (start > begin) munmap(raw, start - begin);
  const uintptr_t end = begin + rounded + kHugePageBytes;
  if (end > start + rounded)
    munmap(reinterpret_cast<void*>(start + rounded), end - start - rounded);
#ifdef MADV_HUGEPAGE
  madvise(reinterpret_cast<void*>(start), rounded, MADV_HUGEPAGE);  // advice: else small pages
#endif
  return reinterpret_cast<void*>(start);
}

void FreeHuge(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kHugePageBytes) {
    std::free(p);
  } else {
    munmap(p, RoundUp(bytes));
  }
}

}  // namespace heterps::base
