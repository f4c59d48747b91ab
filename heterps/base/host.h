// What machine this is, for benchmark reports and profiles.
#pragma once

#include <cstdint>
#include <string>

namespace heterps::base {

// "<CPU model> (<n> hardware threads)", from /proc/cpuinfo; "unknown CPU" where it is missing.
std::string HostDescription();

// This host's physical memory, bytes (0 where the system does not say).
int64_t PhysicalMemoryBytes();

}  // namespace heterps::base
