// What machine this is, for benchmark reports and profiles.
#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace heterps::base {

// "<CPU model> (<n> hardware threads)", from /proc/cpuinfo; "unknown CPU" where it is missing.
std::string HostDescription();

// Whether `host` is this host's loopback ("127.x.y.z", "::1", "[::1]", "localhost").
bool IsLoopbackHost(absl::string_view host);

// This host's physical memory, bytes (0 where the system does not say).
int64_t PhysicalMemoryBytes();

// Makes the C library's allocator keep freed buffers of up to 16 MiB in its heaps, and give free
// memory back to the system only past 64 MiB of it per heap. By default glibc maps a buffer above
// its (adaptive) mmap threshold and unmaps it when freed, and trims the threads' heaps with
// madvise as buffers are freed: the RPCs' messages and chunks (up to a few MB each, allocated and
// freed by the thousand a second) then fault their pages in again on every call, a quarter of a
// small-batch distributed step (docs/benchmarks.md, "The distributed runtime"). Call at the start
// of main, before any other thread. A no-op where the C library is not glibc.
void KeepFreedBuffers();

}  // namespace heterps::base
