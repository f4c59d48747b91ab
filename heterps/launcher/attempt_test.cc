// The coordinator's engine without processes: a two-stage job's replicas and parameter servers
// in this process (worker/testing/local_transport.h, ps::InProcessPsClient), driven by Attempt as
// the gRPC transport's would be. The single-process trainer is the oracle of a whole run; an
// uninterrupted run is the oracle of one that failed, switched or stopped part-way and resumed
// from its checkpoint on fresh processes.
#include "heterps/launcher/attempt.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/data/synthetic.h"
#include "heterps/launcher/job_checkpoint.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/worker/testing/local_transport.h"
#include "heterps/worker/testing/two_stages.h"
#include "heterps/worker/trainer.h"

namespace heterps::launcher {
namespace {

using ::testing::HasSubstr;
using worker::testing::LocalDownstream;
using worker::testing::LocalPeers;

// Every process of an attempt in this one: fresh servers and replicas at Connect, as a restart's
// processes are, wired as the gRPC nodes wire them (a stage's replicas hold its dense parameters
// in a synchronous job). `fault` may fail any replica call before it runs.
class LocalProcesses : public AttemptProcesses {
 public:
  using Fault =
      std::function<absl::Status(const std::string& call, int stage, int replica, int64_t step)>;

  LocalProcesses(const worker::JobSpec& job, const JobLayout& layout, std::string dir)
      : job_(job), layout_(layout), dir_(std::move(dir)) {}

  Fault fault;
  std::atomic<bool> stop{false};

  std::vector<int> Missing() override { return {}; }
  bool StopAsked() override { return stop.load(); }

  absl::Status Connect() override {
    client_ = std::make_unique<ps::InProcessPsClient>(layout_.ps_shards);
    const int stages = static_cast<int>(layout_.replicas.size());
    replicas_.resize(stages);
    downstream_.resize(stages);
    peers_.resize(stages);
    for (int s = stages - 1; s >= 0; --s) {
      peers_[s] = std::make_unique<LocalPeers>();
      for (int r = 0; r < layout_.replicas[s]; ++r) {
        std::unique_ptr<LocalDownstream> down;
        if (s + 1 < stages) {
          down = std::make_unique<LocalDownstream>();
          for (auto& next : replicas_[s + 1]) down->next.push_back(next.get());
        }
        absl::StatusOr<std::unique_ptr<worker::PipelineReplica>> replica =
            worker::PipelineReplica::Create(job_, s, r, client_.get(), down.get(), peers_[s].get());
        if (!replica.ok()) return replica.status();
        if (down) down->self = replica->get();
        peers_[s]->stage.push_back(replica->get());
        replicas_[s].push_back(*std::move(replica));
        downstream_[s].push_back(std::move(down));
      }
    }
    return absl::OkStatus();
  }

  ps::PsClient& servers() override { return *client_; }

