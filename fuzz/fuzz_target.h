// A fuzz target: one input in, no crash, no leak, no undefined behaviour out. Every target in
// fuzz/ defines LLVMFuzzerTestOneInput; it is built two ways (fuzz/CMakeLists.txt):
// - with libFuzzer (clang, -fsanitize=fuzzer, scripts/fuzz.sh): coverage-guided search;
// - with standalone_main.cc (any compiler; the test suite, and again under ASan/UBSan): its seed
//   corpus in fuzz/corpus/<target>/ and a fixed number of deterministic mutations of each seed.
// A crash found by either becomes a file in the corpus, which the test suite then replays.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace heterps::fuzz {

inline absl::string_view Text(const uint8_t* data, size_t size) {
  return absl::string_view(reinterpret_cast<const char*>(data), size);
}

// A path of this process's own in the temporary directory (<tmp>/heterps_fuzz_<name>.<pid>),
// removed (with whatever is under it) when the process exits.
inline std::string ScratchPath(const std::string& name) {
  static auto* paths = new std::vector<std::string>;
  if (paths->empty()) {
    std::atexit([] {
      for (const std::string& p : *paths) {
        std::error_code ignored;
        std::filesystem::remove_all(p, ignored);
      }
    });
  }
  paths->push_back((std::filesystem::temp_directory_path() /
                    ("heterps_fuzz_" + name + "." + std::to_string(getpid())))
                       .string());
  return paths->back();
}

}  // namespace heterps::fuzz
