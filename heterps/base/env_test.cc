#include "heterps/base/env.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/testing/fault_env.h"

namespace heterps::base {
namespace {

using testing::FaultEnv;
using ::testing::HasSubstr;

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/env_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(EnvTest, AtomicWriteReplacesAndReadsBack) {
  const std::string path = Dir("write") + "/f.txt";
  Env* env = DefaultEnv();
  ASSERT_TRUE(WriteFileAtomically(env, path, "one").ok());
  ASSERT_TRUE(WriteFileAtomically(env, path, "two").ok());
  EXPECT_EQ(*ReadFile(env, path), "two");
  EXPECT_FALSE(env->FileExists(path + ".tmp"));
  EXPECT_EQ(*env->FileSize(path), 3u);
}

// Large files (direct I/O where the file system has it): every size, every split into appends,
// a sync in the middle, read back byte for byte.
TEST(EnvTest, LargeFilesHoldWhatWasAppended) {
  const std::string dir = Dir("large");
  Env* env = DefaultEnv();
  std::mt19937_64 rng(5);
  for (const size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{4097},
                            size_t{(1 << 20) - 1}, size_t{1 << 20}, size_t{(3 << 20) + 4099}}) {
    SCOPED_TRACE(size);
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const std::string path = dir + "/f" + std::to_string(size);
    auto file = env->NewLargeWritableFile(path);
    ASSERT_TRUE(file.ok()) << file.status();
    size_t at = 0;
    while (at < size) {
      const size_t n = std::min<size_t>(size - at, 1 + rng() % 300000);
      ASSERT_TRUE((*file)->Append(absl::string_view(bytes).substr(at, n)).ok());
      at += n;
    }
    ASSERT_TRUE((*file)->Sync().ok());
    ASSERT_TRUE((*file)->Append("tail").ok());  // after a sync, appends go on
    ASSERT_TRUE((*file)->Close().ok());
    EXPECT_FALSE((*file)->Append("x").ok());
    auto read = ReadFile(env, path, 8 << 20);
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_TRUE(*read == bytes + "tail");
  }
  EXPECT_THAT(std::string(env->NewLargeWritableFile(dir + "/no/such/dir/f").status().message()),
              HasSubstr("/no/such/dir/f: cannot create"));
}

TEST(EnvTest, ReadsAreBoundedAndNameTheFile) {
  const std::string dir = Dir("read");
  Env* env = DefaultEnv();
  ASSERT_TRUE(WriteFileAtomically(env, dir + "/big", std::string(1000, 'x')).ok());
  auto big = ReadFile(env, dir + "/big", 999);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr(dir + "/big"));
  EXPECT_EQ(ReadFile(env, dir + "/missing").status().code(), absl::StatusCode::kNotFound);
  auto directory = ReadFile(env, dir);
  EXPECT_EQ(directory.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(directory.status().message(), HasSubstr("directory"));
  // /dev/zero never ends: the limit stops it.
  EXPECT_EQ(ReadFile(env, "/dev/zero", 1 << 20).status().code(),
            absl::StatusCode::kResourceExhausted);
}

// Every operation of an atomic write failed in turn, by each kind of fault: the old contents stay
// readable whole, no temporary file is left but by a crash, and the error names the file.
TEST(EnvTest, EveryFaultOfAnAtomicWriteKeepsTheOldFile) {
  const std::string path = Dir("faults") + "/record.json";
  FaultEnv env(DefaultEnv());
  ASSERT_TRUE(WriteFileAtomically(&env, path, "old contents").ok());
  const int64_t operations = env.operations();
  env.Reset();
  ASSERT_TRUE(WriteFileAtomically(&env, path, "old contents").ok());
  ASSERT_EQ(env.operations(), operations);
  ASSERT_GE(operations, 5);  // create, append, sync, close, rename (and the directory's sync)
  for (FaultEnv::Fault fault :
       {FaultEnv::Fault::kDiskFull, FaultEnv::Fault::kIoError, FaultEnv::Fault::kCrash}) {
    for (int64_t n = 0; n < operations; ++n) {
      env.Reset();
      env.FailOperation(n, fault);
      const absl::Status status = WriteFileAtomically(&env, path, "new contents, longer");
      ASSERT_TRUE(env.fired()) << n;
      const std::string now = *ReadFile(DefaultEnv(), path);
      // Failing after the rename (the directory's sync) leaves the new file, whole.
      EXPECT_TRUE(now == "old contents" || now == "new contents, longer") << n << ": " << now;
      if (now == "old contents") {
        EXPECT_FALSE(status.ok()) << n;
        EXPECT_THAT(status.message(), HasSubstr(path)) << n;
      }
      ASSERT_TRUE(WriteFileAtomically(DefaultEnv(), path, "old contents").ok());
    }
  }
}

TEST(EnvTest, FailPathsHitsOnlyThosePaths) {
  const std::string dir = Dir("paths");
  FaultEnv env(DefaultEnv());
  env.FailPaths("blocked", FaultEnv::Fault::kDiskFull);
  EXPECT_TRUE(WriteFileAtomically(&env, dir + "/fine", "x").ok());
  const absl::Status status = WriteFileAtomically(&env, dir + "/blocked", "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(status.message(), HasSubstr("No space left on device"));
  EXPECT_FALSE(env.FileExists(dir + "/blocked"));
}

TEST(EnvTest, ListAndRemove) {
  const std::string dir = Dir("list");
  Env* env = DefaultEnv();
  ASSERT_TRUE(env->CreateDirs(dir + "/a/b").ok());
  ASSERT_TRUE(WriteFileAtomically(env, dir + "/a/f", "x").ok());
  auto names = env->ListDir(dir + "/a");
  ASSERT_TRUE(names.ok());
  EXPECT_THAT(*names, ::testing::UnorderedElementsAre("b", "f"));
  ASSERT_TRUE(env->RemoveAll(dir + "/a").ok());
  EXPECT_FALSE(env->FileExists(dir + "/a"));
  EXPECT_TRUE(env->RemoveAll(dir + "/a").ok());
  EXPECT_EQ(env->RemoveFile(dir + "/nothing").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace heterps::base