  absl::Status SaveCheckpoint(int64_t step) override {
    for (int i = 0; i < client_->num_servers(); ++i) {
      absl::Status saved =
          ps::SaveCheckpoint(base::DefaultEnv(), Root(i), step, client_->Tables(i), Id(i));
      if (!saved.ok()) return saved;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> LoadCheckpoint(int64_t step, int from_shards) override {
    std::vector<std::string> roots;  // the old layout's servers', for a re-sharded load
    for (int j = 0; j < from_shards; ++j) roots.push_back(Root(j));
    for (int i = 0; i < client_->num_servers(); ++i) {
      absl::StatusOr<int64_t> loaded =
          from_shards == 0
              ? ps::LoadCheckpoint(base::DefaultEnv(), Root(i), step, client_->Tables(i), Id(i))
              : ps::LoadCheckpointResharded(base::DefaultEnv(), roots, step, Id(i),
                                            client_->Tables(i));
      if (!loaded.ok()) return loaded.status();
    }
    return step;
  }
  absl::StatusOr<uint64_t> Digest() override {
    uint64_t digest = 0;
    for (int i = 0; i < client_->num_servers(); ++i) {
      absl::StatusOr<uint64_t> d = ps::DigestTables(client_->Tables(i));
      if (!d.ok()) return d.status();
      digest += *d;
    }
    return digest;
  }
  absl::StatusOr<std::vector<ShardStatus>> ServerStats(absl::Duration) override {
    return std::vector<ShardStatus>(client_->num_servers());
  }

  absl::StatusOr<worker::StepOutcome> RunStep(int replica,
                                              const worker::StepRequest& request) override {
    if (absl::Status f = Fail("RunStep", 0, replica, request.step); !f.ok()) return f;
    return replicas_[0][replica]->RunStep(request, Cancelled());
  }
  absl::Status Flush(int stage, int replica, int64_t step, bool write_back) override {
    if (absl::Status f = Fail("Flush", stage, replica, step); !f.ok()) return f;
    return replicas_[stage][replica]->Flush(step, write_back, Cancelled());
  }
  absl::Status WriteBack(int stage, int replica) override {
    if (absl::Status f = Fail("WriteBack", stage, replica, -1); !f.ok()) return f;
    return replicas_[stage][replica]->WriteBack(Cancelled());
  }
  absl::StatusOr<worker::EvalOutcome> Evaluate(int replica, int64_t step) override {
    if (absl::Status f = Fail("Evaluate", 0, replica, step); !f.ok()) return f;
    return replicas_[0][replica]->Evaluate(step, Cancelled());
  }
  absl::StatusOr<ReplicaFigures> Stats(int stage, int replica, absl::Duration) override {
    if (absl::Status f = Fail("Stats", stage, replica, -1); !f.ok()) return f;
    ReplicaFigures figures;
    figures.stats = replicas_[stage][replica]->stats();
    return figures;
  }
  void CancelAll() override { cancelled_ = true; }
  bool cancelled() const { return cancelled_.load(); }
  void Resume() override { cancelled_ = false; }

 private:
  absl::Status Fail(const std::string& call, int stage, int replica, int64_t step) {
    if (!fault) return absl::OkStatus();
    absl::Status status = fault(call, stage, replica, step);
    if (status.ok()) return status;
    return absl::Status(status.code(),
                        absl::StrCat("stage ", stage, " replica ", replica, " (local): ", call, " ",
                                     step, ": ", status.message()));
  }
  worker::PipelineReplica::Cancelled Cancelled() {
    return [this] { return cancelled_.load(); };
  }
  std::string Root(int i) const { return absl::StrCat(dir_, "/ps-", i); }
  ps::CheckpointId Id(int i) const { return {"attempt-test", i, layout_.ps_shards}; }

  const worker::JobSpec& job_;
  const JobLayout& layout_;
  const std::string dir_;
  std::unique_ptr<ps::InProcessPsClient> client_;
  // Declared after the client and destroyed first: the replicas use it.
  std::vector<std::vector<std::unique_ptr<LocalDownstream>>> downstream_;
  std::vector<std::unique_ptr<LocalPeers>> peers_;  // per stage
  std::vector<std::vector<std::unique_ptr<worker::PipelineReplica>>> replicas_;
  std::atomic<bool> cancelled_{false};
};

// Starts nothing; a role dies when the test says so.
class FakeLauncher : public RoleLauncher {
 public:
  absl::Status Start(const std::string&, int world, int64_t) override {
    started = world;
    return absl::OkStatus();
  }
  std::optional<DeadRole> Dead() override {
    if (!dead.load()) return std::nullopt;
    return DeadRole{3, "rank 3 (pid 1234) was killed by signal 9"};
  }
  void StopAll(absl::Duration) override {}
  int started = 0;
  std::atomic<bool> dead{false};
};

// Switches once, at step `at`, to `job`.
class SwitchOnce : public Replanner {
 public:
  SwitchOnce(const worker::JobSpec& job, int64_t at) : job_(job), at_(at) {}
  void Running(const worker::JobSpec&) override {}
  std::optional<PlanSwitch> Check(const JobPosition& position) override {
    if (position.step != at_ || asked_) return std::nullopt;
    asked_ = true;
    return PlanSwitch{job_, "a test's switch"};
  }
  void RoleLost(const std::string&) override {}
  double CostPerHour() const override { return 0; }
  std::optional<double> FirstPlanCostPerHour() const override { return std::nullopt; }

 private:
  const worker::JobSpec& job_;
  const int64_t at_;
  bool asked_ = false;
};

class AttemptTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = ::testing::TempDir() + "/attempt_test.tsv";
    data::SyntheticOptions synthetic;
    synthetic.rows = 2000;
    synthetic.seed = 5;
    ASSERT_TRUE(data::WriteSynthetic(synthetic, data_).ok());
  }

