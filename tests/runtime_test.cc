// The distributed runtime as a user runs it: `heterps train` and `heterps node` starting real
// processes (a coordinator, parameter-server shards, stage replicas) that talk gRPC on loopback.
// The single-process trainer is the oracle.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <memory>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/base/subprocess.h"
#include "nlohmann/json.hpp"
#include "tests/job_runner.h"

namespace heterps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;

const std::string kCluster = "tests/specs/runtime/local-two.yaml";
const std::string kPlan = "tests/specs/runtime/two-stages.json";

using testing::Dir;
using testing::ExpectNoneLeft;
using testing::Heterps;
using testing::kBinary;
using testing::Metrics;
using testing::Outcome;
using testing::Slurp;

// A synchronous distributed run's metrics against the single process's: more than 50 steps,
// every step's loss and the final parameters (their digest) the same to the bit; the eval AUC
// within 1e-6 (the held-out lines are cut into other blocks: a probability may differ in its last
// bits).
void ExpectTheSameRun(const json& single, const json& distributed) {
  const std::vector<double> one = single["losses"], many = distributed["losses"];
  ASSERT_EQ(one.size(), many.size());
  ASSERT_GT(one.size(), 50u);
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(many[i], one[i]) << "step " << i;
  EXPECT_EQ(distributed["parameter_digest"], single["parameter_digest"]);
  EXPECT_NEAR(distributed["eval_auc"].get<double>(), single["eval_auc"].get<double>(), 1e-6);
}

class RuntimeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = ::testing::TempDir() + "/runtime_test_data.tsv";
    const Outcome r = Heterps({"gen-data", "--rows", "24000", "--seed", "4", "--out", data_},
                              ::testing::TempDir());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // The two-stage plan (stage 0: 2 replicas; stage 1: 1) with 2 parameter-server shards.
  static std::vector<std::string> TwoStages(const std::string& job_dir,
                                            std::vector<std::string> more = {}) {
    std::vector<std::string> args = {
        "train",     "--data",    data_,    "--batch",       "256",
        "--cluster", kCluster,    "--plan", kPlan,           "--ps-shards",
        "2",         "--job-dir", job_dir,  "--metrics-out", job_dir + "/metrics.json"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  // Kills rank `rank` of the two-stage job once it has checkpointed step `steps` (a multiple of
  // 20, well before its last step); the job's metrics.
  static json KillMidRun(const std::string& name, int rank, int steps) {
    const std::string dir = Dir(name);
    return testing::KillMidRun(TwoStages(dir, {"--checkpoint-every", "20", "--micro-batch", "64"}),
                               dir, rank, steps);
  }

  static std::string data_;
};

std::string RuntimeTest::data_;

// The plain single process and the two-stage job (2 stage-0 replicas, micro-batches of 32, 2
// parameter servers) are equal to the bit: every step's loss and the final parameters.
TEST_F(RuntimeTest, SyncTwoStagesTwoShardsReproduceTheSingleProcessRun) {
  const std::string single = Dir("single");
  Outcome r = Heterps({"train", "--single-process", "--data", data_, "--batch", "256",
                       "--metrics-out", single + "/metrics.json"},
                      single);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string job = Dir("sync");
  r = Heterps(TwoStages(job), job);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 stages, 2 parameter servers"));
  const json a = Metrics(single), b = Metrics(job);
  ASSERT_NO_FATAL_FAILURE(ExpectTheSameRun(a, b));
  // Both print the digest.
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("digest ", b["parameter_digest"].get<std::string>())));
  ExpectNoneLeft(job);
  const std::vector<double> one = a["losses"];
  // The same job on a plan that names its parameter servers (2 shards on a type with an SSD,
  // 0.25 MiB of rows in memory each): train launches them as the plan says, most rows live on
  // the SSD tier, and the result is the same to the bit.
  const std::string tiered = Dir("ssd_tier");
  r = Heterps({"train", "--data", data_, "--batch", "256", "--cluster",
               "tests/specs/runtime/local-servers.yaml", "--plan",
               "tests/specs/runtime/two-stages-servers.json", "--job-dir", tiered, "--metrics-out",
               tiered + "/metrics.json"},
              tiered);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 stages, 2 parameter servers"));
  const json status = json::parse(Slurp(tiered + "/status.json"));
  int64_t cold = 0, spills = 0;
  for (const json& shard : status["parameter_servers"]) {
    for (const json& t : shard["tables"]) {
      cold += t["cold_rows"].get<int64_t>();
      spills += t["spills"].get<int64_t>();
    }
  }
  EXPECT_GT(cold, 10000);
  EXPECT_GT(spills, 10000);
  EXPECT_EQ(Metrics(tiered)["parameter_digest"], b["parameter_digest"]);
  EXPECT_EQ(Metrics(tiered)["losses"], b["losses"]);
  // Both stages with dense layers, stage 0's two replicas holding theirs between them (checkpoints
  // and an evaluation inside the run: the held parameters are written back at each), against the
  // same job with the dense parameters through the servers: the same to the bit.
  json held_runs[2];
  for (const bool on_servers : {false, true}) {
    const std::string dense = Dir(on_servers ? "dense_on_servers" : "dense_held");
    std::vector<std::string> args =
        TwoStages(dense, {"--checkpoint-every", "30", "--eval-interval", "40"});
    *(std::find(args.begin(), args.end(), "--plan") + 1) =
        "tests/specs/runtime/two-stages-dense.json";
    if (on_servers) args.push_back("--dense-on-servers");
    r = Heterps(args, dense);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    held_runs[on_servers] = Metrics(dense);
  }
  EXPECT_EQ(held_runs[0]["parameter_digest"], held_runs[1]["parameter_digest"]);
  EXPECT_EQ(held_runs[0]["losses"], held_runs[1]["losses"]);
  EXPECT_EQ(held_runs[0]["evals"], held_runs[1]["evals"]);
  ASSERT_NO_FATAL_FAILURE(ExpectTheSameRun(a, held_runs[0]));
  // The coordinator's view, as `heterps status` shows it.
  r = Heterps({"status", job}, job);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr(absl::StrCat("done: step ", one.size(), " of ", one.size())));
  EXPECT_THAT(r.out, HasSubstr("rows in memory"));
  r = Heterps({"status", single}, single);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("no status"));
}

