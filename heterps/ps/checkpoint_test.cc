#include "heterps/ps/checkpoint.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/testing/fault_env.h"
#include "heterps/ps/key_plan.h"
#include "heterps/ps/ps_client.h"
#include "heterps/ps/rocksdb_store.h"
#include "nlohmann/json.hpp"

namespace heterps::ps {
namespace {

using base::testing::FaultEnv;
using ::testing::HasSubstr;

base::Env* const env = base::DefaultEnv();

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
  ASSERT_TRUE(SaveCheckpoint(env, root, 5, a.view()).ok());
  Tables b = Make(Dir("cold_b"));
  auto step = LoadLatestCheckpoint(env, root, b.view());
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
  ASSERT_TRUE(SaveCheckpoint(env, root, 9, a.view()).ok());
  EXPECT_EQ(*LoadLatestCheckpoint(env, root, b.view()), 9);
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-5/MANIFEST"));
  // A named step loads that step (a job restores the last one all its shards completed).
  Tables c = Make(Dir("cold_c"));
  ASSERT_EQ(*LoadCheckpoint(env, root, 5, c.view()), 5);
  EXPECT_NE(Rows(*c.sparse), Rows(*a.sparse));
  EXPECT_EQ(LoadCheckpoint(env, root, 7, c.view()).status().code(), absl::StatusCode::kNotFound);
  // Pruning keeps the newest.
  Train(a);
  ASSERT_TRUE(SaveCheckpoint(env, root, 12, a.view()).ok());
  ASSERT_TRUE(PruneCheckpoints(env, root, 2).ok());
  EXPECT_FALSE(std::filesystem::exists(root + "/ckpt-5"));
  EXPECT_TRUE(std::filesystem::exists(root + "/ckpt-9/MANIFEST"));
  EXPECT_EQ(*LoadLatestCheckpoint(env, root, c.view()), 12);
  EXPECT_EQ(Rows(*c.sparse), Rows(*a.sparse));
}

TEST_F(CheckpointTest, CorruptOrTruncatedFilesAreRefusedBeforeAnythingLoads) {
  Tables a = Make(Dir("cold_c"));
  Train(a);
  const std::string root = Dir("root_c");
  ASSERT_TRUE(SaveCheckpoint(env, root, 3, a.view()).ok());
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
  auto corrupt = LoadLatestCheckpoint(env, root, b.view());
  EXPECT_EQ(corrupt.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(corrupt.status().message()), HasSubstr("checksum mismatch"));

  std::ofstream(file, std::ios::binary) << bytes.substr(0, bytes.size() - 7);
  auto truncated = LoadLatestCheckpoint(env, root, b.view());
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
  EXPECT_EQ(LoadLatestCheckpoint(env, root, a.view()).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(SaveCheckpoint(env, root, 1, a.view()).ok());
  SparseTableOptions other;
  other.dim = 8;
  auto wide = *SparseTable::Create(other, nullptr);
  CheckpointTables mismatch{{{0, wide.get()}}, {{1, a.dense.get()}}};
  auto s = LoadLatestCheckpoint(env, root, mismatch);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("sparse table 0 of dim 4"));
}

TEST_F(CheckpointTest, UnwritableRootIsAClearErrorAndLatestStays) {
  Tables a = Make(Dir("cold_f"));
  const std::string root = Dir("root_f");
  ASSERT_TRUE(SaveCheckpoint(env, root, 1, a.view()).ok());
  // A root that is a regular file cannot hold checkpoints.
  const std::string blocked = root + "/LATEST/nested";
  absl::Status s = SaveCheckpoint(env, blocked, 2, a.view());
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(blocked));
  EXPECT_EQ(*LoadLatestCheckpoint(env, root, a.view()), 1);
}

