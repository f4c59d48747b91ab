#include "heterps/ps/ps_client.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/block_tree.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/ps/key_plan.h"
#include "heterps/ps/rocksdb_store.h"

namespace heterps::ps {
namespace {

SparseTableOptions Options(int64_t budget) {
  SparseTableOptions o;
  o.dim = 4;
  o.optimizer.kind = OptimizerKind::kAdam;
  o.seed = 3;
  o.memory_budget_bytes = budget;
  return o;
}

// PlanKeys against its definition: per server, the distinct keys in first-seen order, and each
// position's (server, index); over batch sizes around the table's growth points, heavy and no
// repetition, and the extreme keys.
TEST(PlanKeysTest, MatchesItsDefinition) {
  std::mt19937_64 rng(7);
  for (int servers : {1, 2, 3, 8}) {
    for (size_t n : {0, 1, 7, 8, 9, 16, 17, 1000, 4096, 53248, 200000}) {
      for (uint64_t range : {uint64_t{5}, uint64_t{1000}, ~uint64_t{0}}) {
        std::vector<uint64_t> keys(n);
        for (uint64_t& k : keys) k = range == ~uint64_t{0} ? rng() : rng() % range;
        if (n > 2) keys[1] = 0, keys[2] = ~uint64_t{0};
        const KeyPlan plan = PlanKeys(keys, servers);
        std::map<uint64_t, std::pair<int, int>> seen;
        std::vector<std::vector<uint64_t>> expected(servers);
        ASSERT_EQ(plan.where.size(), n);
        for (size_t i = 0; i < n; ++i) {
          auto [it, fresh] = seen.try_emplace(keys[i]);
          if (fresh) {
            const int s = ServerOf(keys[i], servers);
            it->second = {s, static_cast<int>(expected[s].size())};
            expected[s].push_back(keys[i]);
          }
          ASSERT_EQ(plan.where[i], it->second) << "position " << i << " of " << n;
        }
        ASSERT_EQ(plan.keys, expected) << servers << " servers, " << n << " keys";
      }
    }
  }
}

TEST(PsClientTest, ShardedClientAnswersLikeOneServer) {
  InProcessPsClient one(1), two(2);
  ASSERT_TRUE(one.CreateSparseTable(0, Options(0)).ok());
  // The sharded client also spills to RocksDB, each server its own directory.
  ASSERT_TRUE(two.CreateSparseTable(
                     0, Options(4096),
                     [](int server) {
                       auto store = RocksDbColdStore::Open(::testing::TempDir() + "/client_cold_" +
                                                           std::to_string(server));
                       return store.ok() ? std::unique_ptr<ColdStore>(std::move(*store)) : nullptr;
                     })
                  .ok());
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 200; ++step) {
    std::vector<uint64_t> keys(1 + rng() % 40);
    for (uint64_t& k : keys) k = rng() % 500;  // plenty of repeats within a batch
    std::vector<float> a(keys.size() * 4), b(keys.size() * 4);
    if (step % 2 == 0) {
      ASSERT_TRUE(one.Wait(one.PullSparse(0, keys, absl::MakeSpan(a))).ok());
      ASSERT_TRUE(two.Wait(two.PullSparse(0, keys, absl::MakeSpan(b))).ok());
      ASSERT_EQ(a, b) << "step " << step;
    } else {
      for (float& g : a) g = normal(rng);
      ASSERT_TRUE(one.Wait(one.PushSparse(0, keys, a)).ok());
      ASSERT_TRUE(two.Wait(two.PushSparse(0, keys, a)).ok());
    }
  }
  // Each key lives on its documented server, and only there.
  for (uint64_t key = 0; key < 500; ++key) {
    const int home = ServerOf(key, 2);
    auto there = two.sparse(0, home)->Lookup(key);
    auto elsewhere = two.sparse(0, 1 - home)->Lookup(key);
    ASSERT_TRUE(there.ok() && elsewhere.ok());
    EXPECT_FALSE(elsewhere->has_value()) << key;
    auto reference = one.sparse(0, 0)->Lookup(key);
    EXPECT_EQ(there->has_value(), reference->has_value());
    if (there->has_value()) {
      EXPECT_EQ((*there)->steps, (*reference)->steps);
    }
  }
  EXPECT_GT(two.sparse(0, 0)->Stats().spills, 0);
}

TEST(PsClientTest, RepeatedKeysInAPushAreSummedIntoOneUpdate) {
  InProcessPsClient client(2);
  SparseTableOptions o = Options(0);
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 1;
  ASSERT_TRUE(client.CreateSparseTable(0, o).ok());
  std::vector<uint64_t> key = {42};
  std::vector<float> before(4), after(4);
  ASSERT_TRUE(client.Wait(client.PullSparse(0, key, absl::MakeSpan(before))).ok());
  std::vector<uint64_t> twice = {42, 42};
  std::vector<float> grads = {1, 1, 1, 1, 2, 2, 2, 2};
  ASSERT_TRUE(client.Wait(client.PushSparse(0, twice, grads)).ok());
  ASSERT_TRUE(client.Wait(client.PullSparse(0, key, absl::MakeSpan(after))).ok());
  for (int d = 0; d < 4; ++d) EXPECT_FLOAT_EQ(after[d], before[d] - 3);
  EXPECT_EQ((*client.sparse(0, ServerOf(42, 2))->Lookup(42))->steps, 1);
}

TEST(PsClientTest, DenseTablesAndErrors) {
  InProcessPsClient client(2);
  DenseTableOptions o;
  o.block_sizes = {3, 5};
  o.optimizer.kind = OptimizerKind::kSgd;
  o.optimizer.learning_rate = 0.5f;
  ASSERT_TRUE(client.CreateDenseTable(1, o).ok());
  std::vector<float> w(5), w2(5);
  ASSERT_TRUE(client.Wait(client.PullDense(1, 1, absl::MakeSpan(w))).ok());
  std::vector<float> g = {2, 2, 2, 2, 2};
  ASSERT_TRUE(client.Wait(client.PushDense(1, 1, g)).ok());
  ASSERT_TRUE(client.Wait(client.PullDense(1, 1, absl::MakeSpan(w2))).ok());
  for (int i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(w2[i], w[i] - 1);
  EXPECT_EQ(client.Wait(client.PullDense(1, 0, absl::MakeSpan(w))).code(),
            absl::StatusCode::kInvalidArgument);  // block 0 has 3 floats
  EXPECT_EQ(client.Wait(client.PullDense(7, 0, absl::MakeSpan(w))).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(client.Wait(12345).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client.CreateDenseTable(1, o).code(), absl::StatusCode::kAlreadyExists);
  DenseTableOptions bad;
  bad.block_sizes = {4, 0};
  EXPECT_THAT(std::string(DenseTable::Create(bad).status().message()),
              ::testing::HasSubstr("block 1 has size 0"));
}

// Accumulated contributions are applied at the commit as one update per key and per block: the
// same as one push of all the gradients, whatever order the parts arrive in. Dense parts are
// doubles summed before one rounding, so grouping the same gradients into other parts changes
// nothing, not even the rounding.
TEST(PsClientTest, AccumulatedPartsCommitAsOnePush) {
  DenseTableOptions dense;
  dense.block_sizes = {5};
  dense.optimizer.kind = OptimizerKind::kAdam;
  InProcessPsClient pushed(2), forward(2), backward(2), grouped(2);
  for (InProcessPsClient* c : {&pushed, &forward, &backward, &grouped}) {
    ASSERT_TRUE(c->CreateSparseTable(0, Options(0)).ok());
    ASSERT_TRUE(c->CreateDenseTable(1, dense).ok());
  }
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 20; ++step) {
    // Three parts with overlapping keys; within a part keys repeat too.
    std::vector<std::vector<uint64_t>> keys(3);
    std::vector<std::vector<float>> grads(3);
    std::vector<std::vector<double>> blocks(3);  // float values, as micro-batches' gradients
    std::vector<uint64_t> all_keys;
    std::vector<float> all_grads;
    std::vector<double> block_sum(5, 0.0);
    for (int p = 0; p < 3; ++p) {
      keys[p].resize(10);
      for (uint64_t& k : keys[p]) k = rng() % 25;
      grads[p].resize(40);
      for (float& g : grads[p]) g = normal(rng);
      blocks[p].resize(5);
      for (int i = 0; i < 5; ++i) block_sum[i] += blocks[p][i] = normal(rng) * (p + 1);
      all_keys.insert(all_keys.end(), keys[p].begin(), keys[p].end());
      all_grads.insert(all_grads.end(), grads[p].begin(), grads[p].end());
    }
    ASSERT_TRUE(pushed.Wait(pushed.PushSparse(0, all_keys, all_grads)).ok());
    const std::vector<float> rounded(block_sum.begin(), block_sum.end());
    ASSERT_TRUE(pushed.Wait(pushed.PushDense(1, 0, rounded)).ok());
    std::vector<double> first_two(5);
    for (int i = 0; i < 5; ++i) first_two[i] = blocks[0][i] + blocks[1][i];
    ASSERT_TRUE(grouped.Wait(grouped.AccumulateDense(1, 0, blocks[2], 1)).ok());
    ASSERT_TRUE(grouped.Wait(grouped.AccumulateDense(1, 0, first_two, 0)).ok());
    for (int p = 0; p < 3; ++p) {
      ASSERT_TRUE(forward.Wait(forward.AccumulateSparse(0, keys[p], grads[p], p)).ok());
      ASSERT_TRUE(forward.Wait(forward.AccumulateDense(1, 0, blocks[p], p)).ok());
      const int q = 2 - p;
      ASSERT_TRUE(backward.Wait(backward.AccumulateSparse(0, keys[q], grads[q], q)).ok());
      ASSERT_TRUE(backward.Wait(backward.AccumulateDense(1, 0, blocks[q], q)).ok());
    }
    // Nothing moves before the commit.
    if (step == 0) {
      std::vector<float> before(4);
      ASSERT_TRUE(forward.Wait(forward.PullSparse(0, {keys[0][0]}, absl::MakeSpan(before))).ok());
      EXPECT_EQ(before, forward.sparse(0, ServerOf(keys[0][0], 2))->InitialValue(keys[0][0]));
    }
    ASSERT_TRUE(forward.Commit().ok());
    ASSERT_TRUE(backward.Commit().ok());
    ASSERT_TRUE(grouped.Commit().ok());
  }
  std::vector<uint64_t> keys(25);
  for (uint64_t k = 0; k < 25; ++k) keys[k] = k;
  std::vector<float> a(100), b(100), c(100), da(5), db(5), dc(5), dd(5);
  ASSERT_TRUE(pushed.Wait(pushed.PullSparse(0, keys, absl::MakeSpan(a))).ok());
  ASSERT_TRUE(forward.Wait(forward.PullSparse(0, keys, absl::MakeSpan(b))).ok());
  ASSERT_TRUE(backward.Wait(backward.PullSparse(0, keys, absl::MakeSpan(c))).ok());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-5f) << i;
  EXPECT_EQ(b, c);  // the order of arrival changes nothing, not even the rounding
  ASSERT_TRUE(pushed.Wait(pushed.PullDense(1, 0, absl::MakeSpan(da))).ok());
  ASSERT_TRUE(forward.Wait(forward.PullDense(1, 0, absl::MakeSpan(db))).ok());
  ASSERT_TRUE(backward.Wait(backward.PullDense(1, 0, absl::MakeSpan(dc))).ok());
  ASSERT_TRUE(grouped.Wait(grouped.PullDense(1, 0, absl::MakeSpan(dd))).ok());
  EXPECT_EQ(da, db);
  EXPECT_EQ(db, dc);
  EXPECT_EQ(db, dd);
  // A gradient of the wrong size is refused.
  EXPECT_FALSE(forward.Wait(forward.AccumulateDense(1, 0, std::vector<double>(4), 0)).ok());
}

TEST(BlockTreeTest, CoverNodesCoverARangeWithAlignedNodes) {
  for (int64_t begin = 0; begin < 40; ++begin) {
    for (int64_t end = begin; end < 70; ++end) {
      int64_t next = begin;
      const std::vector<int> nodes = CoverNodes(begin, end);
      for (int part : nodes) {
        EXPECT_EQ(NodeFirstBlock(part), next) << begin << " " << end;
        next += int64_t{1} << NodeLevel(part);
      }
      EXPECT_EQ(next, end);
      int log = 0;
      while ((int64_t{1} << log) < end - begin + 1) ++log;
      EXPECT_LE(static_cast<int>(nodes.size()), 2 * log) << begin << " " << end;
    }
  }
  EXPECT_EQ(NodePart(0, 5), 5);  // block b alone is part b
  EXPECT_EQ(NodeParent(NodePart(0, 5)), NodePart(1, 2));
}

// The servers' commit of a step's block tree does not depend on who held which blocks or in what
// order the nodes arrived: holders cut the step's blocks at random (consecutive or dealt out),
// each merges what it can of its own blocks (per key: the nodes whose blocks hold the key) and
// sends its nodes in a random order; every commit equals one push of the tree's root sums, to the
// bit.
TEST(BlockTreeTest, AnyHoldersAndArrivalOrderCommitTheSameSums) {
  constexpr int kDim = 4, kKeys = 12;
  DenseTableOptions dense;
  dense.block_sizes = {7};
  dense.optimizer.kind = OptimizerKind::kAdam;
  std::mt19937_64 rng(17);
  std::normal_distribution<float> normal;
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t blocks = 1 + static_cast<int64_t>(rng() % 37);
    // Each block's leaf: some keys' float sums (magnitudes apart, so that the order of the
    // additions shows in the rounding) and the dense sums (float values, in double).
    std::vector<std::map<uint64_t, std::vector<float>>> sparse(blocks);
    std::vector<std::vector<double>> dense_leaf(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      for (uint64_t k = 0; k < kKeys; ++k) {
        if (rng() % 3 != 0) continue;
        std::vector<float>& row = sparse[b][k];
        for (int d = 0; d < kDim; ++d) row.push_back(normal(rng) * (b % 3 == 0 ? 1e4f : 1e-2f));
      }
      for (int i = 0; i < 7; ++i) dense_leaf[b].push_back(normal(rng) * (b % 2 ? 1e5 : 1e-3));
    }
    auto add_floats = [](std::vector<float>& a, const std::vector<float>& b) {
      for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    };
    auto add_doubles = [](std::vector<double>& a, const std::vector<double>& b) {
      for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
    };
    // The root, from the leaves.
    InProcessPsClient pushed(2);
    ASSERT_TRUE(pushed.CreateSparseTable(0, Options(0)).ok());
    ASSERT_TRUE(pushed.CreateDenseTable(1, dense).ok());
    std::vector<uint64_t> keys;
    std::vector<float> sums;
    for (uint64_t k = 0; k < kKeys; ++k) {
      std::vector<std::pair<int, std::vector<float>>> leaves;
      for (int64_t b = 0; b < blocks; ++b) {
        if (sparse[b].count(k)) leaves.emplace_back(NodePart(0, b), sparse[b][k]);
      }
      if (leaves.empty()) continue;
      MergeNodes(&leaves, /*to_root=*/true, add_floats);
      ASSERT_EQ(leaves.size(), 1u);
      keys.push_back(k);
      sums.insert(sums.end(), leaves[0].second.begin(), leaves[0].second.end());
    }
    std::vector<std::pair<int, std::vector<double>>> dense_nodes;
    for (int64_t b = 0; b < blocks; ++b) dense_nodes.emplace_back(NodePart(0, b), dense_leaf[b]);
    std::shuffle(dense_nodes.begin(), dense_nodes.end(), rng);
    MergeNodes(&dense_nodes, /*to_root=*/true, add_doubles);
    const std::vector<float> rounded(dense_nodes[0].second.begin(), dense_nodes[0].second.end());
    ASSERT_TRUE(pushed.Wait(pushed.PushSparse(0, keys, sums)).ok());
    ASSERT_TRUE(pushed.Wait(pushed.PushDense(1, 0, rounded)).ok());

    for (const bool consecutive : {true, false}) {
      SCOPED_TRACE(testing::Message() << "trial " << trial << ", " << blocks << " blocks, "
                                      << (consecutive ? "consecutive" : "dealt"));
      // Holder of each block.
      const int holders = 1 + static_cast<int>(rng() % 5);
      std::vector<int> holder(blocks);
      for (int64_t b = 0; b < blocks; ++b) {
        holder[b] = consecutive ? static_cast<int>(b * holders / blocks)
                                : static_cast<int>(rng() % holders);
      }
      // (holder, part, key or -1 for the dense block) -> its values, sent in a random order.
      struct Send {
        int part;
        int64_t key;  // -1: dense
        std::vector<float> sparse;
        std::vector<double> dense;
      };
      std::vector<Send> sends;
      for (int h = 0; h < holders; ++h) {
        for (uint64_t k = 0; k < kKeys; ++k) {
          std::vector<std::pair<int, std::vector<float>>> mine;
          for (int64_t b = 0; b < blocks; ++b) {
            if (holder[b] == h && sparse[b].count(k)) mine.emplace_back(b, sparse[b][k]);
          }
          std::shuffle(mine.begin(), mine.end(), rng);
          MergeNodes(&mine, /*to_root=*/false, add_floats);
          for (auto& [part, row] : mine) sends.push_back({part, static_cast<int64_t>(k), row, {}});
        }
        std::vector<std::pair<int, std::vector<double>>> mine;
        for (int64_t b = 0; b < blocks; ++b) {
          if (holder[b] == h) mine.emplace_back(b, dense_leaf[b]);
        }
        MergeNodes(&mine, /*to_root=*/false, add_doubles);
        for (auto& [part, values] : mine) sends.push_back({part, -1, {}, values});
      }
      std::shuffle(sends.begin(), sends.end(), rng);
      InProcessPsClient committed(2);
      ASSERT_TRUE(committed.CreateSparseTable(0, Options(0)).ok());
      ASSERT_TRUE(committed.CreateDenseTable(1, dense).ok());
      for (const Send& send : sends) {
        if (send.key < 0) {
          ASSERT_TRUE(committed.Wait(committed.AccumulateDense(1, 0, send.dense, send.part)).ok());
        } else {
          const std::vector<uint64_t> key = {static_cast<uint64_t>(send.key)};
          ASSERT_TRUE(
              committed.Wait(committed.AccumulateSparse(0, key, send.sparse, send.part)).ok());
        }
      }
      ASSERT_TRUE(committed.Commit().ok());
      std::vector<uint64_t> all(kKeys);
      for (uint64_t k = 0; k < kKeys; ++k) all[k] = k;
      std::vector<float> want(kKeys * kDim), got(kKeys * kDim), want_dense(7), got_dense(7);
      ASSERT_TRUE(pushed.Wait(pushed.PullSparse(0, all, absl::MakeSpan(want))).ok());
      ASSERT_TRUE(committed.Wait(committed.PullSparse(0, all, absl::MakeSpan(got))).ok());
      EXPECT_EQ(got, want);
      ASSERT_TRUE(pushed.Wait(pushed.PullDense(1, 0, absl::MakeSpan(want_dense))).ok());
      ASSERT_TRUE(committed.Wait(committed.PullDense(1, 0, absl::MakeSpan(got_dense))).ok());
      EXPECT_EQ(got_dense, want_dense);
    }
  }
}

