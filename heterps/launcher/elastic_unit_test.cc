// The parts of elastic jobs below the coordinator: the cluster state and control files, the
// re-planner's decisions (against the decision rule computed by hand) and the segment ledger's
// accounts (against sums done by hand). The runtime's switches with real processes are in
// tests/elastic_test.cc.
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/env.h"
#include "heterps/base/file.h"
#include "heterps/cost/cost_model.h"
#include "heterps/launcher/cluster_state.h"
#include "heterps/launcher/planning.h"
#include "heterps/launcher/replanner.h"
#include "heterps/launcher/segment_ledger.h"

namespace heterps::launcher {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

base::Env* const env = base::DefaultEnv();

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/elastic_unit_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

void Write(const std::string& path, const std::string& text) {
  ASSERT_TRUE(base::WriteFileAtomically(env, path, text).ok());
}

// cpu-a and cpu-spot: the same figures, $0.10 an hour, one unit each.
config::ClusterSpec Spot() {
  auto cluster = config::LoadClusterSpec("tests/specs/runtime/local-spot.yaml");
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return *cluster;
}

TEST(ClusterStateTest, ReadsUnitsAndPricesAndNamesEveryMistake) {
  const config::ClusterSpec cluster = Spot();
  auto state = ParseClusterState(
      R"({"types": [{"name": "cpu-spot", "units": 0}, {"name": "cpu-a", "price_per_hour": 0.5}]})",
      "s.json", cluster);
  ASSERT_TRUE(state.ok()) << state.status();
  const config::ClusterSpec now = ApplyClusterState(cluster, *state);
  EXPECT_EQ(now.types[now.FindType("cpu-spot")].units, 0);
  EXPECT_EQ(now.types[now.FindType("cpu-spot")].price_per_hour, 0.10);
  EXPECT_EQ(now.types[now.FindType("cpu-a")].units, 1);
  EXPECT_EQ(now.types[now.FindType("cpu-a")].price_per_hour, 0.5);

  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"{\"types\": [", "s.json: not JSON"},
           {R"({"types": [{"name": "cpu-a", "units": -1}]})", "s.json: types[0].units: -1 is out"},
           {R"({"types": [{"name": "cpu-a", "units": 1.5}]})",
            "types[0].units: expected an integer"},
           {R"({"types": [{"name": "gpu", "units": 1}]})", "'gpu' is not a type of local-spot"},
           {R"({"types": [{"name": "cpu-a", "units": 1}, {"name": "cpu-a", "units": 2}]})",
            "types[1].name: 'cpu-a' is named twice"},
           {R"({"types": [{"name": "cpu-a", "price_per_hour": -3}]})", "is not a price"},
           {R"({"types": [{"name": "cpu-a", "unit": 3}]})", "types[0].unit: unknown field"},
           {R"({"types": [{"name": "cpu-a"}]})", "names neither units nor price_per_hour"},
           {R"({"typs": []})", "typs: unknown field"}}) {
    SCOPED_TRACE(text);
    auto bad = ParseClusterState(text, "s.json", cluster);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr(message));
  }
}

TEST(JobControlTest, WhatCtlWritesTheJobReads) {
  const std::string dir = Dir("control");
  JobControl c;
  ASSERT_TRUE(
      absl::ParseTime(absl::RFC3339_full, "2026-11-24T06:00:00Z", &c.deadline.emplace(), nullptr));
  ASSERT_TRUE(WriteJobControl(env, dir, c).ok());
  auto read = ParseJobControl(*base::ReadFile(env, JobControlPath(dir)), "control.json");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->deadline, c.deadline);
  EXPECT_EQ(read->throughput, 0);

  JobControl p;
  p.plan_json = R"({"format": "heterps-plan-v1", "stages": []})";
  p.plan_source = "b.json";
  p.ps_shards = 3;
  ASSERT_TRUE(WriteJobControl(env, dir, p).ok());
  read = ParseJobControl(*base::ReadFile(env, JobControlPath(dir)), "control.json");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_THAT(read->plan_json, HasSubstr("heterps-plan-v1"));
  EXPECT_EQ(read->plan_source, "b.json");
  EXPECT_EQ(read->ps_shards, 3);

  for (
      const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
          {R"({"format": "heterps-control-v1", "throughput": 5, "deadline": "2026-11-24T06:00:00Z"})",
           "not both"},
          {R"({"format": "heterps-control-v1", "deadline": "tomorrow"})", "not an RFC 3339 time"},
          {R"({"format": "heterps-control-v1", "throughput": -5})", "throughput"},
          {R"({"format": "heterps-control-v1", "ps_shards": 99})", "ps_shards: 99"},
          {R"({"format": "other"})", "format"}}) {
    SCOPED_TRACE(text);
    auto bad = ParseJobControl(text, "control.json");
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bad.status().message(), HasSubstr(message));
  }
}

