// The mixed plan on the host twin of a GPU, as a user runs it: stage 0 (the input and the
// embeddings) on the CPU, stage 1 (the dense layers) on an emulated GPU, hot embedding rows in
// the emulated GPU's memory in front of the parameter servers; real processes, real gRPC. The
// single-process CPU run and the same job without the GPU tier are the oracles.
#include <csignal>
#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/job_runner.h"

namespace heterps {
namespace {

using testing::Dir;
using ::testing::HasSubstr;
using testing::Heterps;
using testing::Metrics;
using ::testing::Not;
using testing::Outcome;
using json = nlohmann::json;

class GpuHostTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = ::testing::TempDir() + "/gpu_host_test_data.tsv";
    const Outcome r = Heterps({"gen-data", "--rows", "16000", "--seed", "5", "--out", data_},
                              ::testing::TempDir());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // The mixed plan with 2 parameter-server shards; the GPU tier (64 KiB: a few hundred of the
  // rows, so that rows come and go) unless `tier` is false.
  static std::vector<std::string> Mixed(const std::string& dir, bool tier,
                                        std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"train",
                                     "--data",
                                     data_,
                                     "--batch",
                                     "256",
                                     "--cluster",
                                     "tests/specs/runtime/local-mixed.yaml",
                                     "--plan",
                                     "tests/specs/runtime/mixed.json",
                                     "--ps-shards",
                                     "2",
                                     "--job-dir",
                                     dir,
                                     "--metrics-out",
                                     dir + "/metrics.json"};
    if (tier) {
      args.insert(args.end(), {"--gpu-cache-gib", "0.00006", "--gpu-cache-device", "twin:1"});
    }
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  // A one-stage plan of batches of 512 (tests/specs/runtime/one-stage-*.json), 1 shard.
  static std::vector<std::string> OneStage(const std::string& dir, const std::string& plan,
                                           std::vector<std::string> more = {}) {
    std::vector<std::string> args = {"train",
                                     "--data",
                                     data_,
                                     "--batch",
                                     "512",
                                     "--cluster",
                                     "tests/specs/runtime/local-mixed.yaml",
                                     "--plan",
                                     "tests/specs/runtime/one-stage-" + plan + ".json",
                                     "--ps-shards",
                                     "1",
                                     "--job-dir",
                                     dir,
                                     "--metrics-out",
                                     dir + "/metrics.json"};
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  static std::string data_;
};

std::string GpuHostTest::data_;

TEST_F(GpuHostTest, TheMixedPlanLearnsWhatTheCpuLearns) {
  const std::string single = Dir("gpu_single");
  Outcome r = Heterps({"train", "--single-process", "--data", data_, "--batch", "256",
                       "--metrics-out", single + "/metrics.json"},
                      single);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string mixed = Dir("gpu_mixed");
  r = Heterps(Mixed(mixed, true), mixed);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("twin:0"));
  EXPECT_THAT(r.out, HasSubstr("GPU tier        twin:1"));
  const json a = Metrics(single), b = Metrics(mixed);
  const std::vector<double> one = a["losses"], many = b["losses"];
  ASSERT_EQ(one.size(), many.size());
  ASSERT_GT(one.size(), 40u);
  // The twin's GEMMs round otherwise than the CPU's (docs/gpu.md), and Adagrad from an
  // accumulator of 0 takes a row's first step at full rate whatever the gradient's size, so the
  // last bits grow over the steps: 2.3e-3 of the loss at the 57th.
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_LT(std::abs(many[i] - one[i]), 1e-2 * std::abs(one[i])) << "step " << i;
  }
  EXPECT_NEAR(b["eval_auc"].get<double>(), a["eval_auc"].get<double>(), 1e-4);
  // Stage 1 ran on the emulated GPU, its activations and parameters over its "PCIe"; stage 0's
  // tier served keys from the device.
  ASSERT_EQ(b["stages"].size(), 2u);
  EXPECT_EQ(b["stages"][1]["device"], "twin:0");
  EXPECT_GT(b["stages"][1]["pcie_bytes_per_batch"].get<double>(), 0);
  const json tier = b["stages"][0]["gpu_tier"];
  ASSERT_FALSE(tier.is_null()) << b.dump(1);
  EXPECT_GT(tier["hit_rate"].get<double>(), 0.3);
  EXPECT_GT(tier["written_back_rows_per_batch"].get<double>(), 0);
  // The write-back, at the end of each round, is timed apart from the per-step figures.
  EXPECT_GT(tier["write_back_seconds"].get<double>(), 0);
  // Stage 0's busy time in parts: naming the keys to the tier, ending the step.
  const double busy = b["stages"][0]["measured_seconds_per_batch"];
  const double prefetch = b["stages"][0]["prefetch_seconds_per_batch"];
  const double step_end = b["stages"][0]["step_end_seconds_per_batch"];
  EXPECT_GT(prefetch, 0);
  EXPECT_GT(step_end, 0);
  EXPECT_LT(prefetch + step_end, busy);
  // And the micro-batches' passes: stage 0 looks its rows up and lays out their gradients, stage
  // 1 (the GPU) runs the dense chains; each stage's parts within its busy time.
  for (const json& stage : b["stages"]) {
    double parts = 0;
    for (const char* part : {"prefetch", "step_end", "lookup", "dense", "rows", "gradients"}) {
      parts += stage[std::string(part) + "_seconds_per_batch"].get<double>();
    }
    EXPECT_LT(parts, stage["measured_seconds_per_batch"].get<double>()) << stage.dump(1);
  }
  EXPECT_GT(b["stages"][0]["lookup_seconds_per_batch"].get<double>(), 0);
  EXPECT_GT(b["stages"][0]["rows_seconds_per_batch"].get<double>(), 0);
  EXPECT_EQ(b["stages"][0]["dense_seconds_per_batch"].get<double>(), 0);
  EXPECT_GT(b["stages"][1]["dense_seconds_per_batch"].get<double>(), 0);
  EXPECT_GT(b["stages"][1]["gradients_seconds_per_batch"].get<double>(), 0);
  EXPECT_GT(b["stages"][0]["read_seconds_per_batch"].get<double>(), 0);
  EXPECT_LT(b["stages"][0]["read_seconds_per_batch"].get<double>(),
            b["stages"][0]["run_seconds_per_batch"].get<double>());
  EXPECT_EQ(b["stages"][1]["run_seconds_per_batch"].get<double>(), 0);  // stage 0's alone
  // The step from the coordinator: running it (stage 0's calls), flushing and committing it.
  const double run = b["run_step_seconds"], commit = b["commit_seconds"];
  EXPECT_GT(run, 0);
  EXPECT_GT(commit, 0);
  // Means over the steps that end no round, against the mean over all: within a tenth (the
  // coordinator's own work between steps may be next to nothing).
  EXPECT_LT(run + commit, 1.1 * b["step_seconds"].get<double>());

