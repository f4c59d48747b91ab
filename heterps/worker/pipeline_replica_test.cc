// The pipeline engine without a network: replicas of a two-stage job wired together in this
// process by a transport that copies what it carries (as a wire would), driven step by step the
// way the coordinator drives them. The single-process trainer is the oracle.
#include "heterps/worker/pipeline_replica.h"

#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/data/auc.h"
#include "heterps/data/synthetic.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/worker/testing/local_transport.h"
#include "heterps/worker/testing/two_stages.h"
#include "heterps/worker/trainer.h"

namespace heterps::worker {
namespace {

using ::testing::HasSubstr;

using ::heterps::worker::testing::LocalDownstream;

// The share of step j (lines [j * 256, hi) of the pass) of stage-0 replica r of 2: (offset,
// count).
std::pair<int64_t, int64_t> Share(int64_t j, int64_t hi, int r) {
  return StepShare(j, 256, hi, 32, r, 2);
}

class PipelineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = ::testing::TempDir() + "/pipeline_test.tsv";
    data::SyntheticOptions synthetic;
    synthetic.rows = 2000;
    synthetic.seed = 3;
    ASSERT_TRUE(data::WriteSynthetic(synthetic, data_).ok());
  }

  // dlrm-small at batch 256 cut after the embeddings: stage 0 on 2 replicas, stage 1 on 1.
  static JobSpec TwoStages(Consistency mode, double eval_fraction) {
    JobSettings settings;
    settings.mode = mode;
    settings.eval_fraction = eval_fraction;
    auto job = testing::TwoStages(data_, settings);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  // The job's replicas on `client`, wired together.
  void Wire(const JobSpec& job, ps::PsClient* client) {
    for (int r = 0; r < 2; ++r) downstream_[r] = std::make_unique<LocalDownstream>();
    auto last = PipelineReplica::Create(job, 1, 0, client, nullptr);
    ASSERT_TRUE(last.ok()) << last.status();
    last_ = *std::move(last);
    for (int r = 0; r < 2; ++r) {
      downstream_[r]->next = {last_.get()};
      auto first = PipelineReplica::Create(job, 0, r, client, downstream_[r].get());
      ASSERT_TRUE(first.ok()) << first.status();
      first_[r] = *std::move(first);
      downstream_[r]->self = first_[r].get();
    }
  }

  // One synchronous step over lines [lo, hi): both stage-0 replicas, the flush, the commit. The
  // step's mean loss (its blocks' in block order).
  absl::StatusOr<double> SyncStep(ps::PsClient& client, int64_t step, int64_t lo, int64_t hi) {
    absl::StatusOr<StepOutcome> out[2];
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        const auto [offset, count] = Share(step, hi, r);
        out[r] = first_[r]->RunStep({step, 0, offset, count, 1.0f / (hi - lo)}, nullptr);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      if (!out[r].ok()) return out[r].status();
    }
    if (absl::Status flushed = last_->Flush(step, false, nullptr); !flushed.ok()) return flushed;
    if (absl::Status committed = client.Commit(); !committed.ok()) return committed;
    double loss = 0;
    for (int r = 0; r < 2; ++r) {
      for (double l : out[r]->block_losses) loss += l;
    }
    return loss / (out[0]->samples + out[1]->samples);
  }

  static std::string data_;
  std::unique_ptr<LocalDownstream> downstream_[2];
  std::unique_ptr<PipelineReplica> first_[2], last_;
};

std::string PipelineTest::data_;

// MicroBatches, the single process's copy of the job's layout: consecutive, whole blocks, each
// replica's within its ShareBlocks, every sample once, in order.
TEST(MicroBatchesTest, CutEachReplicasBlocksIntoMicroBatches) {
  for (const int k : {1, 2, 3, 4}) {
    for (const int64_t block : {1, 4, 32}) {
      for (const int64_t blocks_per_micro : {0, 1, 3}) {
        for (const int64_t n : {1, 2, 100, 255, 256}) {
          const std::vector<MicroBatch> got = MicroBatches(n, block, {k, block * blocks_per_micro});
          int64_t next = 0;
          for (const MicroBatch& m : got) {
            SCOPED_TRACE(absl::StrCat(k, " ", block, " ", blocks_per_micro, " ", n));
            EXPECT_EQ(m.begin, next);
            EXPECT_EQ(m.first_block * block, m.begin);
            const auto [first, end] = ShareBlocks(n, block, m.replica, k);
            EXPECT_GE(m.first_block, first);
            EXPECT_LE(m.begin + m.size, std::min(end * block, n));
            if (blocks_per_micro > 0) {
              EXPECT_LE(m.size, block * blocks_per_micro);
            }
            EXPECT_TRUE(m.size % block == 0 || m.begin + m.size == n);
            next = m.begin + m.size;
          }
          EXPECT_EQ(next, n);
        }
      }
    }
  }
}