// A re-planner of dlrm-small on Spot(), the job running the whole model on one `type` unit, and
// what it logged.
struct Fixture {
  std::string dir;
  config::ClusterSpec cluster = Spot();
  std::string model_text;
  worker::JobSpec job;
  std::vector<std::string> logged;
  std::unique_ptr<Replanner> replanner;

  explicit Fixture(const std::string& name, const std::string& type = "cpu-a", int max_losses = 3) {
    dir = Dir(name);
    model_text = *base::ReadTextFile("examples/models/dlrm-small.yaml");
    job = *MakeJobOn(Whole(type));
    ElasticOptions o;
    o.model = job.model;
    o.cluster = cluster;
    o.cluster_state = dir + "/state.json";
    o.control = JobControlPath(dir);
    o.scheduler = "exact";
    o.throughput_limit = 100;
    o.max_losses = max_losses;
    o.poll = absl::ZeroDuration();
    o.recipe.model = {model_text, "examples/models/dlrm-small.yaml", 256};
    o.recipe.data_files = {"train.tsv"};
    o.recipe.settings.ps_shards = 1;
    o.log = [this](const std::string& line) { logged.push_back(line); };
    options = o;
  }

  void Start() {
    replanner = NewElasticReplanner(options);
    replanner->Running(job);
  }

  sched::RunPlan Whole(const std::string& type) {
    sched::RunPlan plan;
    plan.model = "dlrm-small";
    plan.batch_size = 256;
    auto spec = config::ParseModelSpec(model_text, "dlrm-small.yaml");
    plan.stages = {{0, static_cast<int>(spec->layers.size()) - 1, type, "cpu", 1}};
    return plan;
  }

  absl::StatusOr<worker::JobSpec> MakeJobOn(const sched::RunPlan& plan, int ps_shards = 1) {
    worker::JobSettings settings;
    settings.ps_shards = ps_shards;
    return worker::MakeJob({model_text, "examples/models/dlrm-small.yaml", 256}, plan, cluster,
                           {"train.tsv"}, settings);
  }

  std::string Log() const { return absl::StrJoin(logged, "\n"); }

  ElasticOptions options;
};

JobPosition At(int64_t samples_left, double switch_seconds = 5) {
  JobPosition p;
  p.step = 10;
  p.total_steps = 1000;
  p.samples_left = samples_left;
  p.switch_seconds = switch_seconds;
  return p;
}