  testing::ExpectNoneLeft(mixed);

  // Without the tier: the same parameters at the end, bit for bit (the tier applies the
  // optimizer as the servers do and writes back at the end of every round).
  const std::string plain = Dir("gpu_plain");
  r = Heterps(Mixed(plain, false), plain);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Metrics(plain)["parameter_digest"], b["parameter_digest"]);
  EXPECT_EQ(Metrics(plain)["stages"][0]["prefetch_seconds_per_batch"], 0.0);
  EXPECT_EQ(Metrics(plain)["losses"], b["losses"]);

  // Another cut of the steps (micro-batches of 128 samples rather than 64): the same run to the
  // bit, the GPU stage on the twin included (its chains run block by block as the CPU's do).
  const std::string coarse = Dir("gpu_coarse");
  r = Heterps(Mixed(coarse, true, {"--micro-batch", "128"}), coarse);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Metrics(coarse)["parameter_digest"], b["parameter_digest"]);
  EXPECT_EQ(Metrics(coarse)["losses"], b["losses"]);
}

TEST_F(GpuHostTest, AKilledGpuStageChangesNothingInTheEnd) {
  const std::string whole = Dir("gpu_whole");
  const Outcome r =
      Heterps(Mixed(whole, true, {"--checkpoint-every", "15", "--micro-batch", "64"}), whole);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json reference = Metrics(whole);
  // Ranks: 0 the coordinator, 1-2 the shards, 3 stage 0 (with the tier), 4 stage 1 (the GPU).
  for (const auto& [name, rank] : {std::pair{"gpu_kill_dense", 4}, std::pair{"gpu_kill_tier", 3}}) {
    SCOPED_TRACE(name);
    const std::string dir = Dir(name);
    const json m = testing::KillMidRun(
        Mixed(dir, true, {"--checkpoint-every", "15", "--micro-batch", "64"}), dir, rank, 15);
    EXPECT_EQ(m["restarts"], 1);
    EXPECT_EQ(m["parameter_digest"], reference["parameter_digest"]);
    EXPECT_EQ(m["losses"], reference["losses"]);
  }
}

