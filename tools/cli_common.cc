#include "tools/cli_common.h"

#include <iostream>

namespace heterps::tools {

int Fail(const absl::Status& status) {
  std::cerr << "heterps: error: " << status.message() << "\n";
  return 2;
}

}  // namespace heterps::tools