TEST(ReplannerTest, APriceDropSwitchesWhenItSavesMoreThanTheSwitchCosts) {
  Fixture f("price");
  Write(f.dir + "/state.json", R"({"types": [{"name": "cpu-spot", "units": 0}]})");
  f.Start();
  EXPECT_FALSE(f.replanner->Check(At(10'000'000)).has_value());  // nothing changed
  EXPECT_THAT(f.logged, IsEmpty());
  EXPECT_NEAR(f.replanner->CostPerHour(), 0.10, 1e-12);

  // Half a percent cheaper: under the 5% threshold.
  Write(f.dir + "/state.json",
        R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.0995}]})");
  EXPECT_FALSE(f.replanner->Check(At(10'000'000)).has_value());
  EXPECT_THAT(f.Log(), HasSubstr("cpu-spot: 0 -> 1 units"));
  EXPECT_THAT(f.Log(), HasSubstr("would cost"));
  EXPECT_THAT(f.Log(), HasSubstr("keeping the current plan"));

  // A tenth of the price, for ten million samples: a switch, priced as the rule says.
  Write(f.dir + "/state.json",
        R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.01}]})");
  const std::optional<PlanSwitch> next = f.replanner->Check(At(10'000'000, 5));
  ASSERT_TRUE(next.has_value()) << f.Log();
  EXPECT_FALSE(next->required);
  EXPECT_THAT(next->reason, HasSubstr("cpu-spot: $0.0995 -> $0.0100 per hour"));
  ASSERT_EQ(next->job.stages(), 1);
  EXPECT_EQ(next->job.plan.stages[0].type, "cpu-spot");
  // The same figures on both types: the same rate, a tenth of the price.
  EXPECT_NEAR(next->new_usd / next->keep_usd, 0.1, 1e-3);
  EXPECT_NEAR(next->switch_usd, 5 * 0.10 / 3600, 1e-12);
  EXPECT_GT(next->keep_usd - next->new_usd - next->switch_usd, 0.05 * next->keep_usd);
  // The switch is in the log (replan.log) beside the decisions that kept the plan.
  EXPECT_THAT(f.logged.back(), HasSubstr("cpu-spot: $0.0995 -> $0.0100 per hour: switching to "));
  EXPECT_THAT(f.logged.back(), HasSubstr(DescribePlan(next->job)));
  EXPECT_THAT(f.logged.back(), HasSubstr(" for the samples left, the switch "));
}

TEST(ReplannerTest, ASwitchThatCostsMoreThanItSavesIsNotMade) {
  Fixture f("price_short");
  Write(f.dir + "/state.json",
        R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.0995}]})");
  f.Start();
  Write(f.dir + "/state.json",
        R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.01}]})");
  // A thousand samples left, and a switch of a minute.
  EXPECT_FALSE(f.replanner->Check(At(1000, 60)).has_value());
  EXPECT_THAT(f.Log(), HasSubstr("to switch, against"));
}

// A state file too large to be one is refused with one line, once, and the job carries on; the
// same file cut back to size is read.
TEST(ReplannerTest, AnOversizedStateIsRefusedInOneLine) {
  Fixture f("oversized");
  f.Start();
  const std::string padding(kMaxClusterStateBytes, ' ');
  Write(f.dir + "/state.json",
        R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.01}]})" + padding);
  EXPECT_FALSE(f.replanner->Check(At(10'000'000)).has_value());
  EXPECT_FALSE(f.replanner->Check(At(10'000'000)).has_value());
  const std::string log = f.Log();
  EXPECT_THAT(log, HasSubstr("state.json: larger than 1,048,576 bytes"));
  EXPECT_THAT(log, HasSubstr("the job carries on as it was"));
  EXPECT_EQ(log.find("larger than"), log.rfind("larger than")) << "said twice: " << log;
  Write(f.dir + "/state.json",
        R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.01}]})");
  const std::optional<PlanSwitch> next = f.replanner->Check(At(10'000'000));
  ASSERT_TRUE(next.has_value()) << f.Log();
  EXPECT_THAT(next->reason, HasSubstr("$0.0100 per hour"));
}