// SIGTERM ends a synchronous round early, between checkpoints: the tier writes back before the
// stop's checkpoint, so that the resumed job ends where the uninterrupted one does.
TEST_F(GpuHostTest, AStoppedJobKeepsWhatTheTierHeld) {
  const std::string whole = Dir("gpu_stop_whole");
  const std::vector<std::string> more = {"--checkpoint-every", "1000", "--micro-batch", "64"};
  const Outcome r = Heterps(Mixed(whole, true, more), whole);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The signal follows step 10's checkpoint (watched every 20 ms; status.json is rewritten only
  // every second, and a fast host runs the job in a few).
  const std::string stopped = Dir("gpu_stop");
  const std::vector<std::string> args =
      Mixed(stopped, true, {"--checkpoint-every", "10", "--micro-batch", "64"});
  testing::Background job(args, stopped);
  ASSERT_TRUE(job.WaitFor([&] { return testing::CheckpointStep(stopped) >= 10; }));
  job.Signal(SIGTERM);
  EXPECT_EQ(job.Wait(), 128 + SIGTERM) << job.err();
  const Outcome resumed = Heterps(args, stopped);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.out + resumed.err, HasSubstr("resumed from the checkpoint of step"));
  EXPECT_EQ(Metrics(stopped)["parameter_digest"], Metrics(whole)["parameter_digest"]);
}

