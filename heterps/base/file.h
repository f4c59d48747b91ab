// Whole-file reads and atomic writes on the operating system's files (DefaultEnv(); env.h has
// the same with an Env, for code whose failures tests inject).
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterps::base {

// Reads a whole file of at most 256 MiB. NotFound (with the path and the system's reason) if it
// cannot be opened; InvalidArgument for a directory; ResourceExhausted over the limit.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// Writes `contents` to `path` atomically (env.h, WriteFileAtomically). On failure the previous
// file, if any, is untouched and the error names the path and the reason.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace heterps::base
