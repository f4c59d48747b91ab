// The operating system as heterps code sees it: files, directories and the clock, behind one
// interface (leveldb's Env), so that code whose failures matter (checkpoints, the job directory)
// can be tested against a full disk, a failed rename or a torn write (base/testing/fault_env.h).
//
//   base::Env* env = base::DefaultEnv();
//   HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(env, dir + "/checkpoint.json", text));
//   HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, path, 1 << 20));
//
// Every error names the path and the system's reason. Code that writes files takes an Env* from
// its caller (an options field defaulting to DefaultEnv()); nothing reaches for a global.
//
// Thread safety: DefaultEnv() and every Env may be used from several threads at once; a file
// object is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace heterps::base {

// A file being written, front to back.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes what was appended durable (fsync).
  virtual absl::Status Sync() = 0;
  // Flushes and closes; further calls are errors. The destructor closes silently.
  virtual absl::Status Close() = 0;
};

// A file being read, front to back.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads up to `n` bytes into `scratch`; the bytes read, 0 at the end of the file.
  virtual absl::StatusOr<size_t> Read(size_t n, char* scratch) = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // Creates or truncates `path`.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // The same for a large file written once, front to back, in large appends and synced at the
  // end (a checkpoint's): where the file system allows, its whole blocks bypass the page cache
  // (O_DIRECT), which writes several times faster than buffered writes and a final fsync, and
  // leaves the page cache to the tables. The same contract as NewWritableFile; by default it is
  // NewWritableFile.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewLargeWritableFile(
      const std::string& path) {
    return NewWritableFile(path);
  }
  // NotFound when `path` cannot be opened.
  virtual absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) = 0;
  // Renames `from` over `to`, atomically (rename(2)): a file replaces a file, a directory an
  // empty directory or nothing.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Removes a file; NotFound when there is none.
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // Removes a directory tree (or a file); OK when there is nothing.
  virtual absl::Status RemoveAll(const std::string& path) = 0;
  // Creates a directory and its parents; OK when it exists.
  virtual absl::Status CreateDirs(const std::string& path) = 0;
  // Makes the entries of directory `path` durable (fsync on the directory): after a rename, the
  // new name survives a crash.
  virtual absl::Status SyncDir(const std::string& path) = 0;
  // The names (not paths) in a directory, in no order; NotFound when it does not exist.
  virtual absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) = 0;
  virtual bool FileExists(const std::string& path) = 0;
  virtual bool IsDirectory(const std::string& path) = 0;
  // The size of a file in bytes.
  virtual absl::StatusOr<uint64_t> FileSize(const std::string& path) = 0;

  virtual absl::Time Now() = 0;
  virtual void SleepFor(absl::Duration duration) = 0;
};

// An Env that passes every call to another (leveldb's EnvWrapper): a subclass overrides only what
// it changes (base/testing/fault_env.h fails the writes, and reads through). `target` must
// outlive the wrapper.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return target_->NewWritableFile(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewLargeWritableFile(
      const std::string& path) override {
    return target_->NewLargeWritableFile(path);
  }
  absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
      const std::string& path) override {
    return target_->NewSequentialFile(path);
  }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  absl::Status RemoveFile(const std::string& path) override { return target_->RemoveFile(path); }
  absl::Status RemoveAll(const std::string& path) override { return target_->RemoveAll(path); }
  absl::Status CreateDirs(const std::string& path) override { return target_->CreateDirs(path); }
  absl::Status SyncDir(const std::string& path) override { return target_->SyncDir(path); }
  absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) override {
    return target_->ListDir(path);
  }
  bool FileExists(const std::string& path) override { return target_->FileExists(path); }
  bool IsDirectory(const std::string& path) override { return target_->IsDirectory(path); }
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    return target_->FileSize(path);
  }
  absl::Time Now() override { return target_->Now(); }
  void SleepFor(absl::Duration duration) override { target_->SleepFor(duration); }

 private:
  Env* const target_;
};

// The operating system itself (POSIX). Lives for the whole process.
Env* DefaultEnv();

// Reads a whole file, refusing one over `max_bytes` (ResourceExhausted naming the file and the
// limit: a spec read from /dev/zero is an error, not an exhausted memory) and one that is a
// directory (InvalidArgument). NotFound when it cannot be opened.
absl::StatusOr<std::string> ReadFile(Env* env, const std::string& path,
                                     size_t max_bytes = size_t{256} << 20);

// Writes `contents` to `path` so that a reader finds either the old file or the new one whole:
// to "<path>.tmp", synced, renamed over `path`, the directory synced. On failure the previous
// file is untouched, the temporary one removed, and the error names `path` and the reason.
absl::Status WriteFileAtomically(Env* env, const std::string& path, absl::string_view contents);

}  // namespace heterps::base
