#include "heterps/ps/checkpoint.h"

#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/rocksdb_store.h"

namespace heterps::ps {
namespace {

using ::testing::HasSubstr;

struct Tables {
  std::unique_ptr<SparseTable> sparse;
  std::unique_ptr<DenseTable> dense;
  CheckpointTables view() { return {{{0, sparse.get()}}, {{1, dense.get()}}}; }
};

// A sparse table with a memory budget small enough that most rows are on the SSD tier.
Tables Make(const std::string& cold_dir) {
  SparseTableOptions s;
  s.dim = 4;
  s.optimizer.kind = OptimizerKind::kAdam;
  s.memory_budget_bytes = 2000;
  s.lock_shards = 2;
  auto cold = RocksDbColdStore::Open(cold_dir);
  EXPECT_TRUE(cold.ok()) << cold.status();
  DenseTableOptions d;
  d.block_sizes = {7, 3};
  d.optimizer.kind = OptimizerKind::kAdagrad;
  return Tables{std::move(*SparseTable::Create(s, std::move(*cold))),
                std::move(*DenseTable::Create(d))};
}

std::map<uint64_t, std::tuple<std::vector<float>, std::vector<float>, int64_t>> Rows(
    SparseTable& t) {
  std::map<uint64_t, std::tuple<std::vector<float>, std::vector<float>, int64_t>> rows;
  EXPECT_TRUE(t.ForEachRow([&](uint64_t key, const RowData& row) {
                 rows[key] = {row.value, row.state, row.steps};
                 return absl::OkStatus();
               }).ok());
  return rows;
}

void Train(Tables& t) {
  std::mt19937_64 rng(1);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 50; ++step) {
    std::vector<uint64_t> keys(20);
    for (auto& k : keys) k = rng() % 300;
    std::vector<float> g(keys.size() * 4);
    for (float& x : g) x = normal(rng);
    ASSERT_TRUE(t.sparse->Push(keys, g).ok());
    std::vector<float> dg(7);
    for (float& x : dg) x = normal(rng);
    ASSERT_TRUE(t.dense->Push(0, dg).ok());
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  std::string Dir(const std::string& name) {
    std::string dir = ::testing::TempDir() + "/ckpt_test_" + name;
    std::filesystem::remove_all(dir);
    return dir;
  }
};

TEST_F(CheckpointTest, RoundTripIncludingSsdRows) {
  Tables a = Make(Dir("cold_a"));
  Train(a);
  ASSERT_GT(a.sparse->Stats().cold_rows, 50);  // the SSD tier holds part of the table
  const std::string root = Dir("root");
  ASSERT_TRUE(SaveCheckpoint(root, 5, a.view()).ok());
  Tables b = Make(Dir("cold_b"));
  auto step = LoadLatestCheckpoint(root, b.view());
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 5);
  EXPECT_EQ(Rows(*a.sparse), Rows(*b.sparse));
  for (int blk = 0; blk < 2; ++blk) {
    auto da = *a.dense->Read(blk), db = *b.dense->Read(blk);
    EXPECT_EQ(da.value, db.value);
    EXPECT_EQ(da.state, db.state);
    EXPECT_EQ(da.steps, db.steps);
  }
  // A later checkpoint becomes LATEST; the earlier one stays on disk.
  Train(a);
  ASSERT_TRUE(SaveCheckpoint(root, 9, a.view()).ok());
  EXPECT_EQ(*LoadLatestCheckpoint(root, b.view()), 9);
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-5/MANIFEST"));
  // A named step loads that step (a job restores the last one all its shards completed).
  Tables c = Make(Dir("cold_c"));
  ASSERT_EQ(*LoadCheckpoint(root, 5, c.view()), 5);
  EXPECT_NE(Rows(*c.sparse), Rows(*a.sparse));
  EXPECT_EQ(LoadCheckpoint(root, 7, c.view()).status().code(), absl::StatusCode::kNotFound);
  // Pruning keeps the newest.
  Train(a);
  ASSERT_TRUE(SaveCheckpoint(root, 12, a.view()).ok());
  ASSERT_TRUE(PruneCheckpoints(root, 2).ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/ckpt-5"));
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-9/MANIFEST"));
  EXPECT_EQ(*LoadLatestCheckpoint(root, c.view()), 12);
  EXPECT_EQ(Rows(*c.sparse), Rows(*a.sparse));
}

TEST_F(CheckpointTest, CorruptOrTruncatedFilesAreRefusedBeforeAnythingLoads) {
  Tables a = Make(Dir("cold_c"));
  Train(a);
  const std::string root = Dir("root_c");
  ASSERT_TRUE(SaveCheckpoint(root, 3, a.view()).ok());
  const std::string file = root + "/ckpt-3/sparse-0.bin";
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  Tables b = Make(Dir("cold_d"));
  std::vector<uint64_t> key = {12345};
  std::vector<float> v(4);
  ASSERT_TRUE(b.sparse->Pull(key, absl::MakeSpan(v)).ok());  // b holds one row of its own

  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x01;
  std::ofstream(file, std::ios::binary) << flipped;
  auto corrupt = LoadLatestCheckpoint(root, b.view());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(corrupt.status().message()), HasSubstr("checksum mismatch"));

