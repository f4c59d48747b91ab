// A fuzz target: one input in, no crash, no leak, no undefined behaviour out. Every target in
// fuzz/ defines LLVMFuzzerTestOneInput; it is built two ways (fuzz/CMakeLists.txt):
// - with libFuzzer (clang, -fsanitize=fuzzer, scripts/fuzz.sh): coverage-guided search;
// - with standalone_main.cc (any compiler; the test suite, and again under ASan/UBSan): its seed
//   corpus in fuzz/corpus/<target>/ and a fixed number of deterministic mutations of each seed.
// A crash found by either becomes a file in the corpus, which the test suite then replays.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heterps::fuzz {

inline absl::string_view Text(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

}  // namespace heterps::fuzz