// A plan that has just started, with no steps measured yet, is priced at its prediction corrected
// by the last plan's measured/predicted ratio, not at its raw prediction.
TEST(ReplannerTest, ANewPlanIsPricedWithTheLastCalibration) {
  const std::string spot =
      R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.0995}]})";
  const std::string cheap =
      R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.01}]})";
  Fixture raw("calibration_raw");
  Write(raw.dir + "/state.json", spot);
  raw.Start();
  Write(raw.dir + "/state.json", cheap);
  const std::optional<PlanSwitch> uncalibrated = raw.replanner->Check(At(10'000'000));
  ASSERT_TRUE(uncalibrated.has_value()) << raw.Log();
  // keep = samples / predicted rate x $0.10 per hour.
  const double predicted = 10'000'000 * 0.10 / 3600 / uncalibrated->keep_usd;

  Fixture f("calibration");
  Write(f.dir + "/state.json", spot);
  f.Start();
  JobPosition measured = At(10'000'000);
  measured.samples_per_second = predicted / 4;  // the plan runs at a quarter of its prediction
  EXPECT_FALSE(f.replanner->Check(measured).has_value());
  f.replanner->Running(f.job);  // a new plan: nothing measured yet
  Write(f.dir + "/state.json", cheap);
  const std::optional<PlanSwitch> next = f.replanner->Check(At(10'000'000));
  ASSERT_TRUE(next.has_value()) << f.Log();
  EXPECT_NEAR(next->keep_usd / uncalibrated->keep_usd, 4, 1e-6);
  EXPECT_NEAR(next->new_usd / uncalibrated->new_usd, 4, 1e-6);
}

TEST(ReplannerTest, APreemptedOrDyingTypeIsPlannedAround) {
  Fixture f("preempt");
  f.Start();
  Write(f.dir + "/state.json", R"({"types": [{"name": "cpu-a", "units": 0}]})");
  std::optional<PlanSwitch> next = f.replanner->Check(At(1'000'000));
  ASSERT_TRUE(next.has_value()) << f.Log();
  EXPECT_TRUE(next->required);
  EXPECT_THAT(next->reason, HasSubstr("cpu-a: 1 -> 0 units"));
  EXPECT_EQ(next->job.plan.stages[0].type, "cpu-spot");
  EXPECT_FALSE(f.replanner->FirstPlanCostPerHour().has_value());  // the first plan cannot run

  // Roles that keep dying on a type: after max_losses deaths, one of its units is given up.
  Fixture g("deaths", "cpu-a", 2);
  g.Start();
  g.replanner->RoleLost("cpu-a");
  EXPECT_FALSE(g.replanner->Check(At(1'000'000)).has_value());
  g.replanner->RoleLost("cpu-a");
  next = g.replanner->Check(At(1'000'000));
  ASSERT_TRUE(next.has_value()) << g.Log();
  EXPECT_TRUE(next->required);
  EXPECT_THAT(next->reason, HasSubstr("cpu-a: one unit given up after 2 deaths"));
  EXPECT_EQ(next->job.plan.stages[0].type, "cpu-spot");
}

// `heterps train --gpu-emulate N` plans with N units of the host twin of a GPU: every version of a
// watched cluster spec gains them too, as the job's first catalog did (where the command line's
// callback once added them, and a spec read any other way had none).
TEST(ReplannerTest, AWatchedSpecGainsTheEmulatedGpusAsTheJobsStartDid) {
  Fixture f("watch-gpu");
  f.options.cluster_watch = f.dir + "/cluster.yaml";
  f.options.gpu_emulate = 1;
  const std::string spot = *base::ReadTextFile("tests/specs/runtime/local-spot.yaml");
  Write(f.options.cluster_watch, spot);
  f.Start();
  // The new spec names cpu-a alone, and the state takes its unit away: only the twin is left.
  Write(f.options.cluster_watch, spot.substr(0, spot.find("  - name: cpu-spot")));
  Write(f.dir + "/state.json", R"({"types": [{"name": "cpu-a", "units": 0}]})");
  std::optional<PlanSwitch> next = f.replanner->Check(At(1'000'000));
  ASSERT_TRUE(next.has_value()) << f.Log();
  EXPECT_TRUE(next->required);
  // The twin, or on a host with GPUs one of them (AddLocalGpus adds both): a GPU type.
  EXPECT_TRUE(absl::StartsWith(next->job.plan.stages[0].type, "gpu-")) << f.Log();
}

