// Elastic jobs as a user runs them (docs/elastic.md): `heterps train` with a cluster state file
// and `heterps ctl`, real processes on loopback. A running job switches plans (replicas, the
// stage cut, the parameter-server shards), is preempted, weighs a price drop against the cost of
// switching, and refuses bad updates; the uninterrupted run of the first plan is the oracle.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/env.h"
#include "tests/job_runner.h"

namespace heterps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using json = nlohmann::json;
using testing::Background;
using testing::CheckpointStep;
using testing::Dir;
using testing::Heterps;
using testing::Metrics;
using testing::Outcome;
using testing::Slurp;

const std::string kCluster = "tests/specs/runtime/local-two.yaml";
const std::string kPlanA = "tests/specs/runtime/two-stages.json";  // cpu-a x2 | cpu-b x1
const std::string kPlanB = "tests/specs/runtime/elastic-b.json";   // another cut, cpu-a x1

void Write(const std::string& path, const std::string& text) {
  ASSERT_TRUE(base::WriteFileAtomically(base::DefaultEnv(), path, text).ok());
}

class ElasticTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = ::testing::TempDir() + "/elastic_test_data.tsv";
    const Outcome r = Heterps({"gen-data", "--rows", "24000", "--seed", "6", "--out", data_},
                              ::testing::TempDir());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // Plan A of dlrm-small on the two local types, 2 parameter-server shards, synchronous, one
  // pass over the data (85 steps), a checkpoint every 10.
  static std::vector<std::string> PlanA(const std::string& dir,
                                        std::vector<std::string> more = {}) {
    // clang-format off
    std::vector<std::string> args = {
        "train", "--data", data_, "--batch", "256", "--cluster", kCluster, "--plan", kPlanA,
        "--ps-shards", "2", "--micro-batch", "64", "--checkpoint-every", "10",
        "--scheduler", "exact", "--throughput", "100",
        "--job-dir", dir, "--metrics-out", dir + "/metrics.json"};
    // clang-format on
    args.insert(args.end(), more.begin(), more.end());
    return args;
  }

  // The uninterrupted run of plan A over `epochs`: the oracle of every switch.
  static const json& Reference(int epochs = 1) {
    static auto* references = new std::map<int, json>;
    auto it = references->find(epochs);
    if (it != references->end()) return it->second;
    const std::string dir = Dir(absl::StrCat("elastic_reference_", epochs));
    const Outcome r =
        Heterps(PlanA(dir, {"--epochs", std::to_string(epochs)}), dir, absl::Seconds(300));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return references->emplace(epochs, Metrics(dir)).first->second;
  }

  // Every step's loss and the final parameters the reference's to the bit (whatever the plans'
  // replicas, stages and shards: the steps' sums do not depend on them), every step trained once.
  static void ExpectSameTraining(const json& m, int epochs = 1) {
    const json& reference = Reference(epochs);
    const std::vector<double> want = reference["losses"], got = m["losses"];
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "step " << i;
    EXPECT_EQ(m["parameter_digest"], reference["parameter_digest"]);
    EXPECT_NEAR(m["eval_auc"].get<double>(), reference["eval_auc"].get<double>(), 1e-6);
    EXPECT_EQ(m["train_samples"], reference["train_samples"]);
  }

  static std::string data_;
};

std::string ElasticTest::data_;