// Asynchronous: every row the tier loads is trained in the step that loads it, so it goes back to
// the servers once, when it is evicted or at the end (rows still resident at the end were lost to
// the servers once: the coordinator's write-back request never reached the tier).
TEST_F(GpuHostTest, AnAsynchronousJobWritesTheTierBackAtTheEnd) {
  const std::string dir = Dir("gpu_async");
  const Outcome r = Heterps(Mixed(dir, true, {"--mode", "async", "--micro-batch", "256"}), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json tier = Metrics(dir)["stages"][0]["gpu_tier"];
  ASSERT_FALSE(tier.is_null());
  EXPECT_GT(tier["loaded_rows_per_batch"].get<double>(), 0);
  EXPECT_EQ(tier["written_back_rows_per_batch"], tier["loaded_rows_per_batch"]);
}

// The README's command for the tier on the twin, planned here: the plan taken keeps stage 0 on
// one replica (a faster limit would give it two, which the tier cannot serve).
TEST_F(GpuHostTest, APlanMadeForTheTierKeepsStageZeroOnOneReplica) {
  const std::string dir = Dir("gpu_planned");
  const Outcome r =
      Heterps({"train", "--data", data_, "--batch", "256", "--gpu-emulate", "1", "--gpu-cache-gib",
               "0.001", "--job-dir", dir, "--metrics-out", dir + "/metrics.json"},
              dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("GPU tier        twin:0"));
  const json m = Metrics(dir);
  EXPECT_EQ(m["stages"][0]["units"], 1);
  EXPECT_FALSE(m["stages"][0]["gpu_tier"].is_null());
}

// A plan with a stage on a GPU runs in blocks as large as its micro-batches unless the user
// names a block size (a GPU runs a chain once per block, at a cost per run): here the whole
// step of 512 samples on one emulated GPU, one block. The same run as the one that names it.
TEST_F(GpuHostTest, AGpuPlanRunsInLargeBlocksUnlessTold) {
  const auto run = [](const std::string& name, std::vector<std::string> more) {
    const std::string dir = Dir(name);
    more.insert(more.end(), {"--checkpoint-every", "0"});
    const Outcome r = Heterps(OneStage(dir, "gpu", more), dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (r.exit_code != 0) return std::tuple{r.out, int64_t{0}, json()};
    const json job = json::parse(testing::Slurp(dir + "/job.json"));
    return std::tuple{r.out, job["settings"]["block_size"].get<int64_t>(), Metrics(dir)};
  };
  const auto [out, block, metrics] = run("gpu_blocks_default", {});
  ASSERT_EQ(block, 512);
  EXPECT_THAT(out, HasSubstr("steps of 512 samples in blocks of 512, micro-batches of 512"));
  const auto [told_out, told_block, told] = run("gpu_blocks_told", {"--block-size", "512"});
  EXPECT_EQ(told_block, 512);
  EXPECT_EQ(told["parameter_digest"], metrics["parameter_digest"]);
  EXPECT_EQ(told["losses"], metrics["losses"]);
  const auto [small_out, small_block, small] = run("gpu_blocks_small", {"--block-size", "64"});
  EXPECT_EQ(small_block, 64);
  EXPECT_THAT(small_out, HasSubstr("in blocks of 64, micro-batches of 512"));
  EXPECT_NE(small["losses"], metrics["losses"]);  // other sums
}

// A one-stage GPU plan with the tier on the stage's own device: the tier feeds the stage there
// (the rows pooled into the chain's input on the device, their gradients applied there), and the
// run is the run without the tier to the bit, synchronous and asynchronous.
TEST_F(GpuHostTest, TheTierFeedsAOneStageGpuPlanOnItsDevice) {
  for (const std::string mode : {"sync", "async"}) {
    SCOPED_TRACE(mode);
    const auto run = [&](const std::string& name, std::vector<std::string> more) {
      const std::string dir = Dir(name + "_" + mode);
      more.insert(more.end(), {"--checkpoint-every", "0", "--mode", mode});
      const Outcome r = Heterps(OneStage(dir, "gpu", more), dir);
      EXPECT_EQ(r.exit_code, 0) << r.err;
      return std::pair{r.out, r.exit_code == 0 ? Metrics(dir) : json()};
    };
    const auto [out, fed] = run("gpu_fed", {"--gpu-cache-gib", "0.00006"});
    EXPECT_THAT(out, HasSubstr("GPU tier        twin:0, 0 MB, feeding the stage on the device"));
    ASSERT_FALSE(fed.is_null());
    const json tier = fed["stages"][0]["gpu_tier"];
    ASSERT_FALSE(tier.is_null()) << fed.dump(1);
    EXPECT_EQ(tier["feeds_stage"], true);
    EXPECT_GT(tier["hit_rate"].get<double>(), 0.3);
    EXPECT_LT(tier["hit_rate"].get<double>(), 1.0);  // rows come and go: some pass through
    // The rows each step will miss are fetched while the step before runs (GpuTier::Anticipate).
    EXPECT_THAT(out, HasSubstr("of them fetched while the step before ran"));
    EXPECT_GT(tier["ahead_rows_per_batch"].get<double>(), 0);
    EXPECT_LE(tier["ahead_rows_per_batch"].get<double>(),
              tier["loaded_rows_per_batch"].get<double>());
    const auto [plain_out, plain] = run("gpu_unfed", {});
    EXPECT_EQ(fed["parameter_digest"], plain["parameter_digest"]);
    EXPECT_EQ(fed["losses"], plain["losses"]);
    EXPECT_EQ(fed["eval_auc"], plain["eval_auc"]);
    if (mode == "sync") {
      // Without looking ahead: the same run, every row loaded when its step starts.
      const auto [now_out, now] =
          run("gpu_fed_now", {"--gpu-cache-gib", "0.00006", "--no-gpu-cache-lookahead"});
      EXPECT_EQ(now["parameter_digest"], fed["parameter_digest"]);
      EXPECT_EQ(now["losses"], fed["losses"]);
      EXPECT_EQ(now["stages"][0]["gpu_tier"]["ahead_rows_per_batch"], 0);
      EXPECT_EQ(now["stages"][0]["gpu_tier"]["loaded_rows_per_batch"], tier["loaded_rows_per_batch"]);
    }
    // The rows stay on the device: less over PCIe than the stage's copies alone without the tier.
    EXPECT_LT(fed["stages"][0]["pcie_bytes_per_batch"].get<double>(),
              plain["stages"][0]["pcie_bytes_per_batch"].get<double>());
  }
}

// A one-stage GPU plan of one block a step holds its dense parameters and their optimizer on
// the device, and writes them back at the ends of rounds (a checkpoint every 5 steps, an
// evaluation each epoch): the run of the same job whose servers keep them, to the bit, without
// the parameters going up and their gradients coming down every step; after kill -9 of the
// stage it ends where the uninterrupted run does. A tier feeds the stage in all three, fetching
// each step's misses while the step before runs, across the rounds' and the epochs' ends.
TEST_F(GpuHostTest, AOneStageGpuPlanHoldsItsDenseParametersOnTheDevice) {
  const std::vector<std::string> job = {"--epochs", "2", "--checkpoint-every", "5",
                                        "--gpu-cache-gib", "0.00006"};
  const auto run = [&job](const std::string& name, std::vector<std::string> more) {
    const std::string dir = Dir(name);
    more.insert(more.end(), job.begin(), job.end());
    const Outcome r = Heterps(OneStage(dir, "gpu", more), dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::pair{r.out, r.exit_code == 0 ? Metrics(dir) : json()};
  };
  const auto [out, held] = run("gpu_held", {});
  EXPECT_THAT(out, HasSubstr("dense on GPU    stage 0: parameters and optimizer held on twin:0, "
                             "written back at the ends of rounds"));
  ASSERT_FALSE(held.is_null());
  EXPECT_EQ(held["stages"][0]["dense_held"], true);
  EXPECT_GT(held["stages"][0]["gpu_tier"]["ahead_rows_per_batch"].get<double>(), 0);
  const auto [servers_out, servers] = run("gpu_dense_on_servers", {"--dense-on-servers"});
  ASSERT_FALSE(servers.is_null());
  EXPECT_EQ(servers["stages"][0]["dense_held"], false);
  EXPECT_THAT(servers_out, Not(HasSubstr("dense on GPU")));
  EXPECT_EQ(held["parameter_digest"], servers["parameter_digest"]);
  EXPECT_EQ(held["losses"], servers["losses"]);
  EXPECT_EQ(held["eval_auc"], servers["eval_auc"]);
  // dlrm-small's fc layers hold 129,169 parameters (13-64-16 and 367-256-128-1, with biases): 4
  // bytes each went up every step and as many came down; the write-backs take values and Adam's
  // state down every 5 steps.
  EXPECT_LT(held["stages"][0]["pcie_bytes_per_batch"].get<double>(),
            servers["stages"][0]["pcie_bytes_per_batch"].get<double>() - 4 * 129169);

  // Ranks: 0 the coordinator, 1 the shard, 2 the stage.
  const std::string dir = Dir("gpu_held_kill");
  const json killed = testing::KillMidRun(OneStage(dir, "gpu", job), dir, 2, 15);
  EXPECT_EQ(killed["restarts"], 1);
  EXPECT_EQ(killed["parameter_digest"], held["parameter_digest"]);
  EXPECT_EQ(killed["losses"], held["losses"]);
}

// A resumed job keeps its block size whatever plan it resumes on: here one begun on the GPU
// (blocks of 512) goes on on the CPU (whose own default is 64), and ends as the uninterrupted run.
TEST_F(GpuHostTest, AResumeOnAnotherPlanKeepsTheBlockSize) {
  const auto args = [](const std::string& dir, const std::string& plan) {
    return OneStage(dir, plan, {"--epochs", "2", "--checkpoint-every", "5"});
  };
  const std::string whole = Dir("gpu_resume_whole");
  Outcome r = Heterps(args(whole, "gpu"), whole);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string dir = Dir("gpu_resume");
  testing::Background job(args(dir, "gpu"), dir);
  ASSERT_TRUE(job.WaitFor([&] { return testing::CheckpointStep(dir) >= 5; }));
  job.Signal(SIGTERM);
  EXPECT_EQ(job.Wait(), 128 + SIGTERM) << job.err();
  r = Heterps(args(dir, "cpu"), dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out + r.err, HasSubstr("resumed from the checkpoint of step"));
  EXPECT_THAT(r.out, HasSubstr("in blocks of 512"));
  EXPECT_THAT(r.out, HasSubstr("cpu-a"));
  // Another device's rounding: the same steps, to the CPU's last bits.
  const std::vector<double> a = Metrics(whole)["losses"], b = Metrics(dir)["losses"];
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-3 * std::abs(a[i])) << i;
}

TEST_F(GpuHostTest, TheTierNeedsOneReplicaOfStageZero) {
  const std::string dir = Dir("gpu_refused");
  const Outcome r = Heterps(
      {"train", "--data", data_, "--batch", "256", "--cluster",
       "tests/specs/runtime/local-two.yaml", "--plan", "tests/specs/runtime/two-stages.json",
       "--gpu-emulate", "1", "--gpu-cache-gib", "0.001", "--job-dir", dir},
      dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("the GPU tier needs stage 0 on one replica"));
}

}  // namespace
}  // namespace heterps