// Every operation a checkpoint makes on the disk, failed in turn by a full disk (a torn write),
// an I/O error and a crash: the save fails or lands whole, and the newest checkpoint that
// LATEST names loads whole.
TEST_F(CheckpointTest, EveryFaultOfASaveLeavesALoadableCheckpoint) {
  Tables once = Make(Dir("cold_g1"));
  Train(once);
  const auto first = Rows(*once.sparse);
  Tables twice = Make(Dir("cold_g2"));
  Train(twice);
  Train(twice);
  const auto second = Rows(*twice.sparse);
  const std::string root = Dir("root_g");
  FaultEnv faults(env);
  ASSERT_TRUE(SaveCheckpoint(&faults, root, 2, twice.view()).ok());
  const int64_t operations = faults.operations();
  ASSERT_GE(operations, 12);
  for (FaultEnv::Fault fault :
       {FaultEnv::Fault::kDiskFull, FaultEnv::Fault::kIoError, FaultEnv::Fault::kCrash}) {
    for (int64_t n = 0; n < operations; ++n) {
      ASSERT_TRUE(env->RemoveAll(root).ok());
      ASSERT_TRUE(SaveCheckpoint(env, root, 1, once.view()).ok());
      faults.Reset();
      faults.FailOperation(n, fault);
      const absl::Status saved = SaveCheckpoint(&faults, root, 2, twice.view());
      ASSERT_TRUE(faults.fired()) << n;
      Tables loaded = Make(Dir("cold_g3"));
      auto step = LoadLatestCheckpoint(env, root, loaded.view());
      ASSERT_TRUE(step.ok()) << "fault " << static_cast<int>(fault) << " at operation " << n << ": "
                             << step.status();
      if (*step == 2) {
        EXPECT_EQ(Rows(*loaded.sparse), second) << n;
      } else {
        ASSERT_EQ(*step, 1) << n;
        EXPECT_EQ(Rows(*loaded.sparse), first) << n;
        EXPECT_FALSE(saved.ok()) << n;
        EXPECT_THAT(std::string(saved.message()), HasSubstr(root)) << n;
      }
      // A failure cleans up after itself (a crash cannot: the next save replaces what it left).
      if (!saved.ok() && fault != FaultEnv::Fault::kCrash) {
        const std::vector<std::string> names =
            env->ListDir(root).value_or(std::vector<std::string>());
        for (const std::string& name : names) {
          EXPECT_THAT(name, ::testing::AnyOf("ckpt-1", "ckpt-2", "LATEST")) << n;
        }
      }
    }
  }
}

// A job's tables on `n` shards: sparse table 0 on every shard (keys by ServerOf), dense tables
// 1 and 2 on shard id % n, as the clients place them.
struct Sharded {
  std::vector<std::unique_ptr<SparseTable>> sparse;
  std::vector<std::unique_ptr<DenseTable>> dense;  // by id - 1
  int n = 0;

  CheckpointTables view(int shard) {
    CheckpointTables t;
    t.sparse[0] = sparse[shard].get();
    for (int id = 1; id <= 2; ++id) {
      if (id % n == shard) t.dense[id] = dense[id - 1].get();
    }
    return t;
  }
  uint64_t Digest() {
    uint64_t sum = 0;
    for (int s = 0; s < n; ++s) sum += *DigestTables(view(s));
    return sum;
  }
};

// `ssd`: a memory budget small enough that most rows are on the RocksDB tier.
Sharded MakeSharded(int n, const std::string& cold_root, bool ssd) {
  Sharded out;
  out.n = n;
  std::filesystem::create_directories(cold_root);
  for (int s = 0; s < n; ++s) {
    SparseTableOptions o;
    o.dim = 4;
    o.optimizer.kind = OptimizerKind::kAdagrad;
    o.lock_shards = 2;
    std::unique_ptr<ColdStore> cold;
    if (ssd) {
      o.memory_budget_bytes = 1500;
      auto opened = RocksDbColdStore::Open(cold_root + "/shard-" + std::to_string(s));
      EXPECT_TRUE(opened.ok()) << opened.status();
      cold = std::move(*opened);
    }
    out.sparse.push_back(std::move(*SparseTable::Create(o, std::move(cold))));
  }
  for (int id = 1; id <= 2; ++id) {
    DenseTableOptions d;
    d.block_sizes = {5, static_cast<int64_t>(id)};
    out.dense.push_back(std::move(*DenseTable::Create(d)));
  }
  return out;
}