  // dlrm-small at batch 256 cut after the embeddings: stage 0 on 2 replicas, stage 1 on 1, 2
  // parameter servers, a checkpoint every 3 steps, a tenth of the lines held out.
  static worker::JobSpec TwoStages(worker::Consistency mode, int ps_shards = 2) {
    worker::JobSettings settings;
    settings.mode = mode;
    settings.ps_shards = ps_shards;
    settings.eval_fraction = 0.1;
    settings.checkpoint_every = 3;
    auto job = worker::testing::TwoStages(data_, settings);
    EXPECT_TRUE(job.ok()) << job.status();
    return *job;
  }

  // The single process on the same lines: the synchronous job's oracle.
  static worker::TrainResult SingleProcess(const worker::JobSpec& job) {
    worker::TrainOptions single;
    single.files = {data_};
    single.block_size = job.settings.block_size;
    single.eval_fraction = job.settings.eval_fraction;
    auto expected = worker::Train(job.model, single);
    EXPECT_TRUE(expected.ok()) << expected.status();
    return *expected;
  }

  // The step of the job's checkpoint.json; -1 where there is none or it cannot be read.
  static int64_t CheckpointStep(const std::string& dir) {
    auto checkpoint = ReadJobCheckpoint(base::DefaultEnv(), dir);
    return checkpoint.ok() && checkpoint->has_value() ? (*checkpoint)->step : -1;
  }

  // A fresh directory for `job`, whose first segment the ledger begins (as the coordinator does
  // before its first attempt).
  std::string Begin(const worker::JobSpec& job, const std::string& name) {
    const std::string dir = ::testing::TempDir() + "/attempt_test_" + name;
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    ledger_.Begin(job, "start", 0, absl::Now(), absl::Now());
    return dir;
  }

  // One attempt on fresh processes; its status.
  absl::Status RunAttempt(const worker::JobSpec& job, const std::string& dir, int64_t generation,
                          int64_t train_lines, const LocalProcesses::Fault& fault = nullptr,
                          Replanner* replanner = nullptr, int64_t stop_at = -1) {
    attempt_.reset();  // the last attempt's, which refers to the layout and the processes
    layout_ = MakeLayout(job);
    processes_ = std::make_unique<LocalProcesses>(job, layout_, dir);
    processes_->fault = fault;
    options_.job_dir = dir;
    options_.job_id = "attempt-test";
    options_.replanner = replanner;
    options_.launcher = launcher_;
    options_.progress = [this, stop_at](const JobProgress& p) {
      if (p.step == stop_at) processes_->stop = true;
    };
    attempt_ = std::make_unique<Attempt>(job, options_, layout_, *processes_, result_, ledger_,
                                         generation, absl::Now());
    return attempt_->Run("local", train_lines);
  }

