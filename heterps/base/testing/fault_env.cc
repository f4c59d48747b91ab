#include "heterps/base/testing/fault_env.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"

namespace heterps::base::testing {
namespace {

absl::Status FaultError(const std::string& path, absl::string_view what, FaultEnv::Fault fault) {
  switch (fault) {
    case FaultEnv::Fault::kDiskFull:
      return absl::UnavailableError(absl::StrCat(path, ": ", what, ": No space left on device"));
    case FaultEnv::Fault::kIoError:
      return absl::UnavailableError(absl::StrCat(path, ": ", what, ": Input/output error"));
    case FaultEnv::Fault::kCrash:
      return absl::AbortedError(absl::StrCat(path, ": ", what, ": the process died here"));
  }
  return absl::UnknownError("?");
}

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultEnv* env, std::string path, std::unique_ptr<WritableFile> target)
      : env_(env), path_(std::move(path)), target_(std::move(target)) {}

  absl::Status Append(absl::string_view data) override {
    FaultEnv::Fault fault = FaultEnv::Fault::kIoError;
    absl::Status status = env_->Check(path_, "write failed", &fault);
    if (!status.ok()) {
      // A full disk takes what fits: half of this write reaches the file.
      if (fault == FaultEnv::Fault::kDiskFull) {
        target_->Append(data.substr(0, data.size() / 2)).IgnoreError();
      }
      return status;
    }
    return target_->Append(data);
  }
  absl::Status Sync() override {
    HETERPS_RETURN_IF_ERROR(env_->Check(path_, "fsync failed", nullptr));
    return target_->Sync();
  }
  absl::Status Close() override {
    HETERPS_RETURN_IF_ERROR(env_->Check(path_, "close failed", nullptr));
    return target_->Close();
  }

 private:
  FaultEnv* const env_;
  const std::string path_;
  std::unique_ptr<WritableFile> target_;
};

}  // namespace

void FaultEnv::FailOperation(int64_t n, Fault fault) {
  absl::MutexLock lock(&mu_);
  fail_at_ = count_ + n;
  fault_ = fault;
}

void FaultEnv::OnlyPaths(std::string fragment) {
  absl::MutexLock lock(&mu_);
  only_ = std::move(fragment);
}

void FaultEnv::FailPaths(std::string fragment, Fault fault) {
  absl::MutexLock lock(&mu_);
  fail_paths_ = std::move(fragment);
  path_fault_ = fault;
}

void FaultEnv::Reset() {
  absl::MutexLock lock(&mu_);
  count_ = 0;
  fail_at_ = -1;
  only_.clear();
  fail_paths_.clear();
  crashed_ = false;
  fired_ = false;
}

int64_t FaultEnv::operations() const {
  absl::MutexLock lock(&mu_);
  return count_;
}

bool FaultEnv::fired() const {
  absl::MutexLock lock(&mu_);
  return fired_;
}

absl::Status FaultEnv::Check(const std::string& path, absl::string_view what, Fault* fault) {
  absl::MutexLock lock(&mu_);
  if (crashed_) {
    if (fault != nullptr) *fault = Fault::kCrash;
    return FaultError(path, what, Fault::kCrash);
  }
  if (!only_.empty() && !absl::StrContains(path, only_)) return absl::OkStatus();
  if (!fail_paths_.empty() && absl::StrContains(path, fail_paths_)) {
    fired_ = true;
    if (fault != nullptr) *fault = path_fault_;
    return FaultError(path, what, path_fault_);
  }
  const int64_t n = count_++;
  if (n != fail_at_) return absl::OkStatus();
  fired_ = true;
  if (fault_ == Fault::kCrash) crashed_ = true;
  if (fault != nullptr) *fault = fault_;
  return FaultError(path, what, fault_);
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultEnv::NewWritableFile(const std::string& path) {
  HETERPS_RETURN_IF_ERROR(Check(path, "cannot create", nullptr));
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, target()->NewWritableFile(path));
  return std::make_unique<FaultWritableFile>(this, path, std::move(file));
}

absl::StatusOr<std::unique_ptr<WritableFile>> FaultEnv::NewLargeWritableFile(
    const std::string& path) {
  HETERPS_RETURN_IF_ERROR(Check(path, "cannot create", nullptr));
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                           target()->NewLargeWritableFile(path));
  return std::make_unique<FaultWritableFile>(this, path, std::move(file));
}

absl::Status FaultEnv::RenameFile(const std::string& from, const std::string& to) {
  HETERPS_RETURN_IF_ERROR(Check(to, absl::StrCat("cannot rename ", from, " to it"), nullptr));
  return target()->RenameFile(from, to);
}

absl::Status FaultEnv::RemoveFile(const std::string& path) {
  HETERPS_RETURN_IF_ERROR(Check(path, "cannot remove", nullptr));
  return target()->RemoveFile(path);
}

absl::Status FaultEnv::RemoveAll(const std::string& path) {
  HETERPS_RETURN_IF_ERROR(Check(path, "cannot remove", nullptr));
  return target()->RemoveAll(path);
}

absl::Status FaultEnv::CreateDirs(const std::string& path) {
  HETERPS_RETURN_IF_ERROR(Check(path, "cannot create the directory", nullptr));
  return target()->CreateDirs(path);
}

absl::Status FaultEnv::SyncDir(const std::string& path) {
  HETERPS_RETURN_IF_ERROR(Check(path, "fsync failed", nullptr));
  return target()->SyncDir(path);
}

}  // namespace heterps::base::testing
