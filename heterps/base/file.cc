#include "heterps/base/file.h"

#include "heterps/base/env.h"

namespace heterps::base {

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  return ReadFile(DefaultEnv(), path);
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  return WriteFileAtomically(DefaultEnv(), path, contents);
}

}  // namespace heterps::base