// Over a whole epoch of 338 steps, with each optimizer on the embeddings and on the dense layers,
// the two-stage job (2 stage-0 replicas, micro-batches of 64, blocks of 32, 2 shards) and the
// plain single process are the same run to the bit.
TEST_F(RuntimeTest, EveryOptimizerOverAWholeEpochEqualsTheSingleProcess) {
  const std::string data = ::testing::TempDir() + "/runtime_test_epoch.tsv";
  Outcome r =
      Heterps({"gen-data", "--rows", "96000", "--seed", "5", "--out", data}, ::testing::TempDir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const auto& [sparse, dense] : {std::pair<std::string, std::string>{"sgd", "adagrad"},
                                      {"adagrad", "adam"},
                                      {"adam", "sgd"}}) {
    SCOPED_TRACE(absl::StrCat(sparse, " on the embeddings, ", dense, " on the dense layers"));
    const std::vector<std::string> common = {
        "--data",      data,   "--batch",           "256", "--block-size", "32",
        "--optimizer", sparse, "--dense-optimizer", dense};
    const std::string single = Dir(absl::StrCat("epoch_single_", sparse));
    std::vector<std::string> args = {"train", "--single-process", "--metrics-out",
                                     single + "/metrics.json"};
    args.insert(args.end(), common.begin(), common.end());
    r = Heterps(args, single);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string job = Dir(absl::StrCat("epoch_job_", sparse));
    args = {"train",
            "--cluster",
            kCluster,
            "--plan",
            kPlan,
            "--ps-shards",
            "2",
            "--job-dir",
            job,
            "--micro-batch",
            "64",
            "--metrics-out",
            job + "/metrics.json"};
    args.insert(args.end(), common.begin(), common.end());
    r = Heterps(args, job, absl::Seconds(300));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json a = Metrics(single), b = Metrics(job);
    EXPECT_EQ(b["losses"].size(), 338u);
    ASSERT_NO_FATAL_FAILURE(ExpectTheSameRun(a, b));
  }
}

// A later stage of two replicas, which hold its dense parameters between them: the micro-batches
// go to them by where their blocks lie in the step, and one that gets none in a step (a whole
// step in one micro-batch) still takes its part in the dense exchange; the run is the single
// process's to the bit either way.
TEST_F(RuntimeTest, ALaterStageOfTwoReplicasEqualsTheSingleProcess) {
  const std::string single = Dir("wide_single");
  Outcome r = Heterps({"train", "--single-process", "--data", data_, "--batch", "256",
                       "--metrics-out", single + "/metrics.json"},
                      single);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* micro : {"64", "256"}) {
    SCOPED_TRACE(absl::StrCat("micro-batches of ", micro));
    const std::string job = Dir(absl::StrCat("wide_", micro));
    std::vector<std::string> args = TwoStages(job, {"--micro-batch", micro});
    *(std::find(args.begin(), args.end(), "--plan") + 1) =
        "tests/specs/runtime/two-stages-wide.json";
    r = Heterps(args, job);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_NO_FATAL_FAILURE(ExpectTheSameRun(Metrics(single), Metrics(job)));
    ExpectNoneLeft(job);
  }
}

// Multi-hot slots across processes: the input stage hands ragged keys (values and offsets) to the
// stage with the embedding, and the sync run still follows the single process step by step.
TEST_F(RuntimeTest, MultiHotSlotsCrossStagesAndSyncStillEqualsTheSingleProcess) {
  const std::string model = "examples/models/movielens-genres.yaml";
  const std::string data = ::testing::TempDir() + "/runtime_test_multi_hot.csv";
  Outcome r =
      Heterps({"gen-data", "--model", model, "--rows", "24000", "--seed", "4", "--out", data},
              ::testing::TempDir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string single = Dir("multi_hot_single");
  r = Heterps({"train", "--single-process", "--model", model, "--data", data, "--batch", "256",
               "--metrics-out", single + "/metrics.json"},
              single);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string job = Dir("multi_hot_sync");
  r = Heterps({"train", "--model", model, "--data", data, "--batch", "256", "--cluster", kCluster,
               "--plan", "tests/specs/runtime/multi-hot-two-stages.json", "--ps-shards", "2",
               "--job-dir", job, "--metrics-out", job + "/metrics.json"},
              job);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("2 stages, 2 parameter servers"));
  ASSERT_NO_FATAL_FAILURE(ExpectTheSameRun(Metrics(single), Metrics(job)));
  ExpectNoneLeft(job);
}

