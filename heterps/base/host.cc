#include "heterps/base/host.h"

#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace heterps::base {

std::string HostDescription() {
  std::string model = "unknown CPU";
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  }
  return absl::StrCat(model, " (", std::thread::hardware_concurrency(), " hardware threads)");
}

}  // namespace heterps::base