// Four spot units, and a limit twice what one unit does with the whole model (`one_unit`,
// samples/s): a re-plan to more units than one.
void AskForTwiceOneUnit(const Fixture& f, double* one_unit) {
  absl::StatusOr<cost::CostModel> model =
      cost::CostModel::Create(f.job.model, f.cluster, cost::ColocatedWorkload(1, 1));
  ASSERT_TRUE(model.ok()) << model.status();
  *one_unit = model->batch() / model->StageSeconds(0, model->num_layers() - 1, 0);
  Write(f.dir + "/state.json", R"({"types": [{"name": "cpu-spot", "units": 4}]})");
  JobControl control;
  control.throughput = 2 * *one_unit;
  ASSERT_TRUE(WriteJobControl(env, f.dir, control).ok());
}

// A job with a GPU tier: a re-plan keeps the tier's stage on one replica, through the first
// embedding layer (JobRules), where one that did not know the rule proposed a plan the job then
// refused.
TEST(ReplannerTest, AReplanKeepsTheGpuTiersStageOnOneReplica) {
  for (const bool rules : {false, true}) {
    SCOPED_TRACE(rules ? "with the rules" : "without");
    Fixture f(rules ? "tier_rules" : "tier_no_rules");
    f.options.recipe.settings.gpu_tier_bytes = 1 << 20;
    f.options.recipe.settings.gpu_tier_device = "twin:0";
    f.options.rules.gpu_tier = rules;
    f.Start();
    double one_unit = 0;
    ASSERT_NO_FATAL_FAILURE(AskForTwiceOneUnit(f, &one_unit));
    const std::optional<PlanSwitch> next = f.replanner->Check(At(10'000'000));
    if (!rules) {
      EXPECT_FALSE(next.has_value());
      EXPECT_THAT(f.Log(), HasSubstr("the GPU tier needs stage 0 on one replica"));
      continue;
    }
    ASSERT_TRUE(next.has_value()) << f.Log();
    EXPECT_EQ(next->job.plan.stages[0].units, 1) << DescribePlan(next->job);
    EXPECT_GE(next->job.plan.stages[0].last, 1) << DescribePlan(next->job);  // emb
    EXPECT_GE(next->job.plan.throughput, 2 * one_unit * (1 - 1e-9));
  }
}

// A job of one block a step (a GPU plan's default block size, kept for the job's life): a
// re-plan gives stage 0 no more replicas than the step has blocks (JobRules::block_size), where
// one that did not know proposed several that the job then refused.
TEST(ReplannerTest, AReplanGivesStageZeroNoMoreReplicasThanBlocks) {
  for (const bool rules : {false, true}) {
    SCOPED_TRACE(rules ? "with the rule" : "without");
    Fixture f(rules ? "blocks_rules" : "blocks_no_rules");
    f.options.recipe.settings.block_size = 256;  // the batch: one block a step
    if (rules) f.options.rules.block_size = 256;
    f.Start();
    double one_unit = 0;
    ASSERT_NO_FATAL_FAILURE(AskForTwiceOneUnit(f, &one_unit));
    const std::optional<PlanSwitch> next = f.replanner->Check(At(10'000'000));
    if (!rules) {
      EXPECT_FALSE(next.has_value());
      EXPECT_THAT(f.Log(), HasSubstr("makes 1 block of 256 for "));
      continue;
    }
    ASSERT_TRUE(next.has_value()) << f.Log();
    EXPECT_EQ(next->job.plan.stages[0].units, 1) << DescribePlan(next->job);
    EXPECT_EQ(next->job.settings.block_size, 256);
  }
}

