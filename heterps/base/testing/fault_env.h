// An Env that fails on purpose, for tests of code whose failures matter (checkpoints, the job
// directory): every operation that changes the disk is counted, and the test chooses which one
// fails and how.
//
//   base::testing::FaultEnv env(base::DefaultEnv());
//   env.FailOperation(3, FaultEnv::Fault::kDiskFull);   // the 4th change to the disk fails
//   EXPECT_FALSE(SaveCheckpoint(&env, root, 2, tables).ok());
//   ... the previous checkpoint still loads ...
//
// Faults: kDiskFull (ENOSPC: an append writes half of its bytes, then fails: a torn write),
// kIoError (the operation does nothing and fails), kCrash (the operation and every one after it
// fail, as if the process had died there: nothing more reaches the disk).
//
// Thread safety: as the Env it wraps; the fault settings are guarded by a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "heterps/base/env.h"

namespace heterps::base::testing {

class FaultEnv : public EnvWrapper {
 public:
  enum class Fault { kDiskFull, kIoError, kCrash };

  explicit FaultEnv(Env* target) : EnvWrapper(target) {}

  // Operation number `n` (0-based, counting from now on: creating a file, appending, syncing,
  // closing, renaming, removing, creating a directory, syncing a directory) fails with `fault`.
  void FailOperation(int64_t n, Fault fault);
  // Only operations on paths containing `fragment` count and may fail (default: every path).
  void OnlyPaths(std::string fragment);
  // Every operation whose path contains `fragment` fails with `fault` (e.g. every rename into
  // place), until Reset.
  void FailPaths(std::string fragment, Fault fault);
  // No faults; the count restarts at 0.
  void Reset();
  // Operations counted since the last Reset (or construction).
  int64_t operations() const;
  // Whether a fault has fired.
  bool fired() const;

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewLargeWritableFile(
      const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RemoveAll(const std::string& path) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::Status SyncDir(const std::string& path) override;

  // What the next operation on `path` meets: OK, or the fault's error. Counts the operation.
  // (Used by the file objects this Env hands out.)
  absl::Status Check(const std::string& path, absl::string_view what, Fault* fault);

 private:
  mutable absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t fail_at_ ABSL_GUARDED_BY(mu_) = -1;
  Fault fault_ ABSL_GUARDED_BY(mu_) = Fault::kIoError;
  std::string only_ ABSL_GUARDED_BY(mu_);
  std::string fail_paths_ ABSL_GUARDED_BY(mu_);
  Fault path_fault_ ABSL_GUARDED_BY(mu_) = Fault::kIoError;
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace heterps::base::testing