TEST_F(ElasticTest, ASwitchToAnotherCutAndShardCountTrainsWhatTheFirstPlanWould) {
  const std::string dir = Dir("elastic_switch");
  Background job(PlanA(dir), dir);
  ASSERT_TRUE(job.WaitFor([&] { return CheckpointStep(dir) >= 10; })) << job.err();
  const Outcome ctl = Heterps({"ctl", dir, "--plan", kPlanB, "--ps-shards", "3"}, dir + "/..");
  ASSERT_EQ(ctl.exit_code, 0) << ctl.err;
  ASSERT_EQ(job.Wait(), 0) << job.err();
  EXPECT_THAT(job.err(), HasSubstr("switching at step"));
  const json m = Metrics(dir);
  ASSERT_EQ(m["segments"].size(), 2u) << m.dump(1);
  const json& before = m["segments"][0];
  const json& after = m["segments"][1];
  EXPECT_EQ(before["first_step"], 0);
  EXPECT_GE(after["first_step"].get<int>(), 10);
  EXPECT_LT(after["first_step"].get<int>(), m["steps"].get<int>());
  EXPECT_THAT(after["plan"].get<std::string>(),
              HasSubstr("input..bottom.1 cpu-a x1 | interact..loss cpu-b x1; 3 ps"));
  EXPECT_THAT(after["reason"].get<std::string>(), HasSubstr("plan requested"));
  // Every step once: no restart, the segments' steps add up to the job's.
  EXPECT_EQ(m["restarts"], 0);
  EXPECT_EQ(before["steps"].get<int>() + after["steps"].get<int>(), m["steps"].get<int>());
  EXPECT_EQ(before["steps"], after["first_step"]);
  EXPECT_EQ(m["ps_shards"], 3);
  ExpectSameTraining(m);
  EXPECT_GT(after["switch_seconds"].get<double>(), 0);
  EXPECT_GT(m["cost_usd"].get<double>(), 0);
  EXPECT_THAT(Slurp(dir + "/out"), HasSubstr("over 2 plans"));
  // The report draws the plan the job ended on and lists both, the second from its switch.
  const std::string page = Slurp(dir + "/report.html");
  const size_t begin = page.find("const REPORT = ");
  ASSERT_NE(begin, std::string::npos);
  const size_t from = begin + std::string("const REPORT = ").size();
  const json report = json::parse(page.substr(from, page.find(";\n", from) - from));
  ASSERT_EQ(report["plans"].size(), 2u);
  EXPECT_EQ(report["plans"][0]["seconds"], 0.0);
  EXPECT_GT(report["plans"][1]["seconds"].get<double>(), 0);
  EXPECT_EQ(report["plan"], report["plans"][1]["plan"]);
  EXPECT_NE(report["plans"][0]["plan"], report["plans"][1]["plan"]);
  EXPECT_EQ(report["plans"][1]["plan"]["stages"][1]["type"], "cpu-b");
  // A finished job reads no more requests: ctl says so and leaves none behind.
  const std::string control = dir + "/control.json";  // launcher::JobControlPath
  std::filesystem::remove(control);
  const Outcome late = Heterps({"ctl", dir, "--throughput", "1000"}, dir + "/..");
  EXPECT_EQ(late.exit_code, 2);
  EXPECT_THAT(late.err, HasSubstr("the job has ended (done)"));
  EXPECT_FALSE(std::filesystem::exists(control));
  testing::ExpectNoneLeft(dir);
}

// Asynchronous, with rounds that end at evaluations and no checkpoints: the switch, heard at a
// round's end, still checkpoints its step, and the new plan goes on from there.
TEST_F(ElasticTest, AnAsynchronousSwitchAtAnEvaluationGoesOnFromItsStep) {
  const std::string dir = Dir("elastic_async_switch");
  std::vector<std::string> args = PlanA(dir, {"--mode", "async", "--eval-interval", "20"});
  *(std::find(args.begin(), args.end(), "--checkpoint-every") + 1) = "0";
  Background job(args, dir);
  ASSERT_TRUE(job.WaitFor([&] {
    const json s = json::parse(Slurp(dir + "/status.json"), nullptr, false);
    return s.is_object() && s.value("step", 0) >= 5;
  })) << job.err();
  const Outcome ctl = Heterps({"ctl", dir, "--plan", kPlanB, "--ps-shards", "3"}, dir + "/..");
  ASSERT_EQ(ctl.exit_code, 0) << ctl.err;
  ASSERT_EQ(job.Wait(), 0) << job.err();
  const json m = Metrics(dir);
  ASSERT_EQ(m["segments"].size(), 2u) << m.dump(1);
  const json& before = m["segments"][0];
  const json& after = m["segments"][1];
  EXPECT_EQ(after["first_step"].get<int>() % 20, 0);
  EXPECT_GE(after["first_step"].get<int>(), 20);
  EXPECT_EQ(before["steps"], after["first_step"]);
  EXPECT_EQ(m["restarts"], 0);
  EXPECT_EQ(before["steps"].get<int>() + after["steps"].get<int>(), m["steps"].get<int>());
  EXPECT_EQ(m["train_samples"], Reference()["train_samples"]);
}