TEST(ReplannerTest, ControlAsksForAPlanAndBadUpdatesAreRefused) {
  Fixture f("control");
  f.Start();
  Write(f.dir + "/state.json", R"({"types": [{"name": "cpu-spot", "units": -1}]})");
  EXPECT_FALSE(f.replanner->Check(At(1'000'000)).has_value());
  EXPECT_THAT(f.Log(), HasSubstr("refused: " + f.dir + "/state.json: types[0].units: -1"));
  EXPECT_NEAR(f.replanner->CostPerHour(), 0.10, 1e-12);  // the catalog it had

  Write(JobControlPath(f.dir), "{\"format\": \"heterps-control-v1\", \"throughput\": \"fast\"}");
  EXPECT_FALSE(f.replanner->Check(At(1'000'000)).has_value());
  EXPECT_THAT(f.Log(), HasSubstr("control.json: throughput: expected a number"));

  JobControl control;
  control.plan_json = R"({"format": "heterps-plan-v1", "model": "dlrm-small",
      "cluster": "local-spot", "batch_size": 256, "stages": [{"index": 0, "type": "cpu-spot",
      "units": 1, "layers": ["input", "emb", "bottom.0", "bottom.1", "interact", "top.0",
      "top.1", "top.2", "loss"]}]})";
  control.plan_source = "spot.json";
  control.ps_shards = 2;
  ASSERT_TRUE(WriteJobControl(env, f.dir, control).ok());
  std::optional<PlanSwitch> next = f.replanner->Check(At(1'000'000));
  ASSERT_TRUE(next.has_value()) << f.Log();
  EXPECT_THAT(next->reason, HasSubstr("plan requested: spot.json"));
  EXPECT_EQ(next->job.plan.stages[0].type, "cpu-spot");
  EXPECT_EQ(next->job.settings.ps_shards, 2);
  EXPECT_GT(next->job.plan.throughput, 0);  // predicted, the file having none
}

// A job whose data is kept in one region stays there: a type of another region that turns cheap
// is not switched to, and a plan asked for on it is refused, naming it and both regions.
TEST(ReplannerTest, AJobWhoseDataIsKeptInARegionStaysThere) {
  Fixture f("residency");
  for (config::ResourceType& type : f.options.cluster.types) {
    type.region = type.name == "cpu-spot" ? "eu-west-1" : "us-east-1";
  }
  for (auto [from, to] : {std::pair{"us-east-1", "eu-west-1"}, std::pair{"eu-west-1", "us-east-1"}}) {
    f.options.cluster.links.push_back({from, to, 0, 1e9 / 8, 0.040, 0.02e-9});
  }
  f.options.rules.data_region = "us-east-1";
  f.options.rules.data_source = "train.tsv";
  Write(f.dir + "/state.json", R"({"types": [{"name": "cpu-spot", "units": 0}]})");
  f.Start();
  Write(f.dir + "/state.json",
        R"({"types": [{"name": "cpu-spot", "units": 1, "price_per_hour": 0.01}]})");
  EXPECT_FALSE(f.replanner->Check(At(10'000'000, 5)).has_value()) << f.Log();
  EXPECT_NEAR(f.replanner->CostPerHour(), 0.10, 1e-12);

  JobControl control;
  control.plan_json = R"({"format": "heterps-plan-v1", "model": "dlrm-small",
      "cluster": "local-spot", "batch_size": 256, "stages": [{"index": 0, "type": "cpu-spot",
      "units": 1, "layers": ["input", "emb", "bottom.0", "bottom.1", "interact", "top.0",
      "top.1", "top.2", "loss"]}]})";
  control.plan_source = "spot.json";
  ASSERT_TRUE(WriteJobControl(env, f.dir, control).ok());
  EXPECT_FALSE(f.replanner->Check(At(10'000'000)).has_value());
  EXPECT_THAT(f.Log(), HasSubstr("refused: spot.json: stages[0].type: cpu-spot is in region "
                                 "'eu-west-1', but the data (train.tsv) is kept in region "
                                 "'us-east-1' and nothing derived from it may leave it"));
}

