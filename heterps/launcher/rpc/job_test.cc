// A whole job in this process: the coordinator (RunJob) and every other role (RunNode) on
// threads, talking gRPC on loopback; the single-process trainer as the oracle. (runtime_test runs
// the same as separate processes; this one also runs under the sanitizers.)
#include <filesystem>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/data/synthetic.h"
#include "heterps/launcher/rpc/coordinator.h"
#include "heterps/launcher/rpc/node.h"
#include "heterps/worker/trainer.h"

namespace heterps::launcher::rpc {
namespace {

TEST(JobTest, TwoStagesOnThreadsReproduceTheSingleProcessRun) {
  const std::string data = ::testing::TempDir() + "/job_test.tsv";
  data::SyntheticOptions synthetic;
  synthetic.rows = 4000;
  synthetic.seed = 7;
  ASSERT_TRUE(data::WriteSynthetic(synthetic, data).ok());
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->batch_size = 512;

  worker::TrainOptions single;
  single.files = {data};
  auto expected = worker::Train(*spec, single);
  ASSERT_TRUE(expected.ok()) << expected.status();

  // Two stages: input and the embeddings on 2 replicas, the dense layers on 1; 2 shards.
  sched::RunPlan plan;
  const int emb = spec->FindLayer("emb"), last = static_cast<int>(spec->layers.size()) - 1;
  plan.stages = {{0, emb, "cpu-a", "cpu", 2}, {emb + 1, last, "cpu-b", "cpu", 1}};
  worker::JobSettings settings;
  settings.ps_shards = 2;
  settings.micro_batch = 64;
  settings.checkpoint_every = 3;
  auto text = base::ReadTextFile("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(text.ok());
  auto job = worker::MakeJob({*text, "examples/models/dlrm-small.yaml", 512}, plan,
                             config::ClusterSpec(), {data}, settings);
  ASSERT_TRUE(job.ok()) << job.status();
  // Blocks so large that a replica of the first stage would read none: refused, saying why.
  worker::JobSettings coarse = settings;
  coarse.block_size = 512;
  coarse.micro_batch = 512;
  auto refused = worker::MakeJob({*text, "examples/models/dlrm-small.yaml", 512}, plan,
                                 config::ClusterSpec(), {data}, coarse);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(),
              ::testing::HasSubstr("makes 1 block of 512 for 2 replicas of the first stage"));
  RunOptions options;
  options.job_dir = ::testing::TempDir() + "/job_test_dir";
  std::filesystem::remove_all(options.job_dir);
  options.token = "job-test-token";
  const int world = 1 + 2 + 3;
  std::vector<std::thread> nodes;
  std::vector<absl::Status> ended(world);
  options.on_listening = [&](const std::string& coordinator) {
    for (int rank = 1; rank < world; ++rank) {
      nodes.emplace_back([&, rank, coordinator] {
        NodeOptions node;
        node.coordinator = coordinator;
        node.rank = rank;
        node.world = world;
        node.token = options.token;
        ended[rank] = RunNode(node, nullptr);
      });
    }
  };
  auto result = RunJob(*job, options);
  for (std::thread& t : nodes) t.join();
  ASSERT_TRUE(result.ok()) << result.status();
  for (int rank = 1; rank < world; ++rank) EXPECT_TRUE(ended[rank].ok()) << ended[rank];
  ASSERT_EQ(result->losses.size(), expected->losses.size());
  for (size_t i = 0; i < expected->losses.size(); ++i) {
    EXPECT_NEAR(result->losses[i], expected->losses[i], 1e-4 * expected->losses[i]) << i;
  }
  EXPECT_NEAR(result->eval_auc, expected->eval_auc, 1e-4);
  EXPECT_EQ(result->train_samples, expected->train_samples);
  ASSERT_EQ(result->stages.size(), 2u);
  EXPECT_GT(result->stages[1].measured_seconds, 0);
  // Complete: no checkpoint left for a next job to resume from.
  EXPECT_FALSE(std::filesystem::exists(options.job_dir + "/checkpoint.json"));
}

// A re-planner that asks once, at step `at`, for `next`.
class SwitchAt final : public Replanner {
 public:
  SwitchAt(int64_t at, worker::JobSpec next) : at_(at), next_(std::move(next)) {}
  void Running(const worker::JobSpec&) override {}
  std::optional<PlanSwitch> Check(const JobPosition& p) override {
    if (asked_ || p.step < at_) return std::nullopt;
    asked_ = true;
    PlanSwitch s;
    s.job = next_;
    s.reason = "test";
    s.required = true;
    return s;
  }
  void RoleLost(const std::string&) override {}
  double CostPerHour() const override { return 1; }
  std::optional<double> FirstPlanCostPerHour() const override { return 1; }