TEST_F(ElasticTest, APreemptedTypeIsPlannedAroundAndBothSegmentsAreAccounted) {
  const std::string dir = Dir("elastic_preempt");
  const std::string state = dir + "/state.json";
  Background job(PlanA(dir, {"--cluster-state", state}), dir);
  ASSERT_TRUE(job.WaitFor([&] { return CheckpointStep(dir) >= 10; })) << job.err();
  // The cloud takes cpu-b away, and its process with it (ranks: 1-2 the shards, 3-4 stage 0's
  // replicas on cpu-a, 5 stage 1's on cpu-b).
  Write(state, R"({"types": [{"name": "cpu-b", "units": 0}]})");
  const json processes = json::parse(Slurp(dir + "/processes.json"));
  kill(processes["ranks"]["5"].get<int>(), SIGKILL);
  ASSERT_EQ(job.Wait(), 0) << job.err();
  EXPECT_THAT(job.err(), HasSubstr("--cluster-state " + state + " does not exist yet"));
  const json m = Metrics(dir);
  ASSERT_EQ(m["segments"].size(), 2u) << m.dump(1);
  const std::string second = m["segments"][1]["plan"];
  EXPECT_THAT(second, Not(HasSubstr("cpu-b")));
  EXPECT_THAT(m["segments"][1]["reason"].get<std::string>(), HasSubstr("cpu-b: 1 -> 0 units"));
  // The first plan alone could not have finished.
  EXPECT_TRUE(m["first_plan_cost_usd"].is_null());
  EXPECT_GT(m["segments"][0]["cost_usd"].get<double>(), 0);
  EXPECT_GT(m["segments"][1]["cost_usd"].get<double>(), 0);
  ExpectSameTraining(m);
  testing::ExpectNoneLeft(dir);
}

TEST_F(ElasticTest, APriceDropSwitchesOnlyWhenItPaysAndBadUpdatesChangeNothing) {
  const std::string dir = Dir("elastic_price");
  const std::string state = dir + "/state.json";
  // The spot type is not there when the job starts.
  Write(state, R"({"types": [{"name": "cpu-spot", "units": 0}]})");
  // clang-format off
  const std::vector<std::string> args = {
      "train", "--data", data_, "--batch", "256", "--epochs", "8",
      "--cluster", "tests/specs/runtime/local-spot.yaml",
      "--plan", "tests/specs/runtime/one-stage.json", "--ps-shards", "1",
      "--checkpoint-every", "10", "--scheduler", "exact", "--throughput", "100",
      "--cluster-state", state, "--job-dir", dir, "--metrics-out", dir + "/metrics.json"};
  // clang-format on
  Background job(args, dir);
  ASSERT_TRUE(job.WaitFor([&] { return CheckpointStep(dir) >= 10; })) << job.err();
  const auto logged = [&](const std::string& text) {
    return job.WaitFor([&] { return Slurp(dir + "/replan.log").find(text) != std::string::npos; });
  };
  // Updates that cannot be read are refused, each with a line, and change nothing.
  Write(state, "{\"types\": [");
  ASSERT_TRUE(logged("refused: " + state + ": not JSON")) << job.err();
  Write(state, R"({"types": [{"name": "cpu-spot", "units": -2}]})");
  ASSERT_TRUE(logged("types[0].units: -2 is out of range")) << job.err();
  Write(state, R"({"types": [{"name": "gpu-x", "units": 4}]})");
  ASSERT_TRUE(logged("'gpu-x' is not a type of local-spot")) << job.err();
  // A state that no longer names the spot type gives it back the spec's figures (1 unit at the
  // on-demand price: no cheaper, so no switch): the state at the start is not kept for ever.
  Write(state, R"({"types": [{"name": "cpu-a", "units": 1}]})");
  ASSERT_TRUE(logged("cpu-spot: 0 -> 1 units")) << job.err();
  // The spot type appears, a hair cheaper: not worth a switch.
  Write(state, R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.0995}]})");
  ASSERT_TRUE(logged("-> $0.0995 per hour")) << job.err();
  const std::string log = Slurp(dir + "/replan.log");
  const std::string last = log.substr(log.rfind("-> $0.0995 per hour"));
  EXPECT_THAT(last, HasSubstr("would cost"));
  EXPECT_THAT(last, HasSubstr("keeping the current plan"));
  EXPECT_THAT(job.err(), Not(HasSubstr("switching at step")));
  // Then a tenth of the price: worth it.
  Write(state, R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.01}]})");
  ASSERT_EQ(job.Wait(), 0) << job.err();
  const json m = Metrics(dir);
  ASSERT_EQ(m["segments"].size(), 2u) << m.dump(1) << job.err();
  EXPECT_THAT(m["segments"][1]["plan"].get<std::string>(), HasSubstr("cpu-spot x1"));
  EXPECT_THAT(m["segments"][1]["reason"].get<std::string>(),
              HasSubstr("cpu-spot: $0.0995 -> $0.0100"));
  EXPECT_NEAR(m["segments"][1]["cost_per_hour_usd"].get<double>(), 0.01, 1e-9);
  EXPECT_GT(m["first_plan_cost_usd"].get<double>(), 0);
  EXPECT_GT(m["switch_cost_usd"].get<double>(), 0);
}