  static std::string data_;
  RoleLauncher* launcher_ = nullptr;
  JobLayout layout_;
  AttemptOptions options_;
  JobResult result_;
  SegmentLedger ledger_{nullptr};
  std::unique_ptr<LocalProcesses> processes_;
  std::unique_ptr<Attempt> attempt_;
};

std::string AttemptTest::data_;

TEST_F(AttemptTest, ASynchronousAttemptEqualsTheSingleProcessRun) {
  const worker::JobSpec job = TwoStages(worker::Consistency::kSync);
  const worker::TrainResult expected = SingleProcess(job);
  const std::string dir = Begin(job, "sync");
  ASSERT_TRUE(RunAttempt(job, dir, 1, expected.train_samples).ok());
  EXPECT_FALSE(attempt_->switch_to().has_value());
  EXPECT_FALSE(attempt_->stopped());
  EXPECT_EQ(result_.steps, expected.steps);
  EXPECT_EQ(result_.losses, expected.losses);
  EXPECT_EQ(result_.parameter_digest, expected.parameter_digest);
  EXPECT_EQ(result_.eval_samples, expected.eval_samples);
  EXPECT_NEAR(result_.eval_auc, expected.eval_auc, 1e-6);
  ASSERT_EQ(result_.stages.size(), 2u);
  // The rounds' checkpoints: the last one's step, and the losses before it.
  auto checkpoint = ReadJobCheckpoint(base::DefaultEnv(), dir);
  ASSERT_TRUE(checkpoint.ok() && checkpoint->has_value());
  EXPECT_EQ((*checkpoint)->step, expected.steps / 3 * 3 - (expected.steps % 3 == 0 ? 3 : 0));
  EXPECT_EQ(
      (*checkpoint)->losses,
      std::vector<double>(expected.losses.begin(), expected.losses.begin() + (*checkpoint)->step));
  auto status = ReadJobStatus(base::DefaultEnv(), dir);
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->state, "done");
  EXPECT_EQ(status->step, expected.steps);
  EXPECT_EQ(status->replicas.size(), 3u);
}

TEST_F(AttemptTest, AStageThatFailsMidRoundEndsTheAttemptAndTheNextResumesToTheSameRun) {
  const worker::JobSpec job = TwoStages(worker::Consistency::kSync);
  const worker::TrainResult expected = SingleProcess(job);
  ASSERT_GT(expected.steps, 5);
  const std::string dir = Begin(job, "fail");
  // Stage 1 fails to end step 4: the round of steps 3..5 is lost after its checkpoint at 3.
  const absl::Status failed = RunAttempt(job, dir, 1, expected.train_samples,
                                         [](const std::string& call, int stage, int, int64_t step) {
                                           return call == "Flush" && stage == 1 && step == 4
                                                      ? absl::UnavailableError("the process died")
                                                      : absl::OkStatus();
                                         });
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.message(), HasSubstr("stage 1 replica 0 (local): Flush 4: the process died"));
  EXPECT_EQ(CheckpointStep(dir), 3);
  // Fresh servers and replicas, as a restart's, from the checkpoint: the uninterrupted run.
  ASSERT_TRUE(RunAttempt(job, dir, 2, expected.train_samples).ok());
  EXPECT_EQ(result_.losses, expected.losses);
  EXPECT_EQ(result_.parameter_digest, expected.parameter_digest);
}

TEST_F(AttemptTest, ASwitchAndAStopCheckpointTheirStepAndTheRunGoesOnFromIt) {
  const worker::JobSpec job = TwoStages(worker::Consistency::kSync);
  const worker::TrainResult expected = SingleProcess(job);
  ASSERT_GT(expected.steps, 5);
  const std::string dir = Begin(job, "switch");
  SwitchOnce replanner(job, 2);
  ASSERT_TRUE(RunAttempt(job, dir, 1, expected.train_samples, nullptr, &replanner).ok());
  ASSERT_TRUE(attempt_->switch_to().has_value());
  EXPECT_EQ(attempt_->switch_to()->reason, "a test's switch");
  EXPECT_EQ(attempt_->switch_step(), 2);
  EXPECT_EQ(CheckpointStep(dir), 2);
  // The next plan's attempt from step 2, asked to stop after step 4.
  ASSERT_TRUE(RunAttempt(job, dir, 2, expected.train_samples, nullptr, nullptr, 4).ok());
  EXPECT_TRUE(attempt_->stopped());
  EXPECT_EQ(attempt_->stop_step(), 4);
  EXPECT_EQ(CheckpointStep(dir), 4);
  ASSERT_TRUE(RunAttempt(job, dir, 3, expected.train_samples).ok());
  EXPECT_EQ(result_.losses, expected.losses);
  EXPECT_EQ(result_.parameter_digest, expected.parameter_digest);
}

