// What every heterps subcommand shares.
#pragma once

#include "absl/status/status.h"

namespace heterps::tools {

// Prints "heterps: error: <message>" (one line, to stderr) and returns 2, the
// exit code of bad input and failed set-up.
int Fail(const absl::Status& status);

}  // namespace heterps::tools