// Under an external launcher the job keeps the processes it was given: a plan that needs as
// many takes them over (new roles), one that needs another number is refused with a line.
TEST_F(ElasticTest, UnderMpirunASwitchKeepsTheProcessesItWasGiven) {
  const std::string dir = Dir("elastic_mpirun");
  ASSERT_TRUE(
      base::WriteFileAtomically(base::DefaultEnv(), dir + "/token", "elastic-token\n").ok());
  // Two epochs: the second request must find the job still training, on a fast host too.
  std::vector<std::string> node = PlanA(dir, {"--epochs", "2"});
  node[0] = "node";
  std::string command = "exec mpirun --allow-run-as-root --oversubscribe -n 6 " + testing::kBinary;
  for (const std::string& a : node) absl::StrAppend(&command, " ", a);
  absl::StrAppend(&command, " --coordinator 127.0.0.1:", testing::FreePort(), " --token-file ", dir,
                  "/token >", dir, "/out 2>", dir, "/err");
  auto child = base::Subprocess::Start({"/bin/sh", "-c", command});
  ASSERT_TRUE(child.ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (CheckpointStep(dir) < 10 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
  ASSERT_GE(CheckpointStep(dir), 10) << Slurp(dir + "/err");
  // 1 coordinator, 1 shard, 1 + 1 replicas: 4 processes, not the 6 there are.
  ASSERT_EQ(Heterps({"ctl", dir, "--plan", kPlanB, "--ps-shards", "1"}, dir + "/..").exit_code, 0);
  while (Slurp(dir + "/err").find("the job keeps its plan") == std::string::npos &&
         absl::Now() < deadline + absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_THAT(Slurp(dir + "/err"), HasSubstr("needs 4 processes; the external launcher started 6"));
  // 1 coordinator, 3 shards, 1 + 1 replicas: the 6 there are.
  ASSERT_EQ(Heterps({"ctl", dir, "--plan", kPlanB, "--ps-shards", "3"}, dir + "/..").exit_code, 0);
  auto code = (*child)->Wait(absl::Seconds(180));
  ASSERT_TRUE(code.ok());
  ASSERT_EQ(*code, 0) << Slurp(dir + "/err");
  const json m = Metrics(dir);
  ASSERT_EQ(m["segments"].size(), 2u) << m.dump(1);
  EXPECT_EQ(m["ps_shards"], 3);
  ExpectSameTraining(m, 2);
}

}  // namespace
}  // namespace heterps