// An evaluation is one long call per replica: a role that dies meanwhile is seen by a watcher,
// which cancels the calls; the attempt ends naming the role, and calls are no longer cancelled.
TEST_F(AttemptTest, ARoleThatDiesDuringTheEvaluationEndsItNamingTheRole) {
  const worker::JobSpec job = TwoStages(worker::Consistency::kSync);
  const worker::TrainResult expected = SingleProcess(job);
  const std::string dir = Begin(job, "dead");
  FakeLauncher launcher;
  launcher_ = &launcher;
  bool waited = false;
  const absl::Status status =
      RunAttempt(job, dir, 1, expected.train_samples,
                 [&](const std::string& call, int, int, int64_t) -> absl::Status {
                   if (call != "Evaluate") return absl::OkStatus();
                   launcher.dead = true;  // the replica's process dies while it evaluates
                   const absl::Time give_up = absl::Now() + absl::Seconds(30);
                   while (!processes_->cancelled() && absl::Now() < give_up) {
                     absl::SleepFor(absl::Milliseconds(5));
                   }
                   waited = processes_->cancelled();
                   return absl::CancelledError("cancelled");
                 });
  EXPECT_EQ(launcher.started, layout_.world());
  EXPECT_TRUE(waited);
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("rank 3 (pid 1234) was killed by signal 9"));
  EXPECT_FALSE(processes_->cancelled());       // resumed for the calls after it
  EXPECT_EQ(result_.losses, expected.losses);  // the steps before it all ran
}

// A switch to a plan of another number of parameter servers (which the launcher starts): the new
// servers load the old ones' checkpoint re-sharded by key, and the run is the same.
TEST_F(AttemptTest, ASwitchToAnotherNumberOfServersGoesOnToTheSameRun) {
  const worker::JobSpec job = TwoStages(worker::Consistency::kSync);
  const worker::JobSpec three = TwoStages(worker::Consistency::kSync, 3);
  const worker::TrainResult expected = SingleProcess(job);
  const std::string dir = Begin(job, "reshard");
  FakeLauncher launcher;
  launcher_ = &launcher;
  SwitchOnce replanner(three, 4);
  ASSERT_TRUE(RunAttempt(job, dir, 1, expected.train_samples, nullptr, &replanner).ok());
  ASSERT_TRUE(attempt_->switch_to().has_value());
  EXPECT_EQ(attempt_->switch_step(), 4);
  auto checkpoint = ReadJobCheckpoint(base::DefaultEnv(), dir);
  ASSERT_TRUE(checkpoint.ok() && checkpoint->has_value());
  EXPECT_EQ((*checkpoint)->ps_shards, 2);
  ASSERT_TRUE(RunAttempt(three, dir, 2, expected.train_samples).ok());
  EXPECT_EQ(launcher.started, MakeLayout(three).world());
  EXPECT_EQ(result_.losses, expected.losses);
  EXPECT_EQ(result_.parameter_digest, expected.parameter_digest);
}

TEST_F(AttemptTest, AnAsynchronousAttemptTrainsEveryStep) {
  const worker::JobSpec job = TwoStages(worker::Consistency::kAsync);
  const worker::TrainResult expected = SingleProcess(job);
  const std::string dir = Begin(job, "async");
  // Stage 1 never answers for its counters: status.json still names it by its place.
  ASSERT_TRUE(RunAttempt(job, dir, 1, expected.train_samples,
                         [](const std::string& call, int stage, int, int64_t) {
                           return call == "Stats" && stage == 1
                                      ? absl::DeadlineExceededError("no answer")
                                      : absl::OkStatus();
                         })
                  .ok());
  auto status = ReadJobStatus(base::DefaultEnv(), dir);
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_EQ(status->replicas.size(), 3u);
  EXPECT_EQ(status->replicas[2].stage, 1);
  EXPECT_EQ(status->replicas[2].micro_batches, 0);
  EXPECT_GT(status->replicas[1].micro_batches, 0);
  EXPECT_EQ(result_.steps, expected.steps);
  ASSERT_EQ(result_.losses.size(), expected.losses.size());
  EXPECT_LT(result_.losses.back(), result_.losses.front());
  EXPECT_EQ(result_.train_samples, expected.train_samples);
  EXPECT_GT(result_.eval_auc, 0.5);
}

}  // namespace
}  // namespace heterps::launcher
