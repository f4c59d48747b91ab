// The job directory's files (status.json, checkpoint.json) and who is who in a job.
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/base/testing/fault_env.h"
#include "heterps/launcher/job_checkpoint.h"
#include "heterps/launcher/job_status.h"
#include "heterps/launcher/layout.h"

namespace heterps::launcher {
namespace {

using ::testing::HasSubstr;

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/launcher_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(JobStatusTest, WhatTheCoordinatorWritesTheCommandReads) {
  JobStatus s;
  s.state = "running";
  s.pid = 42;
  s.generation = 2;
  s.restarts = 1;
  s.step = 10;
  s.total_steps = 20;
  s.samples = 5120;
  s.samples_per_second = 1000.5;
  s.predicted_samples_per_second = 1100;
  s.loss = 0.52;
  s.eval_step = 8;
  s.eval_logloss = 0.5;
  s.eval_auc = 0.75;
  base::CallStats calls;
  calls.Record("PullSparse", true, absl::Milliseconds(3));
  calls.Record("Commit", false, absl::Seconds(12));
  ReplicaStatus replica;
  replica.stage = 0;
  replica.replica = 1;
  replica.micro_batches = 40;
  replica.busy_seconds = 1.5;
  replica.bytes_sent = 1 << 20;
  replica.ps_rpcs = calls.Snapshot();
  s.replicas = {replica};
  ShardStatus shard;
  shard.shard = 1;
  shard.calls = 77;
  shard.tables = {{0, 100, 6400, 5, 90, 10, 5}};
  shard.rpcs = calls.Snapshot();
  s.parameter_servers = {shard};
  s.updated = "2026-11-23T10:00:00Z";
  const std::string dir = Dir("status");
  ASSERT_TRUE(WriteJobStatus(base::DefaultEnv(), dir, s).ok());
  auto read = ReadJobStatus(base::DefaultEnv(), dir);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(JobStatusToJson(*read), JobStatusToJson(s));
  EXPECT_EQ(read->replicas[0].bytes_sent, 1 << 20);
  EXPECT_EQ(read->parameter_servers[0].tables[0].cold_rows, 5);
  EXPECT_EQ(read->eval_step, 8);
  ASSERT_EQ(read->replicas[0].ps_rpcs.size(), 2u);
  EXPECT_EQ(read->replicas[0].ps_rpcs[0].method, "Commit");
  EXPECT_EQ(read->replicas[0].ps_rpcs[0].errors, 1);
  EXPECT_EQ(read->parameter_servers[0].rpcs[1].buckets[6], 1);  // 3 ms: (2.5 ms, 5 ms]
  JobStatus damaged = s;
  damaged.replicas[0].ps_rpcs[1].buckets.pop_back();
  auto short_buckets = ParseJobStatus(JobStatusToJson(damaged), "status.json");
  EXPECT_THAT(short_buckets.status().message(), HasSubstr("buckets: has 16 counts, expected 17"));
  EXPECT_EQ(ReadJobStatus(base::DefaultEnv(), Dir("none")).status().code(),
            absl::StatusCode::kNotFound);
  auto bad = ParseJobStatus(R"({"state": "running", "step": "ten"})", "status.json");
  EXPECT_THAT(bad.status().message(), HasSubstr("status.json: pid: missing"));
}

TEST(JobCheckpointTest, ARecordThatCannotBeReadIsAnErrorNotAFreshStart) {
  const std::string dir = Dir("checkpoint");
  base::Env* env = base::DefaultEnv();
  auto none = ReadJobCheckpoint(env, dir);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(
      WriteJobCheckpoint(env, dir, {3, {0.7, 0.6, 0.5}, 2, "a1b2", {"seed=1", "epochs=2"}}).ok());
  auto read = ReadJobCheckpoint(env, dir);
  ASSERT_TRUE(read.ok() && read->has_value());
  EXPECT_EQ((*read)->step, 3);
  EXPECT_EQ((*read)->ps_shards, 2);
  EXPECT_EQ((*read)->job_id, "a1b2");
  EXPECT_THAT((*read)->identity, ::testing::ElementsAre("seed=1", "epochs=2"));
  EXPECT_THAT((*read)->losses, ::testing::ElementsAre(0.7, 0.6, 0.5));
  for (const char* text :
       {"garbage", "", R"({"format": "heterps-job-checkpoint-v1", "step": "ten", "losses": []})",
        R"({"format": "heterps-job-checkpoint-v1", "step": -1, "losses": []})",
        R"({"format": "heterps-job-checkpoint-v1", "step": 3, "losses": [0.5]})",
        R"({"format": "heterps-job-checkpoint-v1", "step": 0, "losses": [], "job_id": 7})",
        R"({"format": "heterps-job-checkpoint-v1", "step": 0, "losses": [], "job_id": "../x"})"}) {
    ASSERT_TRUE(base::WriteFileAtomically(dir + "/checkpoint.json", text).ok());
    auto bad = ReadJobCheckpoint(env, dir);
    EXPECT_FALSE(bad.ok()) << text;
    EXPECT_THAT(bad.status().message(), HasSubstr(dir + "/checkpoint.json")) << text;
  }
  ASSERT_TRUE(RemoveJobCheckpoint(env, dir).ok());
  EXPECT_FALSE(ReadJobCheckpoint(env, dir)->has_value());
  EXPECT_TRUE(RemoveJobCheckpoint(env, dir).ok());
}

// A full disk under the record: the write fails with a clear error and the previous record
// stays whole.
TEST(JobCheckpointTest, AFailedWriteKeepsThePreviousRecord) {
  const std::string dir = Dir("checkpoint_fault");
  base::testing::FaultEnv env(base::DefaultEnv());
  ASSERT_TRUE(WriteJobCheckpoint(&env, dir, {2, {0.7, 0.6}, 1, "j", {}}).ok());
  const int64_t operations = env.operations();
  for (int64_t n = 0; n < operations; ++n) {
    env.Reset();
    env.FailOperation(n, base::testing::FaultEnv::Fault::kDiskFull);
    const absl::Status written =
        WriteJobCheckpoint(&env, dir, {4, {0.7, 0.6, 0.5, 0.4}, 1, "j", {}});
    auto read = ReadJobCheckpoint(base::DefaultEnv(), dir);
    ASSERT_TRUE(read.ok() && read->has_value()) << n << ": " << read.status();
    if ((*read)->step == 2) {
      EXPECT_FALSE(written.ok());
      EXPECT_THAT(written.message(), HasSubstr("No space left on device"));
    }
    ASSERT_TRUE(WriteJobCheckpoint(base::DefaultEnv(), dir, {2, {0.7, 0.6}, 1, "j", {}}).ok());
  }
}

TEST(LayoutTest, RanksFollowTheJob) {
  worker::JobSpec job;
  job.plan.stages = {{0, 1, "a", "cpu", 2}, {2, 5, "b", "cpu", 3}};
  job.settings.ps_shards = 2;
  const JobLayout layout = MakeLayout(job);
  EXPECT_EQ(layout.world(), 1 + 2 + 5);
  EXPECT_EQ(layout.Name(0), "coordinator");
  EXPECT_EQ(layout.Name(2), "ps shard 1");
  EXPECT_EQ(layout.WorkerRank(1, 2), 7);
  EXPECT_EQ(layout.Name(7), "stage 1 replica 2");
}

}  // namespace
}  // namespace heterps::launcher