// Under --activations-may-cross a plan file may put the stages from the first layer past the raw
// features (dlrm-small: bottom.1) in another region; one made under a rule keeps its policy, one
// made without a rule is checked stage by stage.
TEST(CheckResidencyTest, ThePolicyOnActivationsIsKeptAndItsLineHolds) {
  Fixture f("residency-policy");
  config::ClusterSpec cluster = f.cluster;
  for (config::ResourceType& type : cluster.types) {
    type.region = type.name == "cpu-spot" ? "eu-west-1" : "us-east-1";
  }
  auto spec = config::ParseModelSpec(f.model_text, "dlrm-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(cost::FirstLayerAwayFromData(*spec), 3);
  ASSERT_EQ(spec->layers[3].name, "bottom.1");
  const int last = static_cast<int>(spec->layers.size()) - 1;
  JobRules rules;
  rules.data_region = "us-east-1";
  rules.data_source = "train.tsv";
  rules.activations_may_cross = true;
  sched::RunPlan plan;
  plan.data_region = "us-east-1";
  plan.activations_may_cross = true;
  plan.stages = {{0, 2, "cpu-a", "cpu", 1}, {3, last, "cpu-spot", "cpu", 1}};
  EXPECT_TRUE(CheckResidency(plan, "p.json", *spec, cluster, rules).ok());
  sched::RunPlan unruled = plan;
  unruled.data_region.clear();
  unruled.activations_may_cross = false;
  EXPECT_TRUE(CheckResidency(unruled, "p.json", *spec, cluster, rules).ok());
  JobRules strict = rules;
  strict.activations_may_cross = false;
  EXPECT_EQ(CheckResidency(plan, "p.json", *spec, cluster, strict).message(),
            "p.json: activations_may_cross: the plan lets activations leave region 'us-east-1', "
            "the job does not (--activations-may-cross); run it under the plan's rule, so that "
            "the job's re-plans keep it too");
  EXPECT_THAT(CheckResidency(unruled, "p.json", *spec, cluster, strict).message(),
              HasSubstr("stages[1].type: cpu-spot is in region 'eu-west-1'"));
  sched::RunPlan early = plan;
  early.stages = {{0, 1, "cpu-a", "cpu", 1}, {2, last, "cpu-spot", "cpu", 1}};
  EXPECT_EQ(CheckResidency(early, "p.json", *spec, cluster, rules).message(),
            "p.json: stages[1].type: cpu-spot is in region 'eu-west-1', but the data (train.tsv) "
            "is kept in region 'us-east-1' and nothing derived from it may leave it before layer "
            "'bottom.1' (activations may cross from there on)");
}

// A re-planner whose prices the test sets.
class Prices final : public Replanner {
 public:
  void Running(const worker::JobSpec&) override {}
  std::optional<PlanSwitch> Check(const JobPosition&) override { return std::nullopt; }
  void RoleLost(const std::string&) override {}
  double CostPerHour() const override { return now; }
  std::optional<double> FirstPlanCostPerHour() const override { return first; }
  double now = 0;
  std::optional<double> first;
};

TEST(SegmentLedgerTest, CostsIntegrateThePricesOfEveryStretch) {
  Fixture f("ledger");
  Prices prices;
  SegmentLedger ledger(&prices);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  auto at = [&](double s) { return t0 + absl::Seconds(s); };
  prices.now = 3.6;  // $0.001 a second
  prices.first = 3.6;
  ledger.Begin(f.job, "start", 0, t0, t0);
  ledger.Step(0, 100, at(10));  // the start-up: 10 s
  ledger.Step(1, 100, at(20));
  prices.now = 7.2;
  prices.first = 7.2;
  ledger.Step(2, 100, at(30));
  ledger.Checkpointed(3, 0.5);
  EXPECT_NEAR(ledger.samples_per_second(), 200.0 / 20, 1e-9);
  EXPECT_NEAR(ledger.switch_seconds(), 10 + 2 * 0.5, 1e-9);
  ledger.Trigger(at(31));
  ledger.End(at(35));
  prices.now = 1.8;
  ledger.Begin(f.job, "cheaper", 3, at(31), at(35));
  ledger.Step(3, 100, at(45));
  ledger.Step(4, 100, at(55));
  ledger.End(at(60));
  JobResult r;
  ledger.Fill(&r);
  ASSERT_EQ(r.segments.size(), 2u);
  // 10 s and 10 s at $0.001 a second, then 10 s at $0.002 (the rate read at each step), 1 s to
  // the trigger and 4 s to the end.
  EXPECT_NEAR(r.segments[0].cost_usd, 0.01 + 0.01 + 0.02 + 0.002 + 0.008, 1e-12);
  EXPECT_NEAR(r.segments[0].switch_cost_usd, 0.01, 1e-12);  // its start-up
  EXPECT_NEAR(r.segments[0].seconds, 35, 1e-9);
  EXPECT_EQ(r.segments[0].steps, 3);
  // 25 s at $0.0005; the switch: the first segment after the trigger, and this one before its
  // first step.
  EXPECT_NEAR(r.segments[1].cost_usd, 0.0125, 1e-12);
  EXPECT_NEAR(r.segments[1].switch_cost_usd, 0.008 + 0.005, 1e-12);
  EXPECT_NEAR(r.segments[1].switch_seconds, 14, 1e-9);
  EXPECT_EQ(r.segments[1].first_step, 3);
  EXPECT_EQ(r.segments[1].reason, "cheaper");
  EXPECT_NEAR(r.cost_usd, 0.05 + 0.0125, 1e-12);
  EXPECT_NEAR(r.switch_cost_usd, 0.013, 1e-12);
  // The first plan alone: its start-up, then every sample at its 10 samples/s and the first
  // plan's price of the moment: (2 x 100 x 3.6 + 3 x 100 x 7.2) / 10 / 3600.
  EXPECT_NEAR(r.first_plan_cost_usd, 0.01 + (720.0 + 2160.0) / 10 / 3600, 1e-12);

  // A first plan that lost its units could not have finished.
  Prices gone;
  SegmentLedger lost(&gone);
  lost.Begin(f.job, "start", 0, t0, t0);
  lost.Step(0, 100, at(1));
  lost.End(at(2));
  JobResult r2;
  lost.Fill(&r2);
  EXPECT_LT(r2.first_plan_cost_usd, 0);
}

// A restart from a checkpoint trains its steps again: they are counted once in the segments'
// steps and samples and in the first plan's account, and their time stays paid.
TEST(SegmentLedgerTest, StepsTrainedAgainAfterARestartAreCountedOnce) {
  Fixture f("rollback");
  Prices prices;
  prices.now = 3.6;
  prices.first = 3.6;
  SegmentLedger ledger(&prices), straight(&prices);
  const absl::Time t0 = absl::FromUnixSeconds(1'000'000);
  auto at = [&](double s) { return t0 + absl::Seconds(s); };
  ledger.Begin(f.job, "start", 0, t0, t0);
  straight.Begin(f.job, "start", 0, t0, t0);
  for (int step = 0; step < 5; ++step) {
    ledger.Step(step, 100, at(step + 1));
    straight.Step(step, 100, at(step + 1));
    if (step == 1) ledger.Checkpointed(2, 0.1);  // the checkpoint of step 2: steps 0 and 1
  }
  ledger.RolledBack(2);  // steps 2 .. 4 are lost and trained again
  for (int step = 2; step < 5; ++step) ledger.Step(step, 100, at(step + 4));
  ledger.End(at(9));
  straight.End(at(5));
  JobResult r, s;
  ledger.Fill(&r);
  straight.Fill(&s);
  EXPECT_EQ(r.segments[0].steps, 5);
  EXPECT_EQ(r.segments[0].samples, 500);
  EXPECT_NEAR(r.cost_usd, 0.009, 1e-12);  // 9 s at $0.001 a second: the lost steps paid
  EXPECT_NEAR(s.cost_usd, 0.005, 1e-12);
  EXPECT_NEAR(r.first_plan_cost_usd - r.segments[0].switch_cost_usd,
              500 * 3.6 / r.segments[0].samples_per_second / 3600, 1e-12);
}

}  // namespace
}  // namespace heterps::launcher
