#include "heterps/base/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "heterps/base/numbers.h"
#include "heterps/base/status_macros.h"

namespace heterps::base {
namespace {

// An error naming the path and errno's reason: a full disk or a read-only file system is
// Unavailable (it may pass), a missing file NotFound, a refused one PermissionDenied.
absl::Status PosixError(const std::string& path, absl::string_view what, int error) {
  const std::string message = absl::StrCat(path, ": ", what, ": ", std::strerror(error));
  switch (error) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
    while (!data.empty()) {
      const ssize_t n = ::write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError(path_, "write failed", errno);
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
    if (::fsync(fd_) != 0) return PosixError(path_, "fsync failed", errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return PosixError(path_, "close failed", errno);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_;
};

// A file opened with O_DIRECT: appends gather in an aligned buffer, written in whole blocks; the
// tail (less than a block) is written without O_DIRECT at Sync or Close.
class PosixDirectWritableFile : public WritableFile {
 public:
  static constexpr size_t kAlign = 4096;
  static constexpr size_t kBufferBytes = 1 << 20;

  PosixDirectWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {
    void* p = nullptr;
    if (::posix_memalign(&p, kAlign, kBufferBytes) == 0) buffer_ = static_cast<char*>(p);
  }
  ~PosixDirectWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
    std::free(buffer_);
  }

  absl::Status Append(absl::string_view data) override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
    if (buffer_ == nullptr) return absl::ResourceExhaustedError(absl::StrCat(path_, ": no buffer"));
    while (!data.empty()) {
      const size_t n = std::min(data.size(), kBufferBytes - used_);
      std::memcpy(buffer_ + used_, data.data(), n);
      used_ += n;
      data.remove_prefix(n);
      if (used_ == kBufferBytes) HETERPS_RETURN_IF_ERROR(Flush());
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
    HETERPS_RETURN_IF_ERROR(Flush());
    if (::fsync(fd_) != 0) return PosixError(path_, "fsync failed", errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
    absl::Status status = Flush();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && status.ok()) status = PosixError(path_, "close failed", errno);
    return status;
  }

 private:
  // Writes the whole blocks buffered with O_DIRECT, the rest (which ends the file: only Sync and
  // Close flush a partial block) without.
  absl::Status Flush() {
    const size_t whole = direct_ ? used_ / kAlign * kAlign : 0;
    HETERPS_RETURN_IF_ERROR(Write(buffer_, whole));
    if (whole < used_) {
      if (direct_) {
        const int flags = ::fcntl(fd_, F_GETFL);
        if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) != 0) {
          return PosixError(path_, "cannot end direct writes", errno);
        }
        direct_ = false;
      }
      HETERPS_RETURN_IF_ERROR(Write(buffer_ + whole, used_ - whole));
    }
    used_ = 0;
    return absl::OkStatus();
  }
  absl::Status Write(const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError(path_, "write failed", errno);
      }
      data += n;
      size -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  std::string path_;
  int fd_;
  char* buffer_ = nullptr;
  size_t used_ = 0;
  bool direct_ = true;
};

class PosixSequentialFile : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixSequentialFile() override { ::close(fd_); }

  absl::StatusOr<size_t> Read(size_t n, char* scratch) override {
    for (;;) {
      const ssize_t got = ::read(fd_, scratch, n);
      if (got >= 0) return static_cast<size_t>(got);
      if (errno != EINTR) return PosixError(path_, "read failed", errno);
    }
  }

 private:
  std::string path_;
  int fd_;
};

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return PosixError(path, "cannot create", errno);
    return std::make_unique<PosixWritableFile>(path, fd);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewLargeWritableFile(
      const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    // File systems without direct I/O (tmpfs) refuse the flag: a buffered file then.
    if (fd < 0 && errno == EINVAL) return NewWritableFile(path);
    if (fd < 0) return PosixError(path, "cannot create", errno);
    return std::make_unique<PosixDirectWritableFile>(path, fd);
  }

  absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
    }
    return std::make_unique<PosixSequentialFile>(path, fd);
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PosixError(to, absl::StrCat("cannot rename ", from, " to it"), errno);
    }
    return absl::OkStatus();
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PosixError(path, "cannot remove", errno);
    return absl::OkStatus();
  }

  absl::Status RemoveAll(const std::string& path) override {
    std::error_code error;
    std::filesystem::remove_all(path, error);
    if (error) return PosixError(path, "cannot remove", error.value());
    return absl::OkStatus();
  }

  absl::Status CreateDirs(const std::string& path) override {
    std::error_code error;
    std::filesystem::create_directories(path, error);
    if (error) return PosixError(path, "cannot create the directory", error.value());
    if (!std::filesystem::is_directory(path, error)) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": not a directory"));
    }
    return absl::OkStatus();
  }

  absl::Status SyncDir(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PosixError(path, "cannot open the directory", errno);
    const int synced = ::fsync(fd);
    const int error = errno;
    ::close(fd);
    // Some file systems do not sync directories (EINVAL): nothing more can be done there.
    if (synced != 0 && error != EINVAL) return PosixError(path, "fsync failed", error);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return PosixError(path, "cannot list", errno);
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(dir);
    return names;
  }

  bool FileExists(const std::string& path) override { return ::access(path.c_str(), F_OK) == 0; }

  bool IsDirectory(const std::string& path) override {
    struct stat s;
    return ::stat(path.c_str(), &s) == 0 && S_ISDIR(s.st_mode);
  }

  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat s;
    if (::stat(path.c_str(), &s) != 0) return PosixError(path, "cannot stat", errno);
    return static_cast<uint64_t>(s.st_size);
  }

  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration duration) override { absl::SleepFor(duration); }
};

std::string Parent(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

Env* DefaultEnv() {
  static PosixEnv* const env = new PosixEnv();
  return env;
}

absl::StatusOr<std::string> ReadFile(Env* env, const std::string& path, size_t max_bytes) {
  if (env->IsDirectory(path)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a directory, not a file"));
  }
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<SequentialFile> file, env->NewSequentialFile(path));
  std::string text;
  std::string chunk(1 << 16, '\0');
  for (;;) {
    HETERPS_ASSIGN_OR_RETURN(const size_t n, file->Read(chunk.size(), chunk.data()));
    if (n == 0) return text;
    if (text.size() + n > max_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(path, ": larger than ",
                                                       WithCommas(static_cast<double>(max_bytes)),
                                                       " bytes, the most this file may hold"));
    }
    text.append(chunk.data(), n);
  }
}

absl::Status WriteFileAtomically(Env* env, const std::string& path, absl::string_view contents) {
  if (env->IsDirectory(path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a directory, cannot write it as a file"));
  }
  const std::string tmp = path + ".tmp";
  auto write = [&]() -> absl::Status {
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env->NewWritableFile(tmp));
    HETERPS_RETURN_IF_ERROR(file->Append(contents));
    HETERPS_RETURN_IF_ERROR(file->Sync());
    HETERPS_RETURN_IF_ERROR(file->Close());
    HETERPS_RETURN_IF_ERROR(env->RenameFile(tmp, path));
    return env->SyncDir(Parent(path));
  };
  absl::Status status = write();
  if (status.ok()) return status;
  env->RemoveFile(tmp).IgnoreError();
  // Named after the file the caller asked for, not the temporary one.
  absl::string_view why = status.message();
  absl::ConsumePrefix(&why, tmp + ": ");
  absl::ConsumePrefix(&why, path + ": ");
  return absl::Status(status.code(), absl::StrCat(path, ": cannot write: ", why));
}

}  // namespace heterps::base
