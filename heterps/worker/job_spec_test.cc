#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/worker/job.h"

namespace heterps::worker {
namespace {

using ::testing::HasSubstr;

struct Fixture {
  std::string text;
  config::ModelSpec spec;
  sched::RunPlan plan;
};

Fixture DlrmTwoStages() {
  Fixture f;
  f.text = *base::ReadTextFile("examples/models/dlrm-small.yaml");
  f.spec = *config::ParseModelSpec(f.text, "dlrm-small.yaml");
  const int emb = f.spec.FindLayer("emb"), last = static_cast<int>(f.spec.layers.size()) - 1;
  f.plan.model = "dlrm-small";
  f.plan.scheduler = "manual";
  f.plan.throughput = 1234.5;
  f.plan.stages = {{0, emb, "cpu-a", "cpu", 2, 0.01, 0.008, 0.002},
                   {emb + 1, last, "gpu-b", "cuda:0", 1, 0.02, 0.015, 0.005}};
  return f;
}

TEST(JobSpecTest, MadeOnceAndShippedWhole) {
  const Fixture f = DlrmTwoStages();
  JobSettings settings;
  settings.mode = Consistency::kAsync;
  settings.epochs = 2;
  settings.eval_fraction = 0.2;
  settings.bad_lines = data::BadLinePolicy::kSkip;
  settings.reader_threads = 3;
  settings.tables.sparse_optimizer = {ps::OptimizerKind::kAdam, 0.3f};
  settings.tables.seed = 99;
  settings.checkpoint_every = 7;
  auto job = MakeJob({f.text, "dlrm-small.yaml", 512}, f.plan, config::ClusterSpec(),
                     {"a.tsv", "b.tsv"}, settings);
  ASSERT_TRUE(job.ok()) << job.status();
  // The batch size is in the text every role parses, on the line it was on.
  EXPECT_EQ(job->model.batch_size, 512);
  EXPECT_EQ(job->plan.batch_size, 512);
  EXPECT_THAT(job->model_yaml, HasSubstr("batch_size: 512"));
  EXPECT_EQ(std::count(job->model_yaml.begin(), job->model_yaml.end(), '\n'),
            std::count(f.text.begin(), f.text.end(), '\n'));
  // Resolved: two micro-batches per stage of a replica's share of 256; shards sized (no cluster
  // type here: one).
  EXPECT_EQ(job->settings.micro_batch, 64);
  EXPECT_EQ(job->settings.ps_shards, 1);
  EXPECT_EQ(job->eval_every(), 5);

  auto back = ParseJob(JobToJson(*job), "job.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(JobToJson(*back), JobToJson(*job));
  EXPECT_EQ(back->model.batch_size, 512);
  ASSERT_EQ(back->plan.stages.size(), 2u);
  EXPECT_EQ(back->plan.stages[1].device, "cuda:0");
  EXPECT_EQ(back->plan.stages[0].units, 2);
  EXPECT_EQ(back->settings.mode, Consistency::kAsync);
  EXPECT_EQ(back->settings.bad_lines, data::BadLinePolicy::kSkip);
  EXPECT_EQ(back->settings.tables.sparse_optimizer.kind, ps::OptimizerKind::kAdam);
  EXPECT_EQ(back->settings.tables.sparse_optimizer.learning_rate, 0.3f);
  EXPECT_EQ(back->settings.tables.seed, 99u);
  EXPECT_THAT(back->files, ::testing::ElementsAre("a.tsv", "b.tsv"));
  const data::ReaderOptions read = back->Reader(1, data::ReaderOptions::Part::kEval);
  EXPECT_EQ(read.rank, 1);
  EXPECT_EQ(read.world, 2);
  EXPECT_EQ(read.batch_size, 64);
  EXPECT_EQ(read.eval_every, 5);
  EXPECT_EQ(read.parser_threads, 3);
  // Not part of the identity: a resume may parse with more or fewer threads.
  JobSpec more = *back;
  more.settings.reader_threads = 1;
  EXPECT_EQ(JobIdentity(more), JobIdentity(*back));
}

// The region the data is kept in is the job's: it travels with the plan, and a resume under
// another rule, or none, is another job.
TEST(JobSpecTest, TheDataRegionTravelsAndIsPartOfTheIdentity) {
  Fixture f = DlrmTwoStages();
  f.plan.data_region = "eu-west-1";
  auto job = MakeJob({f.text, "dlrm-small.yaml", 512}, f.plan, config::ClusterSpec(), {"a.tsv"},
                     JobSettings());
  ASSERT_TRUE(job.ok()) << job.status();
  auto back = ParseJob(JobToJson(*job), "job.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->plan.data_region, "eu-west-1");
  EXPECT_EQ(JobIdentity(*back), JobIdentity(*job));
  EXPECT_THAT(JobIdentity(*job), ::testing::Contains("data_region=eu-west-1"));
  JobSpec anywhere = *back;
  anywhere.plan.data_region.clear();
  EXPECT_THAT(JobIdentity(anywhere), ::testing::Contains("data_region=(none)"));
  JobSpec elsewhere = *back;
  elsewhere.plan.data_region = "us-east-1";
  EXPECT_NE(JobIdentity(elsewhere), JobIdentity(*back));
  // So is the policy on activations (--activations-may-cross).
  EXPECT_FALSE(back->plan.activations_may_cross);
  EXPECT_THAT(JobIdentity(*back), ::testing::Contains("activations_may_cross=0"));
  f.plan.activations_may_cross = true;
  auto crossing = MakeJob({f.text, "dlrm-small.yaml", 512}, f.plan, config::ClusterSpec(),
                          {"a.tsv"}, JobSettings());
  ASSERT_TRUE(crossing.ok()) << crossing.status();
  auto crossing_back = ParseJob(JobToJson(*crossing), "job.json");
  ASSERT_TRUE(crossing_back.ok()) << crossing_back.status();
  EXPECT_TRUE(crossing_back->plan.activations_may_cross);
  EXPECT_NE(JobIdentity(*crossing_back), JobIdentity(*back));
}

TEST(JobSpecTest, TheDefaultBlockSizeFollowsWhereTheStagesRun) {
  Fixture f = DlrmTwoStages();
  config::ClusterSpec cluster;
  cluster.types.resize(2);
  cluster.types[0].name = "cpu-a";
  cluster.types[1].name = "gpu-b";
  cluster.types[1].kind = config::DeviceKind::kGpu;
  // A GPU stage: stage 0's default micro-batch (2048 over 2 replicas, over 2 per stage of 2
  // stages) is 256 samples, one block.
  EXPECT_EQ(PlanBlockSize(f.plan, cluster, 2048), 256);
  // Rounded up (the last block shorter), never below the CPU's default.
  EXPECT_EQ(PlanBlockSize(f.plan, cluster, 2000), 250);
  EXPECT_EQ(PlanBlockSize(f.plan, cluster, 2001), 251);
  EXPECT_EQ(PlanBlockSize(f.plan, cluster, 256), kDefaultBlockSize);
  EXPECT_EQ(PlanBlockSize(f.plan, cluster, 10), kDefaultBlockSize);
  // One stage on one GPU: one block a step.
  sched::RunPlan one = f.plan;
  one.stages = {{0, f.plan.stages[1].last, "gpu-b", "", 1, 0, 0, 0}};
  EXPECT_EQ(PlanBlockSize(one, cluster, 2048), 2048);
  EXPECT_EQ(PlanBlockSize(one, cluster, 8192), 8192);
  // Replicas get shares as even as the samples allow: 3 of 2048 in blocks of 683 (683, 683,
  // 682), not 512, 512 and 1024 as a power of two would give.
  sched::RunPlan three = one;
  three.stages[0].units = 3;
  const int64_t block = PlanBlockSize(three, cluster, 2048);
  EXPECT_EQ(block, 683);
  EXPECT_EQ(ShareLines(2048, block, 2, 3), std::make_pair(int64_t{1366}, int64_t{2048}));
  // A micro-batch the user named holds whole blocks: its largest divisor not above the plan's.
  EXPECT_EQ(PlanBlockSize(one, cluster, 2048, 512), 512);
  EXPECT_EQ(PlanBlockSize(one, cluster, 2048, 1000), 1000);
  EXPECT_EQ(PlanBlockSize(one, cluster, 2048, 3000), 1500);
  EXPECT_EQ(PlanBlockSize(f.plan, cluster, 2048, 96), 96);
  EXPECT_EQ(PlanBlockSize(one, cluster, 2048, 2062), 1031);                  // 2 x 1031
  EXPECT_EQ(PlanBlockSize(f.plan, cluster, 2048, 2062), kDefaultBlockSize);  // not blocks of 2
  // The type's kind, or the device where the cluster does not name the type.
  EXPECT_EQ(PlanBlockSize(f.plan, config::ClusterSpec(), 2048), 256);
  one.stages[0].device = "twin:3";
  EXPECT_EQ(PlanBlockSize(one, config::ClusterSpec(), 2048), 2048);
  // All on CPUs: the default, whatever the batch.
  sched::RunPlan cpu = f.plan;
  cpu.stages[1].type = "cpu-a";
  cpu.stages[1].device = "cpu";
  EXPECT_EQ(PlanBlockSize(cpu, cluster, 2048), kDefaultBlockSize);
  EXPECT_EQ(PlanBlockSize(cpu, cluster, 1 << 20), kDefaultBlockSize);

  // The job made with it: micro-batches of whole blocks, and a micro-batch that is not one is
  // refused with the way out.
  JobSettings settings;
  settings.block_size = PlanBlockSize(one, cluster, 2048);
  auto job = MakeJob({f.text, "dlrm-small.yaml", 2048}, one, cluster, {"a.tsv"}, settings);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->settings.micro_batch, 2048);
  settings.micro_batch = 512;
  job = MakeJob({f.text, "dlrm-small.yaml", 2048}, one, cluster, {"a.tsv"}, settings);
  EXPECT_THAT(job.status().message(), HasSubstr("--block-size"));
}

TEST(JobSpecTest, PlansThatDoNotFitTheModelAreRefused) {
  Fixture f = DlrmTwoStages();
  f.plan.stages[1].first += 1;  // a layer left out
  auto job = MakeJob({f.text, "dlrm-small.yaml", 0}, f.plan, config::ClusterSpec(), {"a.tsv"},
                     JobSettings());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.status().message(), HasSubstr("stage 1"));
  f = DlrmTwoStages();
  f.plan.stages[0].units = 0;
  EXPECT_THAT(MakeJob({f.text, "m.yaml", 0}, f.plan, config::ClusterSpec(), {"a.tsv"}, {})
                  .status()
                  .message(),
              HasSubstr("0 units"));
  f = DlrmTwoStages();
  JobSettings bad;
  bad.eval_fraction = 0.9;
  EXPECT_THAT(MakeJob({f.text, "m.yaml", 0}, f.plan, config::ClusterSpec(), {"a.tsv"}, bad)
                  .status()
                  .message(),
              HasSubstr("eval fraction"));
}

TEST(JobSpecTest, ABadWireFormNamesTheField) {
  const Fixture f = DlrmTwoStages();
  auto job = MakeJob({f.text, "m.yaml", 0}, f.plan, config::ClusterSpec(), {"a.tsv"}, {});
  ASSERT_TRUE(job.ok());
  std::string json = JobToJson(*job);
  const size_t at = json.find("\"micro_batch\": ");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, std::string("\"micro_batch\": ").size(), "\"micro_batch\": \"ten\", \"x\": ");
  auto parsed = ParseJob(json, "job.json");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("job.json: settings.micro_batch"));
  EXPECT_THAT(ParseJob("{}", "j.json").status().message(), HasSubstr("j.json: format"));
}

}  // namespace
}  // namespace heterps::worker