TEST_F(PipelineTest, SyncStepsEqualTheSingleProcessRun) {
  const JobSpec job = TwoStages(Consistency::kSync, 0.1);
  ps::InProcessPsClient client(2);
  ASSERT_TRUE(CreateModelTables(job.model, &client, job.settings.tables).ok());
  Wire(job, &client);
  ASSERT_FALSE(HasFatalFailure());

  // The plain single process, and one that cuts its steps as the job does: both equal to the bit.
  TrainOptions single;
  single.files = {data_};
  single.block_size = job.settings.block_size;
  single.eval_fraction = 0.1;
  auto expected = Train(job.model, single);
  ASSERT_TRUE(expected.ok()) << expected.status();
  single.micro_batching = {2, job.settings.micro_batch};
  auto same = Train(job.model, single);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->losses, expected->losses);
  EXPECT_EQ(same->parameter_digest, expected->parameter_digest);
  const int64_t train_lines = expected->train_samples;
  ASSERT_EQ(expected->steps, (train_lines + 255) / 256);
  for (int64_t step = 0; step < expected->steps; ++step) {
    const int64_t lo = step * 256, hi = std::min(lo + 256, train_lines);
    auto loss = SyncStep(client, step, lo, hi);
    ASSERT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ(*loss, expected->losses[step]) << "step " << step;
  }
  // Evaluation through the pipeline: each replica's held-out lines.
  std::vector<float> scores, labels;
  for (int r = 0; r < 2; ++r) {
    auto eval = first_[r]->Evaluate(expected->steps, nullptr);
    ASSERT_TRUE(eval.ok()) << eval.status();
    scores.insert(scores.end(), eval->probabilities.begin(), eval->probabilities.end());
    labels.insert(labels.end(), eval->labels.begin(), eval->labels.end());
  }
  auto eval = data::Evaluate(scores, labels);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->samples, expected->eval_samples);
  EXPECT_NEAR(eval->auc, expected->eval_auc, 1e-6);
  // Every parameter, the rows the evaluation looked up included.
  uint64_t digest = 0;
  for (int s = 0; s < client.num_servers(); ++s) digest += *ps::DigestTables(client.Tables(s));
  EXPECT_EQ(digest, expected->parameter_digest);
  const ReplicaStats stats = last_->stats();
  EXPECT_GT(stats.micro_batches, 0);
  EXPECT_GT(stats.busy_seconds, 0);
  EXPECT_EQ(stats.in_flight, 0);
}

TEST_F(PipelineTest, AsyncStepsTrain) {
  const JobSpec job = TwoStages(Consistency::kAsync, 0);
  ps::InProcessPsClient client(2);
  ASSERT_TRUE(CreateModelTables(job.model, &client, job.settings.tables).ok());
  Wire(job, &client);
  ASSERT_FALSE(HasFatalFailure());
  double first = 0, last = 0;
  for (int64_t step = 0; step < 7; ++step) {
    const int64_t lo = step * 256, hi = lo + 256;
    double loss = 0;
    for (int r = 0; r < 2; ++r) {
      const auto [offset, count] = Share(step, hi, r);
      auto out = first_[r]->RunStep({step, 0, offset, count, 1.0f / 256}, nullptr);
      ASSERT_TRUE(out.ok()) << out.status();
      loss += out->loss_sum / 256;
    }
    // Asynchronous: applied as they came; nothing waits for a commit.
    ASSERT_TRUE(last_->Flush(step, false, nullptr).ok());
    (step == 0 ? first : last) = loss;
  }
  EXPECT_LT(last, first);
}

TEST_F(PipelineTest, ALostPeerFailsTheStepWithItsName) {
  const JobSpec job = TwoStages(Consistency::kSync, 0);
  ps::InProcessPsClient client(2);
  ASSERT_TRUE(CreateModelTables(job.model, &client, job.settings.tables).ok());
  Wire(job, &client);
  ASSERT_FALSE(HasFatalFailure());
  downstream_[0]->broken = true;
  auto out = first_[0]->RunStep({0, 0, 0, 128, 1.0f / 256}, nullptr);
  EXPECT_EQ(out.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(out.status().message(), HasSubstr("stage 1 replica 0"));
  // The other replica is unaffected.
  auto fine = first_[1]->RunStep({0, 0, 0, 128, 1.0f / 256}, nullptr);
  EXPECT_TRUE(fine.ok()) << fine.status();
}

TEST_F(PipelineTest, ReplicasOutsideThePlanAreRefused) {
  const JobSpec job = TwoStages(Consistency::kSync, 0);
  ps::InProcessPsClient client(1);
  EXPECT_EQ(PipelineReplica::Create(job, 1, 1, &client, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PipelineReplica::Create(job, 2, 0, &client, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Stage 0 needs the next stage's replicas.
  EXPECT_EQ(PipelineReplica::Create(job, 0, 0, &client, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace heterps::worker