TEST_F(RuntimeTest, AKilledStageWorkerOrShardChangesNothingInTheEnd) {
  const std::string whole = Dir("uninterrupted");
  const Outcome r =
      Heterps(TwoStages(whole, {"--checkpoint-every", "20", "--micro-batch", "64"}), whole);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json reference = Metrics(whole);
  EXPECT_EQ(reference["restarts"], 0);
  // Ranks: 0 the coordinator, 1-2 the shards, 3-4 stage 0's replicas, 5 stage 1's.
  for (const auto& [name, rank, steps] :
       {std::tuple{"kill_worker", 5, 20}, std::tuple{"kill_shard", 2, 40}}) {
    SCOPED_TRACE(name);
    const json m = KillMidRun(name, rank, steps);
    EXPECT_EQ(m["restarts"], 1);
    EXPECT_GT(m["wall_seconds"].get<double>(), m["seconds"].get<double>());
    EXPECT_EQ(m["parameter_digest"], reference["parameter_digest"]);
    EXPECT_EQ(m["losses"], reference["losses"]);
    EXPECT_EQ(m["eval_auc"], reference["eval_auc"]);
  }
  // Two kills in a row: a stage worker, then, once the restarted job has checkpointed again, a
  // shard of the new processes.
  const std::string twice = Dir("kill_twice");
  const json m =
      testing::KillMidRun(TwoStages(twice, {"--checkpoint-every", "20", "--micro-batch", "64"}),
                          twice, {{5, 20}, {2, 40}});
  EXPECT_EQ(m["restarts"], 2);
  EXPECT_EQ(m["parameter_digest"], reference["parameter_digest"]);
  EXPECT_EQ(m["losses"], reference["losses"]);

  // A shard killed inside its save of step 40's checkpoint (the moment it creates the save's
  // temporary directory): the restarted job resumes from step 20's, the half-written one is
  // neither loaded nor left behind.
  const std::string in_save = Dir("kill_in_save");
  bool tmp_left = false;
  const json saved =
      testing::KillInSave(TwoStages(in_save, {"--checkpoint-every", "20", "--micro-batch", "64"}),
                          in_save, 1, 40, &tmp_left);
  EXPECT_TRUE(tmp_left) << "the kill came after the save";
  EXPECT_EQ(saved["restarts"], 1);
  EXPECT_EQ(saved["parameter_digest"], reference["parameter_digest"]);
  EXPECT_EQ(saved["losses"], reference["losses"]);
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(in_save + "/ps-1/checkpoints")) {
    EXPECT_FALSE(absl::StrContains(entry.path().filename().string(), ".tmp-")) << entry.path();
  }

  // The same job again in the directory of the finished one: a new job, with its own checkpoints
  // (the old job's of higher steps neither prune nor replace them), survives a kill the same way.
  const json again = testing::KillMidRun(
      TwoStages(whole, {"--checkpoint-every", "20", "--micro-batch", "64"}), whole, 2, 20);
  EXPECT_EQ(again["restarts"], 1);
  EXPECT_EQ(again["parameter_digest"], reference["parameter_digest"]);
  EXPECT_EQ(again["losses"], reference["losses"]);

  // SIGTERM to `heterps train`: the job stops at the next step with a checkpoint, says how to
  // resume, leaves no process behind and `heterps status` says "stopped"; the same command then
  // finishes it with the uninterrupted run's result.
  const std::string stopped = Dir("sigterm");
  // (The signal follows step 20's checkpoint, watched every 20 ms: the whole job takes about a
  // second on a fast host, status.json is rewritten every second.)
  const std::vector<std::string> args =
      TwoStages(stopped, {"--checkpoint-every", "20", "--micro-batch", "64"});
  testing::Background job(args, stopped);
  ASSERT_TRUE(job.WaitFor([&] { return testing::CheckpointStep(stopped) >= 20; }));
  job.Signal(SIGTERM);
  EXPECT_EQ(job.Wait(), 128 + SIGTERM) << job.err();
  EXPECT_THAT(job.err(), HasSubstr("run the same command again"));
  ExpectNoneLeft(stopped);
  EXPECT_GT(testing::CheckpointStep(stopped), 20);
  const Outcome status = Heterps({"status", stopped}, stopped);
  EXPECT_THAT(status.out, HasSubstr("stopped: step"));
  // Resuming it as another job (another seed, another number of passes) says what differs.
  std::vector<std::string> other = args;
  other.insert(other.end(), {"--seed", "99", "--epochs", "2"});
  const Outcome refused = Heterps(other, stopped);
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("the unfinished job in this directory differs: epochs 2 (the "
                                     "checkpoint's: 1); seed 99"));
  EXPECT_THAT(refused.err, HasSubstr("--fresh"));
  // Resumed on another layout (one stage of one replica, 3 shards): the uninterrupted run's
  // result to the bit.
  std::vector<std::string> elsewhere = args;
  *(std::find(elsewhere.begin(), elsewhere.end(), "--plan") + 1) =
      "tests/specs/runtime/one-stage-two.json";
  *(std::find(elsewhere.begin(), elsewhere.end(), "--ps-shards") + 1) = "3";
  const Outcome resumed = Heterps(elsewhere, stopped);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out + resumed.err, HasSubstr("resumed from the checkpoint of step"));
  EXPECT_THAT(resumed.out, HasSubstr("1 stage, 3 parameter servers"));
  EXPECT_EQ(Metrics(stopped)["parameter_digest"], reference["parameter_digest"]);

  // TLS between every role, with a certificate made for the job: the same result, the key
  // readable by its owner only.
  const std::string tls = Dir("tls");
  const Outcome with_tls =
      Heterps(TwoStages(tls, {"--checkpoint-every", "20", "--micro-batch", "64", "--tls"}), tls);
  ASSERT_EQ(with_tls.exit_code, 0) << with_tls.err;
  EXPECT_EQ(Metrics(tls)["parameter_digest"], reference["parameter_digest"]);
  EXPECT_THAT(Slurp(tls + "/tls-cert.pem"), HasSubstr("BEGIN CERTIFICATE"));
  EXPECT_EQ(
      std::filesystem::status(tls + "/tls-key.pem").permissions() & std::filesystem::perms::all,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);

  // A step that hangs (a stage worker stopped with SIGSTOP): status.json goes on being rewritten
  // with how long the step has run, `heterps status` says so, and once the worker goes on (SIGCONT)
  // the job finishes with the uninterrupted run's result.
  const std::string hung = Dir("hung_step");
  testing::Background slow(TwoStages(hung, {"--checkpoint-every", "20", "--micro-batch", "64"}),
                           hung);
  ASSERT_TRUE(slow.WaitFor([&] { return testing::CheckpointStep(hung) >= 20; }));
  const json processes = json::parse(Slurp(hung + "/processes.json"));
  const int stage1 = processes["ranks"]["5"].get<int>();
  kill(stage1, SIGSTOP);
  ASSERT_TRUE(slow.WaitFor(
      [&] {
        const json s = json::parse(Slurp(hung + "/status.json"), nullptr, false);
        return s.is_object() && s.value("step_seconds", 0.0) >= 6;
      },
      absl::Seconds(30)));
  const Outcome hung_status = Heterps({"status", hung}, hung);
  kill(stage1, SIGCONT);
  EXPECT_THAT(hung_status.out, HasSubstr("has run for"));
  EXPECT_EQ(slow.Wait(), 0) << slow.err();
  EXPECT_EQ(Metrics(hung)["parameter_digest"], reference["parameter_digest"]);

  // A parameter server stopped the same way: the coordinator, waiting on it, still rewrites
  // status.json every few seconds (the servers' figures as last seen), and the job ends as the
  // uninterrupted one once the server goes on.
  const std::string ps_hung = Dir("hung_server");
  testing::Background held(TwoStages(ps_hung, {"--checkpoint-every", "20", "--micro-batch", "64"}),
                           ps_hung);
  ASSERT_TRUE(held.WaitFor([&] { return testing::CheckpointStep(ps_hung) >= 20; }));
  const int shard0 = json::parse(Slurp(ps_hung + "/processes.json"))["ranks"]["1"].get<int>();
  kill(shard0, SIGSTOP);
  std::set<std::string> rewrites;  // the distinct "updated" stamps seen while it is stopped
  const bool rewritten = held.WaitFor(
      [&] {
        const json s = json::parse(Slurp(ps_hung + "/status.json"), nullptr, false);
        if (!s.is_object()) return false;
        rewrites.insert(s.value("updated", ""));
        return s.value("step_seconds", 0.0) >= 8 && rewrites.size() >= 3;
      },
      absl::Seconds(20));
  kill(shard0, SIGCONT);
  EXPECT_TRUE(rewritten) << rewrites.size() << " rewrites while the server was stopped";
  EXPECT_EQ(held.Wait(), 0) << held.err();
  EXPECT_EQ(Metrics(ps_hung)["parameter_digest"], reference["parameter_digest"]);

  // kill -9 of `heterps train` itself: every role ends with it (the parent-death signal) within
  // seconds, and the same command resumes to the uninterrupted run's result.
  const std::string killed = Dir("kill_coordinator");
  const std::vector<std::string> again_args =
      TwoStages(killed, {"--checkpoint-every", "20", "--micro-batch", "64"});
  testing::Background coordinator(again_args, killed);
  ASSERT_TRUE(coordinator.WaitFor([&] { return testing::CheckpointStep(killed) >= 20; }));
  coordinator.Signal(SIGKILL);
  coordinator.Wait();
  testing::ExpectAllEndWithin(killed, absl::Seconds(5));
  const Outcome rerun = Heterps(again_args, killed);
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_EQ(Metrics(killed)["parameter_digest"], reference["parameter_digest"]);
  EXPECT_EQ(Metrics(killed)["losses"], reference["losses"]);
}