 private:
  const int64_t at_;
  const worker::JobSpec next_;
  bool asked_ = false;
};

// The processes of an external launcher (threads here) take new roles at a switch: 2 shards and
// 2 + 1 replicas, then 3 shards and 1 + 1 replicas cut elsewhere; the same training.
TEST(JobTest, ASwitchGivesTheSameProcessesNewRoles) {
  const std::string data = ::testing::TempDir() + "/job_test_switch.tsv";
  data::SyntheticOptions synthetic;
  synthetic.rows = 4000;
  synthetic.seed = 8;
  ASSERT_TRUE(data::WriteSynthetic(synthetic, data).ok());
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  spec->batch_size = 256;
  worker::TrainOptions single;
  single.files = {data};
  auto expected = worker::Train(*spec, single);
  ASSERT_TRUE(expected.ok()) << expected.status();

  auto text = base::ReadTextFile("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(text.ok());
  const int emb = spec->FindLayer("emb"), cut = spec->FindLayer("bottom.1");
  const int last = static_cast<int>(spec->layers.size()) - 1;
  sched::RunPlan a, b;
  a.stages = {{0, emb, "cpu-a", "cpu", 2}, {emb + 1, last, "cpu-b", "cpu", 1}};
  b.stages = {{0, cut, "cpu-a", "cpu", 1}, {cut + 1, last, "cpu-b", "cpu", 1}};
  worker::JobSettings settings;
  settings.ps_shards = 2;
  settings.micro_batch = 64;
  settings.checkpoint_every = 4;
  auto job_a =
      worker::MakeJob({*text, "dlrm-small.yaml", 256}, a, config::ClusterSpec(), {data}, settings);
  settings.ps_shards = 3;
  auto job_b =
      worker::MakeJob({*text, "dlrm-small.yaml", 256}, b, config::ClusterSpec(), {data}, settings);
  ASSERT_TRUE(job_a.ok() && job_b.ok());
  SwitchAt replanner(6, *job_b);
  RunOptions options;
  options.job_dir = ::testing::TempDir() + "/job_test_switch_dir";
  std::filesystem::remove_all(options.job_dir);
  options.token = "job-test-token";
  options.replanner = &replanner;
  const int world = 1 + 2 + 3;
  std::vector<std::thread> nodes;
  std::vector<absl::Status> ended(world);
  options.on_listening = [&](const std::string& coordinator) {
    for (int rank = 1; rank < world; ++rank) {
      nodes.emplace_back([&, rank, coordinator] {
        NodeOptions node;
        node.coordinator = coordinator;
        node.rank = rank;
        node.world = world;
        node.token = options.token;
        ended[rank] = RunNode(node, nullptr);
      });
    }
  };
  auto result = RunJob(*job_a, options);
  for (std::thread& t : nodes) t.join();
  ASSERT_TRUE(result.ok()) << result.status();
  for (int rank = 1; rank < world; ++rank) EXPECT_TRUE(ended[rank].ok()) << ended[rank];
  ASSERT_EQ(result->segments.size(), 2u);
  EXPECT_EQ(result->segments[1].first_step, 6);
  EXPECT_EQ(result->segments[0].steps, 6);
  EXPECT_EQ(result->segments[0].steps + result->segments[1].steps,
            static_cast<int64_t>(expected->losses.size()));
  EXPECT_EQ(result->ps_shards, 3);
  EXPECT_EQ(result->job.plan.stages[0].last, cut);
  ASSERT_EQ(result->losses.size(), expected->losses.size());
  for (size_t i = 0; i < expected->losses.size(); ++i) {
    EXPECT_NEAR(result->losses[i], expected->losses[i], 1e-4 * expected->losses[i]) << i;
  }
  EXPECT_NEAR(result->eval_auc, expected->eval_auc, 1e-4);
}

}  // namespace
}  // namespace heterps::launcher::rpc
