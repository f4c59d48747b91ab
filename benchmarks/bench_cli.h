// What the benchmark drivers share on their command lines: "--name value" flags, and failing
// with one line.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace heterps::benchmarks {

// Reads argv as "--name value" pairs, calling set(name, value) for each; set returns false for a
// name it does not know. A missing value or an unknown name prints "<program>: ..." and exits 2.
void ParseFlagPairs(const char* program, int argc, char** argv,
                    const std::function<bool(const std::string&, const char*)>& set);

// Unless `status` is OK, prints "<program>: <what>: <message>" and exits 1.
void CheckOk(const char* program, const absl::Status& status, const char* what);

template <typename T>
T CheckOk(const char* program, absl::StatusOr<T> value, const char* what) {
  CheckOk(program, value.status(), what);
  return *std::move(value);
}

}  // namespace heterps::benchmarks
