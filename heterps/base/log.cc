#include "heterps/base/log.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace heterps::base {
namespace {

absl::Mutex& LogMutex() {
  static absl::Mutex mu(absl::kConstInit);
  return mu;
}

std::string& Role() {
  static std::string* role = new std::string("heterps");
  return *role;
}

}  // namespace

void SetLogRole(absl::string_view role) {
  absl::MutexLock lock(&LogMutex());
  Role() = std::string(role);
}

void LogLine(absl::string_view message) {
  const std::string time =
      absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone());
  absl::MutexLock lock(&LogMutex());
  const std::string line = absl::StrCat(time, " ", Role(), ": ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace heterps::base
