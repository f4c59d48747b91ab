#include "heterps/base/host.h"

#include <unistd.h>

#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace heterps::base {

void KeepFreedBuffers() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 16 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

bool IsLoopbackHost(absl::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || absl::StartsWith(host, "127.");
}

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

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace heterps::base