TEST_F(CheckpointTest, ReshardingKeepsEveryParameter) {
  for (bool ssd : {false, true}) {
    SCOPED_TRACE(ssd ? "with the SSD tier" : "in memory");
    const std::string base = Dir(ssd ? "reshard_ssd" : "reshard_mem");
    Sharded two = MakeSharded(2, base + "/cold2", ssd);
    std::mt19937_64 rng(3);
    std::normal_distribution<float> normal;
    for (int step = 0; step < 40; ++step) {
      std::vector<uint64_t> keys(25);
      for (auto& k : keys) k = rng() % 400;
      const KeyPlan plan = PlanKeys(keys, 2);
      for (int s = 0; s < 2; ++s) {
        std::vector<float> g(plan.keys[s].size() * 4);
        for (float& x : g) x = normal(rng);
        ASSERT_TRUE(two.sparse[s]->Push(plan.keys[s], g).ok());
      }
      for (int id = 1; id <= 2; ++id) {
        std::vector<float> g(5);
        for (float& x : g) x = normal(rng);
        ASSERT_TRUE(two.dense[id - 1]->Push(0, g).ok());
      }
    }
    if (ssd) {
      ASSERT_GT(two.sparse[0]->Stats().cold_rows, 20);
    }
    const uint64_t digest = two.Digest();
    std::vector<std::string> roots2 = {base + "/ps2-0", base + "/ps2-1"};
    for (int s = 0; s < 2; ++s) {
      ASSERT_TRUE(SaveCheckpoint(env, roots2[s], 40, two.view(s), {"j1", s, 2}).ok());
    }

    // 2 -> 3: every new shard takes its keys from both old ones.
    Sharded three = MakeSharded(3, base + "/cold3", ssd);
    std::vector<std::string> roots3;
    size_t rows = 0;
    for (int s = 0; s < 3; ++s) {
      auto step = LoadCheckpointResharded(env, roots2, 40, {"j1", s, 3}, three.view(s));
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_EQ(*step, 40);
      for (const auto& [key, row] : Rows(*three.sparse[s])) {
        EXPECT_EQ(ServerOf(key, 3), s) << key;
        ++rows;
      }
      roots3.push_back(base + "/ps3-" + std::to_string(s));
      ASSERT_TRUE(SaveCheckpoint(env, roots3.back(), 40, three.view(s), {"j1", s, 3}).ok());
    }
    EXPECT_EQ(rows, Rows(*two.sparse[0]).size() + Rows(*two.sparse[1]).size());
    EXPECT_EQ(three.Digest(), digest);

    // 3 -> 2: each shard holds exactly what it held.
    Sharded back = MakeSharded(2, base + "/cold_back", ssd);
    for (int s = 0; s < 2; ++s) {
      ASSERT_TRUE(LoadCheckpointResharded(env, roots3, 40, {"j1", s, 2}, back.view(s)).ok());
      EXPECT_EQ(Rows(*back.sparse[s]), Rows(*two.sparse[s]));
    }
    EXPECT_EQ(back.Digest(), digest);

    // A source of another step, or a missing one, is refused before anything loads.
    Sharded other = MakeSharded(2, base + "/cold_other", ssd);
    ASSERT_TRUE(SaveCheckpoint(env, roots3[1], 41, three.view(1), {"j1", 1, 3}).ok());
    std::filesystem::rename(roots3[1] + "/ckpt-40", roots3[1] + "/moved");
    auto missing = LoadCheckpointResharded(env, roots3, 40, {"j1", 0, 2}, other.view(0));
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no checkpoint of step 40"));
    std::filesystem::rename(roots3[1] + "/ckpt-41", roots3[1] + "/ckpt-40");
    auto mixed = LoadCheckpointResharded(env, roots3, 40, {"j1", 0, 2}, other.view(0));
    EXPECT_EQ(mixed.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(mixed.status().message()), HasSubstr("step 41"));
    EXPECT_TRUE(Rows(*other.sparse[0]).empty());
  }
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Rewrites the MANIFEST of `dir` through `edit`.
void EditManifest(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json m = nlohmann::json::parse(ReadAll(dir + "/MANIFEST"));
  edit(m);
  WriteAll(dir + "/MANIFEST", m.dump(2));
}

// What a tracked table would send next (every tracked row's delta, the dense blocks'), with its
// bases left in place.
std::pair<std::vector<uint64_t>, std::vector<float>> NextWindow(Tables& t) {
  std::vector<uint64_t> keys;
  std::vector<float> deltas;
  EXPECT_TRUE(t.sparse->ExportWindow(0, &keys, &deltas).ok());
  for (int blk = 0; blk < t.dense->num_blocks(); ++blk) {
    std::vector<float> delta;
    EXPECT_TRUE(t.dense->ExportWindow(blk, 0, &delta).ok());
    keys.push_back(delta.empty() ? 0 : 1);  // whether block blk is tracked
    deltas.insert(deltas.end(), delta.begin(), delta.end());
  }
  return {keys, deltas};
}

TEST_F(CheckpointTest, ATrackedTableKeepsItsBases) {
  Tables a = Make(Dir("bases_cold_a"));
  a.sparse->TrackDeltas();
  a.dense->TrackDeltas();
  Train(a);
  // Some rows sent (their bases moved on), the rest kept as residuals; then more changes.
  std::vector<uint64_t> keys;
  std::vector<float> deltas;
  ASSERT_TRUE(a.sparse->ExportDeltas(0.5f, &keys, &deltas).ok());
  ASSERT_FALSE(keys.empty());
  ASSERT_GT(a.sparse->tracked_rows(), 0);  // the rows below the threshold
  Train(a);
  ASSERT_GT(a.sparse->Stats().cold_rows, 50);
  const int64_t tracked = a.sparse->tracked_rows();
  ASSERT_GT(tracked, 0);
  const auto next = NextWindow(a);
  const std::string root = Dir("bases_root");
  ASSERT_TRUE(SaveCheckpoint(env, root, 3, a.view()).ok());
  const std::string manifest = ReadAll(root + "/ckpt-3/MANIFEST");
  EXPECT_THAT(manifest, HasSubstr("\"sparse-bases\""));
  EXPECT_THAT(manifest, HasSubstr("\"dense-bases\""));

  // Loaded into untracked tables: tracking on, the same bases, the same next window.
  Tables b = Make(Dir("bases_cold_b"));
  ASSERT_TRUE(LoadLatestCheckpoint(env, root, b.view()).ok());
  EXPECT_TRUE(b.sparse->tracking_deltas());
  EXPECT_TRUE(b.dense->tracking_deltas());
  EXPECT_EQ(b.sparse->tracked_rows(), tracked);
  EXPECT_EQ(NextWindow(b), next);
  EXPECT_EQ(Rows(*a.sparse), Rows(*b.sparse));

  // Into tracked tables that track other rows: exactly the checkpoint's bases.
  Tables c = Make(Dir("bases_cold_c"));
  c.sparse->TrackDeltas();
  c.dense->TrackDeltas();
  Train(c);
  Train(c);
  ASSERT_TRUE(LoadLatestCheckpoint(env, root, c.view()).ok());
  EXPECT_EQ(c.sparse->tracked_rows(), tracked);
  EXPECT_EQ(NextWindow(c), next);

  // An untracked table's checkpoint has no bases; a damaged bases file is refused before
  // anything loads.
  Tables d = Make(Dir("bases_cold_d"));
  Train(d);
  const std::string plain = Dir("bases_plain");
  ASSERT_TRUE(SaveCheckpoint(env, plain, 1, d.view()).ok());
  EXPECT_THAT(ReadAll(plain + "/ckpt-1/MANIFEST"), ::testing::Not(HasSubstr("bases")));
  std::string bytes = ReadAll(root + "/ckpt-3/sparse-0.bases");
  bytes[bytes.size() / 2] ^= 1;
  WriteAll(root + "/ckpt-3/sparse-0.bases", bytes);
  Tables e = Make(Dir("bases_cold_e"));
  const auto loaded = LoadLatestCheckpoint(env, root, e.view());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("sparse-0.bases"));
  EXPECT_TRUE(Rows(*e.sparse).empty());
  EXPECT_FALSE(e.sparse->tracking_deltas());
}

