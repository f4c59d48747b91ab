// What the benchmarks' figures were measured on.
#pragma once

#include <string>

namespace heterps::benchmarks {

// "Intel(R) Xeon(R) ..., 2 cores": what the figures were measured on.
std::string MachineDescription();

}  // namespace heterps::benchmarks