// A commit split by lock shard over several threads applies the same update to every row as one
// thread does, to the bit, with rows spilling to the SSD tier meanwhile; so does every later
// pull and push.
TEST(PendingUpdatesTest, ACommitOnSeveralThreadsEqualsOneOnOne) {
  constexpr int kThreads[] = {1, 2, 3, 8};
  std::vector<std::unique_ptr<SparseTable>> tables;
  for (int t : kThreads) {
    // A budget of about a third of the rows touched: most commits spill rows.
    const std::string dir = ::testing::TempDir() + "/pending_threads_" + std::to_string(t);
    std::filesystem::remove_all(dir);  // nothing of an earlier run
    auto cold = RocksDbColdStore::Open(dir);
    ASSERT_TRUE(cold.ok()) << cold.status();
    auto table = SparseTable::Create(Options(150'000), std::move(*cold));
    ASSERT_TRUE(table.ok()) << table.status();
    tables.push_back(std::move(*table));
  }
  std::vector<PendingUpdates> pending(std::size(kThreads));
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 6; ++step) {
    // Three parts of 6,000 keys out of 20,000: enough rows for eight threads' groups.
    for (int part = 0; part < 3; ++part) {
      std::vector<uint64_t> keys(6000);
      for (uint64_t& k : keys) k = rng() % 20'000;
      std::vector<float> grads(keys.size() * 4);
      for (float& g : grads) g = normal(rng);
      for (PendingUpdates& p : pending) p.AddSparse(0, part, keys, grads);
    }
    for (size_t i = 0; i < pending.size(); ++i) {
      CheckpointTables only;
      only.sparse[0] = tables[i].get();
      ASSERT_TRUE(pending[i].Apply(only, kThreads[i]).ok());
      ASSERT_TRUE(pending[i].empty());
    }
  }
  int64_t updated = 0;
  for (uint64_t key = 0; key < 20'000; ++key) {
    auto one = tables[0]->Lookup(key);
    ASSERT_TRUE(one.ok()) << one.status();
    if (!one->has_value()) continue;
    if ((*one)->steps > 0) ++updated;
    for (size_t i = 1; i < tables.size(); ++i) {
      auto other = tables[i]->Lookup(key);
      ASSERT_TRUE(other.ok() && other->has_value()) << key;
      ASSERT_EQ((*other)->value, (*one)->value) << key << " on " << kThreads[i] << " threads";
      ASSERT_EQ((*other)->state, (*one)->state) << key;
      ASSERT_EQ((*other)->steps, (*one)->steps) << key;
    }
  }
  EXPECT_GT(updated, 10'000);
  EXPECT_GT(tables[3]->Stats().cold_rows, 0);  // the SSD tier took part
}

}  // namespace
}  // namespace heterps::ps
