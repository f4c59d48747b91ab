// Benchmarks keep their own section of docs/benchmarks.md up to date.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace heterps::benchmarks {

// Replaces the text between "<!-- NAME:begin -->" and "<!-- NAME:end -->" in
// the markdown file at `path` with `section` (appending the markers and the
// section if they are missing), writing the file atomically.
absl::Status ReplaceSection(const std::string& path, const std::string& name,
                            const std::string& section);

}  // namespace heterps::benchmarks