using testing::FreePort;

TEST_F(RuntimeTest, MpirunStartsTheJobOnLocalhost) {
  const std::string dir = Dir("mpirun");
  ASSERT_TRUE(base::WriteFileAtomically(dir + "/token", "mpirun-test-token\n").ok());
  const std::string coordinator = absl::StrCat("127.0.0.1:", FreePort());
  // 1 coordinator, 1 shard, 2 + 1 stage replicas.
  std::vector<std::string> argv = {
      "/bin/sh", "-c",
      absl::StrCat("exec mpirun --allow-run-as-root --oversubscribe -n 5 ", kBinary,
                   " node --coordinator ", coordinator, " --token-file ", dir, "/token", " --data ",
                   data_, " --batch 256 --cluster ", kCluster, " --plan ", kPlan,
                   " --ps-shards 1 --job-dir ", dir, " --metrics-out ", dir, "/metrics.json >", dir,
                   "/out 2>", dir, "/err")};
  auto job = base::Subprocess::Start(argv);
  ASSERT_TRUE(job.ok()) << job.status();
  auto code = (*job)->Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << "mpirun still running";
  EXPECT_EQ(*code, 0) << Slurp(dir + "/err");
  const json m = Metrics(dir);
  ASSERT_FALSE(m.is_discarded()) << Slurp(dir + "/out") << Slurp(dir + "/err");
  EXPECT_GT(m["eval_auc"].get<double>(), 0.5);
  EXPECT_EQ(m["ps_shards"], 1);
}

// SIGTERM to mpirun, which passes it to every rank (Slurm's scancel does the same): the shards
// and stages serve on until the coordinator has written the stop's checkpoint, so the job stops
// as `heterps train` does, and the same command resumes it from that step. (Open MPI 4 sends the
// ranks SIGCONT at once, SIGTERM odls_base_sigkill_timeout seconds later and SIGKILL as long after
// that: 3 s here, 1 s by default.) Before, the other ranks ended at once, the checkpoint failed
// and the job was marked failed.
TEST_F(RuntimeTest, AnMpirunJobStopsCleanlyAndResumesWhereItStopped) {
  const std::string dir = Dir("mpirun_stop");
  ASSERT_TRUE(base::WriteFileAtomically(dir + "/token", "mpirun-test-token\n").ok());
  const std::string coordinator = absl::StrCat("127.0.0.1:", FreePort());
  const std::string command = absl::StrCat(
      "exec mpirun --allow-run-as-root --oversubscribe --mca odls_base_sigkill_timeout 3 -n 5 ",
      kBinary, " node --coordinator ", coordinator, " --token-file ", dir, "/token", " --data ",
      data_, " --batch 256 --epochs 8 --cluster ", kCluster, " --plan ", kPlan,
      " --ps-shards 1 --checkpoint-every 20 --job-dir ", dir, " >", dir, "/out 2>", dir, "/err");
  auto job = base::Subprocess::Start({"/bin/sh", "-c", command});
  ASSERT_TRUE(job.ok()) << job.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (testing::CheckpointStep(dir) < 20 && (*job)->Running() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_GE(testing::CheckpointStep(dir), 20) << Slurp(dir + "/err");
  (*job)->Signal(SIGTERM);
  auto code = (*job)->Wait(absl::Seconds(120));
  ASSERT_TRUE(code.ok()) << "mpirun still running";
  const std::string err = Slurp(dir + "/err");
  EXPECT_NE(*code, 0) << err;
  EXPECT_THAT(err, HasSubstr("asked to stop"));
  const std::string said = "stopped at step ";
  const size_t at = err.find(said);
  ASSERT_NE(at, std::string::npos) << err;
  const int step = std::atoi(err.c_str() + at + said.size());
  EXPECT_GT(step, 20);
  EXPECT_EQ(testing::CheckpointStep(dir), step) << err;
  EXPECT_THAT(Heterps({"status", dir}, dir).out, HasSubstr("stopped: step"));

  auto again = base::Subprocess::Start({"/bin/sh", "-c", command});
  ASSERT_TRUE(again.ok()) << again.status();
  code = (*again)->Wait(absl::Seconds(300));
  ASSERT_TRUE(code.ok()) << "mpirun still running";
  EXPECT_EQ(*code, 0) << Slurp(dir + "/err");
  EXPECT_THAT(Slurp(dir + "/out") + Slurp(dir + "/err"),
              HasSubstr(absl::StrCat("resumed from the checkpoint of step ", step)));
  // The report's progress counts the samples of the steps before the resume too (each of the 8
  // passes may end in a short batch).
  const std::string report = Slurp(dir + "/report.html");
  int64_t last_step = 0, last_samples = 0;
  for (size_t at = report.find("\"step\":"); at != std::string::npos;
       at = report.find("\"step\":", at + 1)) {
    int64_t point_step = 0, samples = 0;
    if (std::sscanf(report.c_str() + at, "\"step\":%ld,\"samples\":%ld", &point_step, &samples) ==
            2 &&
        point_step > last_step) {
      last_step = point_step;
      last_samples = samples;
    }
  }
  ASSERT_GT(last_step, step);
  EXPECT_GT(last_samples, (last_step - 8) * 256) << "step " << last_step;
}

TEST_F(RuntimeTest, ACallWithoutTheTokenIsRefused) {
  const std::string dir = Dir("token");
  ASSERT_TRUE(base::WriteFileAtomically(dir + "/token", "the-real-token\n").ok());
  // Rank 0 of an externally launched job of 5 at `coordinator`, waiting for the others.
  auto start_rank0 = [&](const std::string& coordinator, const std::string& job_dir,
                         std::vector<std::string> more, const std::string& log) {
    std::vector<std::string> argv = {
        kBinary,       "node", "--coordinator", coordinator,    "--rank", "0",
        "--world",     "5",    "--token-file",  dir + "/token", "--data", data_,
        "--batch",     "256",  "--cluster",     kCluster,       "--plan", kPlan,
        "--ps-shards", "1",    "--job-dir",     job_dir};
    argv.insert(argv.end(), more.begin(), more.end());
    return base::Subprocess::Start(argv, log);
  };
  const std::string coordinator = absl::StrCat("127.0.0.1:", FreePort());
  auto rank0 = start_rank0(coordinator, dir, {}, dir + "/rank0.log");
  ASSERT_TRUE(rank0.ok());
  ASSERT_TRUE(base::WriteFileAtomically(dir + "/wrong", "a-guess\n").ok());
  for (const std::string& token : {std::string(), dir + "/wrong"}) {
    std::vector<std::string> args = {"node", "--coordinator", coordinator, "--rank",
                                     "1",    "--world",       "5",         "--connect-timeout",
                                     "20"};
    if (!token.empty()) args.insert(args.end(), {"--token-file", token});
    const Outcome r = Heterps(args, dir);
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("UNAUTHENTICATED")) << r.err;
  }
  (*rank0)->Signal(SIGTERM);
  ASSERT_TRUE((*rank0)->Wait(absl::Seconds(10)).ok());
  const std::string log = Slurp(dir + "/rank0.log");
  EXPECT_THAT(log, HasSubstr("refused Hello from"));
  EXPECT_THAT(log, HasSubstr(": no token"));
  EXPECT_THAT(log, HasSubstr(": wrong token"));

  // A coordinator that speaks TLS (the job's certificate, given to every process): a process
  // without the certificate does not get through; one with it reaches the token check.
  const std::string command =
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 "
      "-subj /CN=heterps-job -addext subjectAltName=DNS:heterps-job -keyout " +
      dir + "/key.pem -out " + dir + "/cert.pem 2>" + dir + "/openssl.log";
  ASSERT_EQ(std::system(command.c_str()), 0) << Slurp(dir + "/openssl.log");
  const std::string tls_coordinator = absl::StrCat("127.0.0.1:", FreePort());
  auto tls_rank0 = start_rank0(tls_coordinator, dir + "/tls-job",
                               {"--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem"},
                               dir + "/tls-rank0.log");
  ASSERT_TRUE(tls_rank0.ok());
  const std::vector<std::string> join = {
      "node",         "--coordinator", tls_coordinator,     "--rank", "1", "--world", "5",
      "--token-file", dir + "/wrong",  "--connect-timeout", "3"};
  const Outcome plaintext = Heterps(join, dir);
  EXPECT_EQ(plaintext.exit_code, 2);
  EXPECT_THAT(plaintext.err, Not(HasSubstr("UNAUTHENTICATED"))) << plaintext.err;
  std::vector<std::string> with_cert = join;
  with_cert.insert(with_cert.end(),
                   {"--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem"});
  const Outcome trusted = Heterps(with_cert, dir);
  EXPECT_EQ(trusted.exit_code, 2);
  EXPECT_THAT(trusted.err, HasSubstr("UNAUTHENTICATED")) << trusted.err;
  (*tls_rank0)->Signal(SIGTERM);
  ASSERT_TRUE((*tls_rank0)->Wait(absl::Seconds(10)).ok());
}

