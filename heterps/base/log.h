// Diagnostic lines for long-running roles (servers, workers): one line each, to
// stderr, prefixed with the UTC time and the role's name. Library code uses
// this, never stdout, which belongs to the command line tool.
//
// Thread safety: lines from concurrent callers never interleave.
#pragma once

#include "absl/strings/string_view.h"

namespace heterps::base {

// Sets the name printed on every line (e.g. "ps-server 1"); "heterps" until
// set.
void SetLogRole(absl::string_view role);

// Writes "<time> <role>: <message>\n" to stderr.
void LogLine(absl::string_view message);

}  // namespace heterps::base
