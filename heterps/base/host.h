// What machine this is, for benchmark reports and profiles.
#pragma once

#include <string>

namespace heterps::base {

// "<CPU model> (<n> hardware threads)", from /proc/cpuinfo; "unknown CPU" where it is missing.
std::string HostDescription();

}  // namespace heterps::base