// Across regions (docs/regions.md, "GEO across processes"): two regions, each a job of its own
// on data of its own (a two-stage plan of 2 + 1 replicas and 2 shards; a one-stage plan and 1
// shard), exchanging windows every 4 steps (threshold 1%, delay 1) and after every step between
// (the rows past an eager threshold of 5%) through their coordinators'
// gateways (mutual TLS, `heterps certs`), are the run emulated in one process with the same
// files: every step's loss (the
// emulation's is the regions' mean weighted by their samples), the windows and each link's
// bytes; the first region's parameters equal the emulation's first region's to the bit (no
// held-out lines: an evaluation's pulls would create other rows in each).
TEST_F(RuntimeTest, RegionJobsThroughTheirGatewaysAreTheEmulatedRun) {
  const std::string dir = Dir("regions");
  const std::string a = dir + "/a.tsv", b = dir + "/b.tsv";
  ASSERT_EQ(Heterps({"gen-data", "--rows", "6000", "--seed", "5", "--out", a}, dir).exit_code, 0);
  ASSERT_EQ(Heterps({"gen-data", "--rows", "4000", "--seed", "6", "--out", b}, dir).exit_code, 0);
  const std::vector<std::string> sync = {"--sync-steps",           "4",    "--sync-threshold",
                                         "0.01",                   "--eval-fraction", "0",
                                         "--sync-eager-threshold", "0.05"};
  std::vector<std::string> args = {"train",         "--single-process",      "--region-data",
                                   "a=" + a,        "--region-data",         "b=" + b,
                                   "--batch",       "256",                   "--metrics-out",
                                   dir + "/emulated.json"};
  args.insert(args.end(), sync.begin(), sync.end());
  Outcome r = Heterps(args, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json emulated = json::parse(Slurp(dir + "/emulated.json"));
  ASSERT_EQ(emulated["regions"]["shares"], json::array({0.6, 0.4}));
  // The regions' batches: their shares of 256 (the emulation's, rounded).
  const int batch[2] = {154, 102};
  // The plans, at each region's batch.
  const std::string plans[2] = {dir + "/a-plan.json", dir + "/b-plan.json"};
  for (int i = 0; i < 2; ++i) {
    std::string plan = Slurp(i == 0 ? kPlan : "tests/specs/runtime/one-stage.json");
    const std::string from = "\"batch_size\": 256";
    plan.replace(plan.find(from), from.size(), absl::StrCat("\"batch_size\": ", batch[i]));
    if (i == 1) plan.replace(plan.find("local-spot"), 10, "local-two");
    ASSERT_TRUE(base::WriteFileAtomically(plans[i], plan).ok());
  }
  const std::string gateways = absl::StrCat("a=127.0.0.1:", testing::FreePort(),
                                            ",b=127.0.0.1:", testing::FreePort());
  // Mutual TLS between the gateways, a certificate per region from the run's CA; each job's own
  // roles under their own job certificate (--tls).
  const std::string certs = dir + "/certs";
  r = Heterps({"certs", "--regions", "a,b", "--out", certs}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("gateway.b.heterps"));
  const auto tls = [&](const std::string& region) {
    return std::vector<std::string>{"--region-ca",  certs + "/ca.pem",
                                    "--region-cert", certs + "/" + region + ".pem",
                                    "--region-key",  certs + "/" + region + "-key.pem"};
  };
  std::vector<std::unique_ptr<testing::Background>> jobs;
  const std::string names[2] = {"a", "b"}, files[2] = {a, b};
  const std::string job_dirs[2] = {Dir("region_a"), Dir("region_b")};
  for (int i = 0; i < 2; ++i) {
    const std::string& job = job_dirs[i];
    std::vector<std::string> region = {
        "train",     files[i], "--batch",  absl::StrCat(batch[i]),
        "--cluster", kCluster, "--plan",   plans[i],
        "--ps-shards", i == 0 ? "2" : "1", "--job-dir", job,
        "--metrics-out", job + "/metrics.json", "--region", names[i],
        "--region-gateways", gateways};
    region.insert(region.begin() + 1, "--data");
    region.insert(region.end(), sync.begin(), sync.end());
    const std::vector<std::string> mine = tls(names[i]);
    region.insert(region.end(), mine.begin(), mine.end());
    region.push_back("--tls");
    jobs.push_back(std::make_unique<testing::Background>(region, job));
  }
  json metrics[2];
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(jobs[i]->Wait(absl::Seconds(240)), 0) << jobs[i]->err();
    const std::string& job = job_dirs[i];
    metrics[i] = Metrics(job);
    EXPECT_EQ(metrics[i]["links"], json::array());  // each region's plan within its region
    ExpectNoneLeft(job);
    const std::string out = Slurp(job + "/out");
    EXPECT_THAT(out, HasSubstr(absl::StrCat("regions         a, b (this job: ", names[i])));
    EXPECT_THAT(out, HasSubstr(", mutual TLS)"));
    EXPECT_EQ(metrics[i]["regions"]["gateway_tls"], true);
  }
  const std::vector<double> all = emulated["losses"];
  const std::vector<double> la = metrics[0]["losses"], lb = metrics[1]["losses"];
  // 6,000 lines in steps of 154 and 4,000 in steps of 102: 39 and 40 steps, the last shorter.
  ASSERT_EQ(la.size(), 39u);
  ASSERT_EQ(lb.size(), 40u);
  ASSERT_EQ(all.size(), 40u);
  const int64_t lines[2] = {6000, 4000};
  for (size_t s = 0; s < all.size(); ++s) {
    double sum = 0;
    int64_t samples = 0;
    for (int i = 0; i < 2; ++i) {
      const int64_t n = std::max<int64_t>(0, std::min<int64_t>(batch[i], lines[i] - batch[i] * s));
      if (n > 0) sum += (i == 0 ? la : lb)[s] * n;
      samples += n;
    }
    EXPECT_NEAR(sum / samples, all[s], 1e-12) << "step " << s;
  }
  EXPECT_EQ(metrics[0]["parameter_digest"], emulated["parameter_digest"]);
  EXPECT_NE(metrics[1]["parameter_digest"], emulated["parameter_digest"]);  // its own Adagrad
  for (const json& m : metrics) {
    EXPECT_EQ(m["regions"]["windows"], emulated["regions"]["windows"]);
    EXPECT_EQ(m["regions"]["links"], emulated["regions"]["links"]);
    EXPECT_GT(m["regions"]["windows"].get<int>(), 8);
  }
  EXPECT_GT(metrics[0]["regions"]["gateway_bytes_sent"]["b"].get<int64_t>(),
            emulated["regions"]["links"][0]["bytes"].get<int64_t>());
  // A later run of the pair (regions a and b) is the first to the bit: both regions' parameters
  // and losses, the windows and links.
  const auto expect_the_first_run = [&](const json& ra, const json& rb) {
    EXPECT_EQ(ra["parameter_digest"], metrics[0]["parameter_digest"]);
    EXPECT_EQ(rb["parameter_digest"], metrics[1]["parameter_digest"]);
    EXPECT_EQ(ra["losses"], metrics[0]["losses"]);
    EXPECT_EQ(rb["losses"], metrics[1]["losses"]);
    for (const json* m : {&ra, &rb}) {
      EXPECT_EQ((*m)["regions"]["windows"], emulated["regions"]["windows"]);
      EXPECT_EQ((*m)["regions"]["links"], emulated["regions"]["links"]);
    }
  };
  // Recovery within the run (docs/regions.md, "Recovery"): region a checkpoints every 8 steps,
  // and its shard 1 (rank 2) is killed once step 16's checkpoint is written; its restarted
  // attempt trains from there again, taking the windows it exchanged since from what it kept,
  // and the run is the same to the bit: region a's parameters, every loss, the windows and links.
  {
    const std::string again = absl::StrCat("a=127.0.0.1:", testing::FreePort(),
                                           ",b=127.0.0.1:", testing::FreePort());
    const std::string killed[2] = {Dir("region_a_killed"), Dir("region_b_killed")};
    std::vector<std::string> region_args[2];
    for (int i = 0; i < 2; ++i) {
      region_args[i] = {"train",
                        "--data", files[i],
                        "--batch", absl::StrCat(batch[i]),
                        "--cluster", kCluster,
                        "--plan", plans[i],
                        "--ps-shards", i == 0 ? "2" : "1",
                        "--job-dir", killed[i],
                        "--metrics-out", killed[i] + "/metrics.json",
                        "--region", names[i],
                        "--region-gateways", again,
                        "--checkpoint-every", "8"};
      region_args[i].insert(region_args[i].end(), sync.begin(), sync.end());
    }
    testing::Background peer(region_args[1], killed[1]);
    const json ka = testing::KillMidRun(region_args[0], killed[0], /*rank=*/2, /*steps=*/16);
    ASSERT_EQ(peer.Wait(absl::Seconds(240)), 0) << peer.err();
    const json kb = Metrics(killed[1]);
    EXPECT_EQ(ka["restarts"], 1);
    EXPECT_EQ(kb["restarts"], 0);
    expect_the_first_run(ka, kb);
    // The same pair again on fresh gateways, into the job directories <name>_a and <name>_b.
    const auto anew = [&](const std::string& name) {
      const std::string gateways = absl::StrCat("a=127.0.0.1:", testing::FreePort(),
                                                ",b=127.0.0.1:", testing::FreePort());
      std::array<std::string, 2> dirs = {Dir(name + "_a"), Dir(name + "_b")};
      for (int i = 0; i < 2; ++i) {
        std::vector<std::string>& args = region_args[i];
        *(std::find(args.begin(), args.end(), "--region-gateways") + 1) = gateways;
        *(std::find(args.begin(), args.end(), "--job-dir") + 1) = dirs[i];
        *(std::find(args.begin(), args.end(), "--metrics-out") + 1) = dirs[i] + "/metrics.json";
      }
      return dirs;
    };
    // Elastic within its region: region a is told to switch plans (`heterps ctl`: one stage of
    // one replica on cpu-b, 3 shards) as soon as it has started (the whole run takes a few
    // seconds: a later request could come after its last step); it switches at the step it
    // reads the request at, its windows rewound to the switch's checkpoint, and the run is the
    // same to the bit.
    const std::array<std::string, 2> switched = anew("region_switched");
    const std::string plan_b = dir + "/a-plan-b.json";
    {
      std::string plan = Slurp("tests/specs/runtime/one-stage-two.json");
      const std::string from = "\"batch_size\": 256";
      plan.replace(plan.find(from), from.size(), absl::StrCat("\"batch_size\": ", batch[0]));
      ASSERT_TRUE(base::WriteFileAtomically(plan_b, plan).ok());
    }
    {
      testing::Background wa(region_args[0], switched[0]), wb(region_args[1], switched[1]);
      ASSERT_TRUE(wa.WaitFor([&] { return std::filesystem::exists(switched[0] + "/job.json"); }));
      const Outcome ctl = Heterps({"ctl", switched[0], "--plan", plan_b, "--ps-shards", "3"}, dir);
      ASSERT_EQ(ctl.exit_code, 0) << ctl.err;
      ASSERT_EQ(wa.Wait(), 0) << wa.err();
      ASSERT_EQ(wb.Wait(), 0) << wb.err();
      EXPECT_THAT(wa.err(), HasSubstr("switching at step"));
    }
    const json sa_m = Metrics(switched[0]), sb_m = Metrics(switched[1]);
    ASSERT_EQ(sa_m["segments"].size(), 2u) << sa_m.dump(1);
    EXPECT_EQ(sa_m["ps_shards"], 3);
    EXPECT_EQ(sa_m["restarts"], 0);
    expect_the_first_run(sa_m, sb_m);
    // Region a stopped on request (SIGTERM) once it has checkpointed step 8: the run ends with it
    // (region b is told, and names it), and the same command again, which finds a's checkpoint,
    // is refused before anything starts: the windows since went with the other regions' run.
    const std::array<std::string, 2> stopped = anew("region_stopped");
    testing::Background sa(region_args[0], stopped[0]), sb(region_args[1], stopped[1]);
    ASSERT_TRUE(sa.WaitFor([&] { return testing::CheckpointStep(stopped[0]) >= 8; }));
    sa.Signal(SIGTERM);
    EXPECT_EQ(sa.Wait(), 128 + SIGTERM) << sa.err();
    EXPECT_THAT(sa.err(), HasSubstr("start every region again with --fresh"));
    EXPECT_NE(sb.Wait(), 0);
    EXPECT_THAT(sb.err(), HasSubstr("region 'a'"));
    const Outcome resumed = Heterps(region_args[0], stopped[0]);
    EXPECT_EQ(resumed.exit_code, 2) << resumed.err;
    EXPECT_THAT(resumed.err, HasSubstr("which resumes only within its run")) << resumed.err;
    EXPECT_THAT(resumed.err, HasSubstr("--fresh")) << resumed.err;
  }
  // Bad regions: one line each, before anything starts.
  const std::string bad = Dir("regions_bad");
  for (const auto& [flags, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--region", "c", "--region-gateways", gateways}, "is none of --region-gateways"},
           {{"--region", "a", "--region-gateways", "a=127.0.0.1:1"}, "name two regions or more"},
           {{"--region", "a", "--region-gateways", "a=x,b=y:1"}, "'a=x' is not REGION=HOST:PORT"},
           {{"--region", "a", "--region-gateways", gateways, "--mode", "async"}, "synchronously"},
           {{"--region", "a", "--region-gateways", gateways, "--sync-hub", "c"},
            "--sync-hub: 'c' is none of --region-gateways' regions"},
           {{"--region", "a"}, "--region-gateways"},
           {{"--region", "a", "--region-gateways", "a=127.0.0.1:7100,b=10.1.0.5:7100"},
            "region 'b' is at 10.1.0.5:7100, off this host: the windows between regions need "
            "--region-ca"},
           {{"--region", "a", "--region-gateways", gateways, "--region-ca", certs + "/ca.pem"},
            "--region-cert"},
           {{"--region", "a", "--region-gateways", gateways, "--region-ca", certs + "/ca.pem",
             "--region-cert", certs + "/b.pem", "--region-key", certs + "/b-key.pem"},
            "its certificate names gateway.b.heterps, not gateway.a.heterps"}}) {
    std::vector<std::string> cmd = {"train", "--data", a, "--batch", "154", "--cluster", kCluster,
                                    "--plan", plans[0], "--job-dir", bad};
    cmd.insert(cmd.end(), flags.begin(), flags.end());
    r = Heterps(cmd, bad);
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(flags, " ");
    EXPECT_THAT(r.err, HasSubstr(message)) << absl::StrJoin(flags, " ");
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // On a cluster spec that knows the regions (region a's type cpu-a, b's cpu-b): a region the
  // spec lacks, and region b's job planned on region a's type, are refused before anything runs.
  std::string plan = Slurp(plans[0]);
  plan.replace(plan.find("local-two"), 9, "two-regions");
  const std::string on_a = bad + "/on-a.json";
  ASSERT_TRUE(base::WriteFileAtomically(on_a, plan).ok());
  for (const auto& [region, list, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"a", "a=127.0.0.1:7100,c=127.0.0.1:7101", "region 'c' is not a region of cluster "
                                                      "two-regions (its regions: a, b)"},
           {"b", "a=127.0.0.1:7100,b=127.0.0.1:7101",
            "stages[0].type: cpu-a is in region 'a', but the data"}}) {
    r = Heterps({"train", "--data", a, "--batch", "154", "--cluster",
                 "tests/specs/runtime/two-regions.yaml", "--plan", on_a, "--job-dir", bad,
                 "--region", region, "--region-gateways", list},
                bad);
    EXPECT_EQ(r.exit_code, 2) << region;
    EXPECT_THAT(r.err, HasSubstr(message)) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

// A pipeline cut at a region boundary (docs/regions.md, "A pipeline cut at a region
// boundary"): under --data-region a with --activations-may-cross, stage 0 (the input, the
// embeddings, bottom.0: the first learned layer of the dense features) on a's type and the rest
// on b's, the servers in a. What crosses, counted at the senders, is the stage boundary's
// activations (the pooled vectors and bottom.0's output, 26 x 16 + 64 floats a sample, with
// the labels) and their gradients back, and stage 1's dense parameters at the ends of rounds; no
// call that carries keys, so the data's ids stay in a. The egress is those bytes at the spec's
// prices.
TEST_F(RuntimeTest, APlanCutAtARegionBoundarySendsItsActivationsAcrossIt) {
  const std::string dir = Dir("cut_at_region");
  const std::string plan = dir + "/plan.json";
  ASSERT_TRUE(base::WriteFileAtomically(plan, R"({
  "format": "heterps-plan-v1", "model": "dlrm-small", "cluster": "two-regions",
  "batch_size": 256, "scheduler": "manual", "feasible": true,
  "data_region": "a", "activations_may_cross": true,
  "stages": [
    {"index": 0, "layers": ["input", "emb", "bottom.0"], "type": "cpu-a", "units": 2},
    {"index": 1, "layers": ["bottom.1", "interact", "top.0", "top.1", "top.2", "loss"],
     "type": "cpu-b", "units": 1}]})").ok());
  const Outcome r = Heterps({"train", "--data", data_, "--batch", "256", "--cluster",
                             "tests/specs/runtime/two-regions.yaml", "--plan", plan,
                             "--data-region", "a", "--activations-may-cross", "--job-dir", dir,
                             "--metrics-out", dir + "/metrics.json", "--eval-fraction", "0"},
                            dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("between regions (bytes per step"));
  EXPECT_THAT(r.out, HasSubstr("the data's ids and raw features stayed in region 'a'"));
  const json m = Metrics(dir);
  EXPECT_EQ(m["data_region"], "a");
  const int64_t steps = m["steps"];
  ASSERT_EQ(m["links"].size(), 2u) << m["links"].dump(1);
  const json &ab = m["links"][0], &ba = m["links"][1];
  ASSERT_EQ(ab["from"], "a");
  ASSERT_EQ(ba["from"], "b");
  // The activations: every sample's (26 x 16 + 64) floats, with the label and the messages'
  // framing within 2% more; their gradients the same floats without the labels.
  const double samples = m["train_samples"].get<double>() / steps;
  const double floats = samples * (26 * 16 + 64) * 4;
  EXPECT_GE(ab["activations_bytes_per_step"].get<double>(), floats);
  EXPECT_LE(ab["activations_bytes_per_step"].get<double>(), 1.02 * floats + samples * 4);
  EXPECT_GE(ba["gradients_bytes_per_step"].get<double>(), floats);
  EXPECT_LE(ba["gradients_bytes_per_step"].get<double>(), 1.02 * floats);
  EXPECT_EQ(ab["gradients_bytes_per_step"], 0.0);
  EXPECT_EQ(ba["activations_bytes_per_step"], 0.0);
  // Stage 1's replica holds its dense parameters (a synchronous job): they cross only at the
  // ends of rounds, whole (bottom.1: 64 x 16 + 16; top: 367 x 256 + 256, 256 x 128 + 128,
  // 128 + 1 floats), loaded from a and written back to it, a few times in the run.
  const double dense = 4.0 * (64 * 16 + 16 + 367 * 256 + 256 + 256 * 128 + 128 + 128 + 1);
  for (const json* link : {&ab, &ba}) {
    EXPECT_EQ((*link)["rows_bytes_per_step"], 0.0) << (*link)["from"];
    const double copies = (*link)["dense_bytes_per_step"].get<double>() * steps / dense;
    EXPECT_GE(copies, 0.99) << (*link)["from"];
    EXPECT_LE(copies, 10.0) << (*link)["from"];
    EXPECT_NEAR(copies, std::round(copies), 0.05) << (*link)["from"];
    // The cost model prices each step's traffic, the boundary's: within 1% of it.
    const double step = (*link)["bytes_per_step"].get<double>() -
                        (*link)["dense_bytes_per_step"].get<double>();
    EXPECT_NEAR((*link)["predicted_bytes_per_batch"].get<double>() / step, 1.0, 0.01)
        << (*link)["from"];
  }
  // Counted where sent: stage 0's activations are the link's; the egress is the spec's prices.
  EXPECT_EQ(m["stages"][0]["forward_bytes_per_batch"], ab["activations_bytes_per_step"]);
  const double usd = (ab["bytes_per_step"].get<double>() * 0.02 +
                      ba["bytes_per_step"].get<double>() * 0.09) * steps / 1e9;
  EXPECT_NEAR(m["egress_usd"].get<double>(), usd, 1e-12 + 1e-9 * usd);
  EXPECT_NEAR(ab["egress_usd"].get<double>() + ba["egress_usd"].get<double>(), usd, 1e-9 * usd);
  ExpectNoneLeft(dir);
}

TEST_F(RuntimeTest, BadJobsAreOneClearErrorAndLeaveNothingRunning) {
  const std::string dir = Dir("errors");
  // A plan for another model.
  Outcome r = Heterps({"train", "--data", data_, "--model", "examples/models/ctr-dnn.yaml",
                       "--cluster", kCluster, "--plan", kPlan, "--job-dir", dir},
                      dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("two-stages.json: model: the plan is for 'dlrm-small'"));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  // A missing data file.
  r = Heterps({"train", "--data", dir + "/missing.tsv", "--batch", "256", "--cluster", kCluster,
               "--plan", kPlan, "--job-dir", dir},
              dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("missing.tsv"));
  // A record of the last checkpoint that cannot be read: an error naming it, not a fresh start.
  for (const std::string record :
       {"garbage", "", R"({"format": "heterps-job-checkpoint-v1", "step": "ten", "losses": []})",
        R"({"format": "heterps-job-checkpoint-v1", "step": -3, "losses": []})"}) {
    ASSERT_TRUE(base::WriteFileAtomically(dir + "/checkpoint.json", record).ok());
    r = Heterps({"train", "--data", data_, "--batch", "256", "--cluster", kCluster, "--plan", kPlan,
                 "--job-dir", dir},
                dir);
    EXPECT_EQ(r.exit_code, 2) << record;
    EXPECT_THAT(r.err, HasSubstr(dir + "/checkpoint.json")) << record;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // --fresh: a new job beside the unfinished one.
  r = Heterps({"train", "--data", data_, "--batch", "256", "--cluster", kCluster, "--plan", kPlan,
               "--job-dir", dir, "--fresh", "--epochs", "1"},
              dir);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::filesystem::remove(dir + "/checkpoint.json");
  // The coordinator's port in use.
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  listen(s, 1);
  socklen_t size = sizeof(address);
  getsockname(s, reinterpret_cast<sockaddr*>(&address), &size);
  const std::string taken = absl::StrCat("127.0.0.1:", ntohs(address.sin_port));
  r = Heterps(
      {"node", "--coordinator", taken, "--rank", "0", "--world", "6", "--data", data_, "--batch",
       "256", "--cluster", kCluster, "--plan", kPlan, "--ps-shards", "2", "--job-dir", dir},
      dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot listen on " + taken));
  close(s);
  // An unreachable coordinator.
  r = Heterps(
      {"node", "--coordinator", taken, "--rank", "1", "--world", "6", "--connect-timeout", "1"},
      dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("heterps: error: rank 1: cannot reach the coordinator at " + taken));
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // said once
}

}  // namespace
}  // namespace heterps