TEST_F(CheckpointTest, ASaveKilledPartWayLeavesNothingBehindTheNextSave) {
  Tables a = Make(Dir("cold_tmp"));
  const std::string root = Dir("tmp_left");
  std::filesystem::create_directories(root + "/.ckpt-50.tmp-12345");
  std::ofstream(root + "/.ckpt-50.tmp-12345/sparse-0.bin") << "half";
  ASSERT_TRUE(SaveCheckpoint(env, root, 60, a.view()).ok());
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    names.push_back(e.path().filename().string());
  }
  EXPECT_THAT(names, ::testing::UnorderedElementsAre("ckpt-60", "LATEST"));
}

TEST_F(CheckpointTest, ACheckpointIsLoadedOnlyAsWhatItIs) {
  Tables a = Make(Dir("cold_id"));
  Train(a);
  const std::string base = Dir("identity");
  const std::string r2 = base + "/ps-2", r3 = base + "/ps-3";
  ASSERT_TRUE(SaveCheckpoint(env, r2, 15, a.view(), {"jobA", 2, 4}).ok());
  ASSERT_TRUE(SaveCheckpoint(env, r3, 15, a.view(), {"jobA", 3, 4}).ok());
  Tables b = Make(Dir("cold_id_b"));
  ASSERT_TRUE(LoadCheckpoint(env, r2, 15, b.view(), {"jobA", 2, 4}).ok());
  EXPECT_EQ(Rows(*b.sparse), Rows(*a.sparse));

  // Swapped shards, another job's, another shard count, no job at all: refused.
  std::filesystem::rename(r2 + "/ckpt-15", base + "/swap");
  std::filesystem::rename(r3 + "/ckpt-15", r2 + "/ckpt-15");
  auto swapped = LoadCheckpoint(env, r2, 15, b.view(), {"jobA", 2, 4});
  EXPECT_EQ(swapped.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(swapped.status().message()),
              HasSubstr("the checkpoint of job jobA, shard 3 of 4, not of job jobA, shard 2 of 4"));
  std::filesystem::rename(r2 + "/ckpt-15", r3 + "/ckpt-15");
  std::filesystem::rename(base + "/swap", r2 + "/ckpt-15");
  for (const CheckpointId& wrong :
       {CheckpointId{"jobB", 2, 4}, CheckpointId{"jobA", 2, 5}, CheckpointId{}}) {
    auto s = LoadCheckpoint(env, r2, 15, b.view(), wrong);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << wrong.job;
  }
  EXPECT_TRUE(LoadCheckpoint(env, r2, 15, b.view(), {"jobA", 2, 4}).ok());

  // A MANIFEST whose step is not its directory's: an error, not step 15's parameters as step 3.
  EditManifest(r2 + "/ckpt-15", [](nlohmann::json& m) { m["step"] = 3; });
  auto relabelled = LoadCheckpoint(env, r2, 15, b.view(), {"jobA", 2, 4});
  EXPECT_EQ(relabelled.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(relabelled.status().message()),
              HasSubstr("step 3, but this is the checkpoint of step 15"));

  // Wrong types and names outside the directory: one clear error each, nothing followed.
  std::filesystem::create_directories(base + "/evil");
  WriteAll(base + "/x.bin", ReadAll(r2 + "/ckpt-15/sparse-0.bin"));
  const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> edits = {
      {[](nlohmann::json& m) { m["step"] = "ten"; }, "step"},
      {[](nlohmann::json& m) { m["files"][0]["file"] = "../../x.bin"; }, "not a plain file name"},
      {[](nlohmann::json& m) { m["files"][0]["file"] = "/etc/passwd"; }, "not a plain file name"},
      {[](nlohmann::json& m) { m["files"][0]["bytes"] = -1; }, "bytes"},
      {[](nlohmann::json& m) { m["shard"] = 9; }, "shard"},
      {[](nlohmann::json& m) { m["files"] = 7; }, "files"},
      {[](nlohmann::json& m) { m["format"] = nullptr; }, "format"},
  };
  const std::string good = ReadAll(r3 + "/ckpt-15/MANIFEST");
  for (const auto& [edit, field] : edits) {
    EditManifest(r3 + "/ckpt-15", edit);
    auto s = LoadCheckpoint(env, r3, 15, b.view(), {"jobA", 3, 4});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << field;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr(field));
    WriteAll(r3 + "/ckpt-15/MANIFEST", good);
  }
  WriteAll(r3 + "/ckpt-15/MANIFEST", "{\"format\": [");
  EXPECT_EQ(LoadCheckpoint(env, r3, 15, b.view(), {"jobA", 3, 4}).status().code(),
            absl::StatusCode::kDataLoss);
  WriteAll(r3 + "/ckpt-15/MANIFEST", good);

  // LATEST names a checkpoint in its own directory, nothing else.
  std::filesystem::copy(r3 + "/ckpt-15", base + "/evil/ckpt-15");
  for (const std::string latest :
       {"../evil/ckpt-15\n", "ckpt-15/../../evil/ckpt-15", "ckpt-x", "", "ckpt--15", "ckpt-015"}) {
    WriteAll(r3 + "/LATEST", latest);
    auto s = LoadLatestCheckpoint(env, r3, b.view(), {"jobA", 3, 4});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss) << latest;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("LATEST")) << latest;
  }
  WriteAll(r3 + "/LATEST", "ckpt-15\n");
  EXPECT_TRUE(LoadLatestCheckpoint(env, r3, b.view(), {"jobA", 3, 4}).ok());
}

