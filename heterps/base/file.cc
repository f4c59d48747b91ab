#include "absl/strings/string_view.h"
#include "heterps/base/file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace heterps::base {

absl::StatusOr<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return text.str();
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot write: ", std::strerror(errno)));
  }
  bool ok = std::fwrite(contents.data(), 1, contents.size(), f) == contents.size();
  ok = std::fflush(f) == 0 && ok;
  int err = errno;
  ok = std::fclose(f) == 0 && ok;
  if (ok && std::rename(tmp.c_str(), path.c_str()) == 0) return absl::OkStatus();
  if (!ok) err = errno ? errno : err;
  std::remove(tmp.c_str());
  return absl::UnavailableError(absl::StrCat(path, ": write failed: ", std::strerror(err)));
}

}  // namespace heterps::base
