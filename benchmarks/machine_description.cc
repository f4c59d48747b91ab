#include "benchmarks/machine_description.h"

#include <unistd.h>

#include <fstream>

#include "absl/strings/str_format.h"

namespace heterps::benchmarks {

std::string MachineDescription() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model = "unknown CPU";
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return absl::StrFormat("%s, %ld cores", model, sysconf(_SC_NPROCESSORS_ONLN));
}

}  // namespace heterps::benchmarks