uint64_t Fnv1a(const std::string& bytes) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

TEST_F(CheckpointTest, ThePreviousFormatStillLoads) {
  Tables a = Make(Dir("cold_v1"));
  Train(a);
  const std::string root = Dir("v1");
  ASSERT_TRUE(SaveCheckpoint(env, root, 4, a.view()).ok());
  // What the previous version wrote: FNV-1a checksums, no identity.
  EditManifest(root + "/ckpt-4", [&](nlohmann::json& m) {
    m["format"] = "heterps-checkpoint-v1";
    m.erase("job");
    m.erase("shard");
    m.erase("num_shards");
    for (nlohmann::json& f : m["files"]) {
      f.erase("xxh3_64");
      char hex[17];
      std::snprintf(hex, sizeof(hex), "%016llx",
                    static_cast<unsigned long long>(
                        Fnv1a(ReadAll(root + "/ckpt-4/" + f["file"].get<std::string>()))));
      f["fnv64"] = hex;
    }
  });
  Tables b = Make(Dir("cold_v1_b"));
  auto step = LoadLatestCheckpoint(env, root, b.view());
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(Rows(*b.sparse), Rows(*a.sparse));
  // It names no job: a job's load refuses it.
  EXPECT_EQ(LoadLatestCheckpoint(env, root, b.view(), {"jobA", 0, 1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace heterps::ps
