// What the data readers' tests share: a directory of their own, synthetic files in it, and every
// batch a reader gives.
//
// Thread safety: one test's thread.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "heterps/data/reader.h"
#include "heterps/data/synthetic.h"

namespace heterps::data::testing {

struct ReadResult {
  std::vector<Batch> batches;
  absl::Status status;  // Open's error, the first Next error, or OK at the end
  ReaderStats stats;    // at the end (empty when Open failed)
};

// Every batch a reader over `options` gives, its final status and its statistics.
inline ReadResult ReadAll(const ReaderOptions& options) {
  ReadResult out;
  absl::StatusOr<std::unique_ptr<BatchReader>> reader = BatchReader::Open(options);
  if (!reader.ok()) {
    out.status = reader.status();
    return out;
  }
  for (;;) {
    Batch b;
    absl::StatusOr<bool> more = (*reader)->Next(&b);
    if (!more.ok() || !*more) {
      out.status = more.status();
      break;
    }
    out.batches.push_back(std::move(b));
  }
  out.stats = (*reader)->stats();
  return out;
}

// A test with a directory of its own, removed after it.
class DataDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("heterps-", ::testing::UnitTest::GetInstance()->current_test_info()->name(),
                        "-", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // `rows` synthetic lines of `schema`'s layout in the file `name` (ids from 500 per slot).
  std::string Synthetic(const std::string& name, const Schema& schema, int64_t rows,
                        uint64_t seed) {
    SyntheticOptions options;
    options.rows = rows;
    options.seed = seed;
    options.vocab = 500;
    options.schema = schema;
    const std::string path = Path(name);
    EXPECT_TRUE(WriteSynthetic(options, path).ok());
    return path;
  }

  std::filesystem::path dir_;
};

}  // namespace heterps::data::testing
