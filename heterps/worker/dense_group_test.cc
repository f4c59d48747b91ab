// DenseGroup against the parameter servers' commit: replicas that exchange their step sums hold
// the same values, to the bit, as a server that adds the same parts and applies the optimizer.
#include "heterps/worker/dense_group.h"

#include <memory>
#include <random>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/block_tree.h"
#include "heterps/ps/in_process_client.h"

namespace heterps::worker {
namespace {

using ::testing::HasSubstr;

constexpr int kTable = 7;

// The replicas of one stage in this process: Send delivers at once.
class LocalPeers : public DensePeers {
 public:
  std::vector<DenseGroup*> groups;
  int refuse = -1;       // Send to this replica fails
  bool corrupt = false;  // gradient sums arrive one short
  absl::Status Send(int target, const DenseMessage& message) override {
    if (target == refuse) return absl::UnavailableError(absl::StrCat("replica ", target, " down"));
    DenseMessage copy = message;
    if (corrupt && !copy.grads.empty()) copy.grads.pop_back();
    groups[target]->Deliver(std::move(copy));
    return absl::OkStatus();
  }
};

ps::DenseTableOptions Options(ps::OptimizerKind kind) {
  ps::DenseTableOptions o;
  o.block_sizes = {5, 1, 3001, 40};
  o.optimizer.kind = kind;
  o.optimizer.learning_rate = 0.01f;
  o.seed = 3;
  return o;
}

std::vector<std::pair<int, int64_t>> Blocks(const ps::DenseTableOptions& o) {
  std::vector<std::pair<int, int64_t>> blocks;
  for (size_t b = 0; b < o.block_sizes.size(); ++b) blocks.emplace_back(b, o.block_sizes[b]);
  return blocks;
}

// n replicas over `steps` steps of random sums, against a server's AccumulateDense + Commit.
void ExpectSameAsTheServers(int n, ps::OptimizerKind kind, int steps) {
  SCOPED_TRACE(testing::Message() << n << " replicas, optimizer " << ps::OptimizerName(kind));
  const ps::DenseTableOptions options = Options(kind);
  ps::InProcessPsClient servers(2), held(2);
  ASSERT_TRUE(servers.CreateDenseTable(kTable, options).ok());
  ASSERT_TRUE(held.CreateDenseTable(kTable, options).ok());
  LocalPeers peers;
  std::vector<std::unique_ptr<DenseGroup>> groups;
  std::vector<std::vector<AlignedFloats>> values(n);
  for (int r = 0; r < n; ++r) {
    groups.push_back(std::make_unique<DenseGroup>(kTable, Blocks(options), options.optimizer, r, n,
                                                  &peers, &held, absl::Seconds(20)));
    peers.groups.push_back(groups.back().get());
    ASSERT_TRUE(groups[r]->Load(values[r]).ok());
  }
  int64_t covered = 0;
  for (int r = 0; r < n; ++r) covered += groups[r]->RangeSize(r);
  EXPECT_EQ(covered, 5 + 1 + 3001 + 40);

  std::mt19937_64 rng(11);
  std::normal_distribution<double> normal;
  for (int step = 0; step < steps; ++step) {
    // Replica r holds 1 to 3 consecutive blocks of the step (a node or several of its tree), some
    // replicas none.
    std::vector<StepGrads> sums(n);
    int64_t next_block = 0;
    for (int r = 0; r < n; ++r) {
      const int64_t blocks = (r + step) % 4 == 3 ? 0 : 1 + (r + step) % 3;
      for (int part : ps::CoverNodes(next_block, next_block + blocks)) {
        StepGrads::Node node;
        for (int64_t size : options.block_sizes) {
          std::vector<double> s(size);
          // Magnitudes apart, so that the order of the additions shows in the rounding.
          for (double& x : s) x = normal(rng) * (part % 2 == 0 ? 1e-3 : 1e3);
          node.dense.push_back(std::move(s));
        }
        for (size_t b = 0; b < options.block_sizes.size(); ++b) {
          ASSERT_TRUE(servers.Wait(servers.AccumulateDense(kTable, b, node.dense[b], part)).ok());
        }
        sums[r].nodes.emplace_back(part, std::move(node));
      }
      next_block += blocks;
    }
    ASSERT_GT(next_block, 0);
    ASSERT_TRUE(servers.Commit().ok());
    std::vector<std::thread> threads;
    std::vector<absl::Status> status(n);
    for (int r = 0; r < n; ++r) {
      threads.emplace_back(
          [&, r] { status[r] = groups[r]->Step(step, sums[r], values[r], nullptr); });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < n; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
    for (size_t b = 0; b < options.block_sizes.size(); ++b) {
      std::vector<float> expected(options.block_sizes[b]);
      ASSERT_TRUE(servers.Wait(servers.PullDense(kTable, b, absl::MakeSpan(expected))).ok());
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(std::vector<float>(values[r][b].begin(), values[r][b].end()), expected)
            << "step " << step << " block " << b << " replica " << r;
      }
    }
  }
  // Written back, the held table is the servers' table: values, state and update counts.
  for (int r = 0; r < n; ++r) ASSERT_TRUE(groups[r]->WriteBack(values[r]).ok());
  for (size_t b = 0; b < options.block_sizes.size(); ++b) {
    auto want = servers.dense(kTable)->Read(b);
    auto got = held.dense(kTable)->Read(b);
    ASSERT_TRUE(want.ok() && got.ok());
    EXPECT_EQ(got->value, want->value) << "block " << b;
    EXPECT_EQ(got->state, want->state) << "block " << b;
    EXPECT_EQ(got->steps, want->steps) << "block " << b;
    EXPECT_EQ(got->steps, steps);
  }
}

TEST(DenseGroupTest, ReplicasHoldWhatTheServersWouldHold) {
  ExpectSameAsTheServers(1, ps::OptimizerKind::kAdam, 3);
  ExpectSameAsTheServers(2, ps::OptimizerKind::kAdam, 4);
  ExpectSameAsTheServers(3, ps::OptimizerKind::kAdagrad, 3);
  ExpectSameAsTheServers(5, ps::OptimizerKind::kSgd, 2);
}

TEST(DenseGroupTest, APeerThatFailsIsAClearErrorNotAHang) {
  const ps::DenseTableOptions options = Options(ps::OptimizerKind::kAdam);
  ps::InProcessPsClient client(1);
  ASSERT_TRUE(client.CreateDenseTable(kTable, options).ok());
  LocalPeers peers;
  DenseGroup a(kTable, Blocks(options), options.optimizer, 0, 2, &peers, &client,
               absl::Milliseconds(300));
  DenseGroup b(kTable, Blocks(options), options.optimizer, 1, 2, &peers, &client,
               absl::Milliseconds(300));
  peers.groups = {&a, &b};
  std::vector<AlignedFloats> va, vb;
  ASSERT_TRUE(a.Load(va).ok());
  ASSERT_TRUE(b.Load(vb).ok());
  StepGrads sums;
  sums.nodes.emplace_back(0, StepGrads::Node());
  for (int64_t size : options.block_sizes) sums.nodes[0].second.dense.emplace_back(size, 0.5);

  // The other replica never sends: a deadline naming it.
  absl::Status alone = a.Step(0, sums, va, nullptr);
  EXPECT_EQ(alone.code(), absl::StatusCode::kDeadlineExceeded) << alone;
  EXPECT_THAT(alone.message(), HasSubstr("from replica(s) 1"));
  // It gave the step up: the reason, at once.
  b.Abort(1, absl::DataLossError("train.tsv:7: line: has 2 fields"));
  absl::Status aborted = a.Step(1, sums, va, nullptr);
  EXPECT_EQ(aborted.code(), absl::StatusCode::kAborted) << aborted;
  EXPECT_THAT(aborted.message(), HasSubstr("replica 1 gave it up: train.tsv:7"));
  // It cannot be reached: the transport's error.
  peers.refuse = 1;
  absl::Status down = a.Step(2, sums, va, nullptr);
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;
  EXPECT_THAT(down.message(), HasSubstr("replica 1 down"));
  // It sends a part of the wrong size.
  peers.refuse = -1;
  peers.corrupt = true;
  absl::Status bad_b;
  std::thread other([&] { bad_b = b.Step(3, sums, vb, nullptr); });
  absl::Status bad_a = a.Step(3, sums, va, nullptr);
  other.join();
  EXPECT_EQ(bad_a.code(), absl::StatusCode::kInvalidArgument) << bad_a;
  EXPECT_THAT(bad_a.message(), HasSubstr("replica 1 sent"));
  // A message naming a replica the stage does not have.
  peers.corrupt = false;
  DenseMessage stray;
  stray.step = 4;
  stray.from = 5;
  stray.parts = {1};
  stray.grads.assign(a.RangeSize(0), 0.5);
  a.Deliver(stray);
  absl::Status unknown = a.Step(4, sums, va, nullptr);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument) << unknown;
  EXPECT_THAT(unknown.message(), HasSubstr("from replica 5"));
  // The caller gives up.
  absl::Status cancelled = a.Step(5, sums, va, [] { return true; });
  EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled) << cancelled;
}

}  // namespace
}  // namespace heterps::worker
