#include "benchmarks/bench_cli.h"

namespace heterps::benchmarks {

void ParseFlagPairs(const char* program, int argc, char** argv,
                    const std::function<bool(const std::string&, const char*)>& set) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", program, flag.c_str());
      std::exit(2);
    }
    if (!set(flag, argv[++i])) {
      std::fprintf(stderr, "%s: unknown flag %s\n", program, flag.c_str());
      std::exit(2);
    }
  }
}

void CheckOk(const char* program, const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "%s: %s: %s\n", program, what, std::string(status.message()).c_str());
  std::exit(1);
}

}  // namespace heterps::benchmarks
