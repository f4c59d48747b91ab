// The job's shared secret: every RPC between the processes of a job carries it in the
// kTokenHeader metadata entry, and every server refuses a call without it.
//
// Thread safety: pure functions.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterps::base {

// The metadata entry that carries the token.
inline constexpr char kTokenHeader[] = "x-heterps-token";

// Compares in time that depends only on the lengths, not on where the first difference is.
bool TokensEqual(absl::string_view a, absl::string_view b);

// 32 random bytes from the system's generator, as 64 hex digits. Unavailable if there is no
// generator to read.
absl::StatusOr<std::string> NewToken();

}  // namespace heterps::base
