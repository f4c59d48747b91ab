// Whole-file reads and atomic writes.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heterps::base {

// Reads a whole file. NotFound (with the path and the system's reason) if it cannot be opened.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// Writes `contents` to `path` atomically: to "<path>.tmp", flushed, then renamed over `path`. On
// failure the previous file, if any, is untouched and the error names the path and the reason.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

}  // namespace heterps::base
