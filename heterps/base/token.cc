#include "heterps/base/token.h"

#include <fstream>

#include "absl/strings/escaping.h"

namespace heterps::base {

bool TokensEqual(absl::string_view a, absl::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

absl::StatusOr<std::string> NewToken() {
  std::ifstream random("/dev/urandom", std::ios::binary);
  std::string bytes(32, '\0');
  if (!random.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) {
    return absl::UnavailableError("cannot read /dev/urandom for the job's token");
  }
  return absl::BytesToHexString(bytes);
}

}  // namespace heterps::base