  std::ofstream(file, std::ios::binary) << bytes.substr(0, bytes.size() - 7);
  auto truncated = LoadLatestCheckpoint(root, b.view());
  EXPECT_EQ(truncated.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(truncated.status().message()), HasSubstr("truncated"));

  // Nothing was half-loaded: b still holds exactly its own row.
  auto rows = Rows(*b.sparse);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows.begin()->first, 12345u);
}

TEST_F(CheckpointTest, MismatchedTablesAndMissingCheckpoints) {
  Tables a = Make(Dir("cold_e"));
  const std::string root = Dir("root_e");
  EXPECT_EQ(LoadLatestCheckpoint(root, a.view()).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(SaveCheckpoint(root, 1, a.view()).ok());
  SparseTableOptions other;
  other.dim = 8;
  auto wide = *SparseTable::Create(other, nullptr);
  CheckpointTables mismatch{{{0, wide.get()}}, {{1, a.dense.get()}}};
  auto s = LoadLatestCheckpoint(root, mismatch);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("sparse table 0 of dim 4"));
}

TEST_F(CheckpointTest, UnwritableRootIsAClearErrorAndLatestStays) {
  Tables a = Make(Dir("cold_f"));
  const std::string root = Dir("root_f");
  ASSERT_TRUE(SaveCheckpoint(root, 1, a.view()).ok());
  // A root that is a regular file cannot hold checkpoints.
  const std::string blocked = root + "/LATEST/nested";
  absl::Status s = SaveCheckpoint(blocked, 2, a.view());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(blocked));
  EXPECT_EQ(*LoadLatestCheckpoint(root, a.view()), 1);
}

TEST_F(CheckpointTest, AWriteThatFailsMidwayLeavesThePreviousCheckpoint) {
  Tables a = Make(Dir("cold_g"));
  Train(a);
  const std::string root = Dir("root_g");
  ASSERT_TRUE(SaveCheckpoint(root, 1, a.view()).ok());
  const auto saved = Rows(*a.sparse);
  Train(a);
  // Files may not grow past 4 KiB: the sparse table's file (about 20 KiB) fails part-way, the
  // way a full disk fails a write (with EFBIG here rather than ENOSPC).
  rlimit old;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  rlimit small = old;
  small.rlim_cur = 4096;
  sighandler_t previous = signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  absl::Status s = SaveCheckpoint(root, 2, a.view());
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, previous);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("sparse-0.bin"));
  // No partial directory is left, LATEST still names step 1, and step 1 loads whole.
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::AnyOf("ckpt-1", "LATEST"));
  }
  Tables b = Make(Dir("cold_g2"));
  auto step = LoadLatestCheckpoint(root, b.view());
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(*step, 1);
  EXPECT_EQ(Rows(*b.sparse), saved);
}

}  // namespace
}  // namespace heterps::ps
