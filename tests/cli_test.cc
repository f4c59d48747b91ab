// The heterps binary as a user runs it: a real process, real files, exit codes and output.
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace heterps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/heterps_cli_" + name;
}

Result RunCli(const std::string& args) {
  const std::string err_path = TempPath("stderr");
  std::string command =
      std::string(HETERPS_BINARY_DIR) + "/tools/heterps " + args + " 2>" + err_path;
  Result r;
  FILE* pipe = popen(command.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = Slurp(err_path);
  return r;
}

TEST(CliTest, DefaultJobPrintsACertifiedPlanTable) {
  Result r = RunCli("plan");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("dlrm-small on cloud"));
  EXPECT_THAT(r.out, HasSubstr("certified optimal"));
  EXPECT_THAT(r.out, HasSubstr("stage  layers"));
  EXPECT_THAT(r.out, HasSubstr("pipeline "));
  EXPECT_EQ(r.err, "");
}

TEST(CliTest, JsonHasTheDocumentedFields) {
  const std::string out = TempPath("plan.json");
  Result r = RunCli(
      "plan --model examples/models/ctr-dnn.yaml --cluster "
      "examples/clusters/cloud.yaml --throughput 2000000 --json --out " +
      out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto plan = nlohmann::json::parse(r.out);
  for (const char* key :
       {"scheduler", "feasible", "certified_optimal", "throughput", "cost_usd", "cost_per_hour_usd",
        "job_seconds", "search_seconds", "lower_bound_usd", "optimality_gap", "stages"}) {
    EXPECT_TRUE(plan.contains(key)) << key;
  }
  EXPECT_EQ(plan["scheduler"], "auto");  // the default
  EXPECT_TRUE(plan["certified_optimal"].get<bool>());
  EXPECT_EQ(plan["optimality_gap"].get<double>(), 0.0);
  EXPECT_TRUE(plan["feasible"].get<bool>());
  EXPECT_GE(plan["throughput"].get<double>(), 2000000);
  ASSERT_FALSE(plan["stages"].empty());
  for (const auto& stage : plan["stages"]) {
    for (const char* key : {"layers", "type", "units", "seconds_per_batch"}) {
      EXPECT_TRUE(stage.contains(key)) << key;
    }
  }
  EXPECT_EQ(nlohmann::json::parse(Slurp(out)), plan);  // --out writes the same plan
  // The parameter servers: part of the plan, its rate and its table.
  const auto& ps = plan["parameter_servers"];
  ASSERT_TRUE(ps.is_object());
  for (const char* key :
       {"type", "shards", "memory_gib_per_shard", "ssd_gib_per_shard", "table_gib", "hit_rate",
        "seconds_per_batch", "throughput", "usd_per_hour"}) {
    EXPECT_TRUE(ps.contains(key)) << key;
  }
  double rate = ps["usd_per_hour"].get<double>();
  for (const auto& stage : plan["stages"]) rate += stage["usd_per_hour"].get<double>();
  EXPECT_NEAR(plan["cost_per_hour_usd"].get<double>(), rate, 1e-9 * rate);
  EXPECT_GE(ps["throughput"].get<double>(), 2000000);
  // --stages-only: no servers, and the job looks cheaper than it is.
  Result bare = RunCli(
      "plan --model examples/models/ctr-dnn.yaml --cluster examples/clusters/cloud.yaml "
      "--throughput 2000000 --json --stages-only");
  ASSERT_EQ(bare.exit_code, 0) << bare.err;
  auto stages_only = nlohmann::json::parse(bare.out);
  EXPECT_TRUE(stages_only["parameter_servers"].is_null());
  EXPECT_LT(stages_only["cost_usd"].get<double>(), plan["cost_usd"].get<double>());
  // The table shows them as one more row.
  Result table = RunCli(
      "plan --model examples/models/ctr-dnn.yaml --cluster examples/clusters/cloud.yaml "
      "--throughput 2000000");
  EXPECT_THAT(table.out, HasSubstr("   ps  servers: "));
}

TEST(CliTest, InfeasibleLimitExitsOneWithTheReason) {
  Result r = RunCli("plan --throughput 1e12");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("heterps: no feasible plan (throughput constraint, "));
  EXPECT_THAT(r.err, ::testing::ContainsRegex(
                         "needs [0-9]{3},[0-9]{3}x what is there\\): even the fastest plan fails"));
  EXPECT_THAT(r.err, HasSubstr("the limit is 1,000,000,000,000"));
}

// --data-region keeps every stage and the servers on that region's types (the table says so),
// at no less than the cost of the plan free to go anywhere; a region the catalog lacks is bad
// input.
TEST(CliTest, ADataRegionKeepsThePlanInIt) {
  const std::string job =
      "plan --cluster examples/clusters/fleet-64.yaml --scheduler exact --throughput 2000000 ";
  Result free = RunCli(job + "--json");
  ASSERT_EQ(free.exit_code, 0) << free.err;
  Result kept = RunCli(job + "--json --data-region ap-northeast-1");
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  const auto anywhere = nlohmann::json::parse(free.out), plan = nlohmann::json::parse(kept.out);
  EXPECT_EQ(plan["data_region"], "ap-northeast-1");
  EXPECT_TRUE(anywhere["data_region"].is_null());
  for (const auto& stage : plan["stages"]) EXPECT_EQ(stage["region"], "ap-northeast-1");
  EXPECT_EQ(plan["parameter_servers"]["region"], "ap-northeast-1");
  EXPECT_GT(plan["cost_usd"].get<double>(), anywhere["cost_usd"].get<double>());
  EXPECT_NE(anywhere["stages"][0]["region"], "ap-northeast-1");  // the rule binds here
  Result table = RunCli(job + "--data-region ap-northeast-1");
  EXPECT_THAT(table.out,
              HasSubstr("data kept in region ap-northeast-1: the job runs on its types only"));
  // Letting activations cross: the stages from bottom.1 on may leave, at no more than the cost
  // of keeping everything home; the servers stay.
  Result crossing = RunCli(job + "--json --data-region ap-northeast-1 --activations-may-cross");
  ASSERT_EQ(crossing.exit_code, 0) << crossing.err;
  const auto may_cross = nlohmann::json::parse(crossing.out);
  EXPECT_EQ(may_cross["activations_may_cross"], true);
  EXPECT_EQ(plan["activations_may_cross"], false);
  EXPECT_LE(may_cross["cost_usd"].get<double>(), plan["cost_usd"].get<double>() * (1 + 1e-9));
  EXPECT_EQ(may_cross["parameter_servers"]["region"], "ap-northeast-1");
  EXPECT_EQ(may_cross["stages"][0]["region"], "ap-northeast-1");
  Result crossing_table = RunCli(job + "--data-region ap-northeast-1 --activations-may-cross");
  EXPECT_THAT(crossing_table.out,
              HasSubstr("data kept in region ap-northeast-1: the stages before layer bottom.1 and "
                        "the servers run on its types; activations may cross from there on"));
  Result alone = RunCli(job + "--activations-may-cross");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_THAT(alone.err, HasSubstr("--activations-may-cross requires --data-region"));
  Result unknown = RunCli(job + "--data-region mars-1");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_EQ(unknown.err,
            "heterps: error: the data is kept in region 'mars-1', where cluster 'fleet-64' "
            "(examples/clusters/fleet-64.yaml) has no type; its regions: us-east-1, eu-west-1, "
            "ap-northeast-1\n");
}

// --data-shares: a plan per region, each on its own region's types at its share of the limit and
// of the samples, and the syncs between them; the job's cost is the regions' and the egress. Bad
// shares are bad input naming the flag; syncs a link cannot carry in time make it infeasible.
TEST(CliTest, DataSharesPlanEachRegionAndTheSyncsBetweenThem) {
  const std::string job =
      "plan --cluster examples/clusters/fleet-64.yaml --scheduler exact --throughput 200000 "
      "--data-shares us-east-1=0.75,ap-northeast-1=0.25 ";
  const std::string out_path = TempPath("regions.json");
  Result r = RunCli(job + "--sync-steps 1000 --json --out " + out_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto made = nlohmann::json::parse(r.out);
  EXPECT_EQ(made, nlohmann::json::parse(Slurp(out_path)));
  EXPECT_EQ(made["format"], "heterps-regions-plan-v1");
  EXPECT_EQ(made["sync_steps"], 1000);
  ASSERT_EQ(made["regions"].size(), 2u);
  double regions_usd = 0, longest = 0;
  for (const auto& region : made["regions"]) {
    const auto& plan = region["plan"];
    EXPECT_EQ(plan["data_region"], region["region"]);
    for (const auto& stage : plan["stages"]) EXPECT_EQ(stage["region"], region["region"]);
    EXPECT_NEAR(plan["throughput_limit"].get<double>(), 200000 * region["share"].get<double>(),
                1e-6);
    regions_usd += region["cost_usd"].get<double>();
    longest = std::max(longest, region["job_seconds"].get<double>());
  }
  const auto& sync = made["sync"];
  EXPECT_TRUE(sync["keeps_up"]);
  EXPECT_GT(sync["egress_usd"].get<double>(), 0);
  double egress = 0;
  for (const auto& flow : sync["flows"]) {
    EXPECT_NE(flow["from"], flow["to"]);
    EXPECT_LE(flow["load"].get<double>(), 1);
    egress += flow["egress_usd"].get<double>();
  }
  EXPECT_NEAR(sync["egress_usd"].get<double>(), egress, 1e-9 * egress);
  EXPECT_NEAR(made["cost_usd"].get<double>(), regions_usd + egress, 1e-9 * (regions_usd + egress));
  EXPECT_DOUBLE_EQ(made["job_seconds"].get<double>(), longest);
  // Syncing ten times as often sends more between the regions.
  Result often = RunCli(job + "--sync-steps 100 --json");
  ASSERT_EQ(often.exit_code, 0) << often.err;
  EXPECT_GT(nlohmann::json::parse(often.out)["sync"]["bytes"].get<double>(),
            sync["bytes"].get<double>());
  // Eagerly after the steps between too (at a limit whose steps outlast the links' latency):
  // more than the windows alone, each such sync a flow of its own; at 200,000 samples/s the
  // steps are too short for a sync each.
  const std::string slower =
      "plan --cluster examples/clusters/fleet-64.yaml --scheduler exact --throughput 2000 "
      "--data-shares us-east-1=0.75,ap-northeast-1=0.25 --sync-steps 100 --json";
  Result alone = RunCli(slower);
  Result eager = RunCli(slower + " --sync-eager");
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  ASSERT_EQ(eager.exit_code, 0) << eager.err;
  const auto eagerly = nlohmann::json::parse(eager.out);
  EXPECT_EQ(eagerly["eager"], true);
  EXPECT_GT(eagerly["sync"]["bytes"].get<double>(),
            nlohmann::json::parse(alone.out)["sync"]["bytes"].get<double>());
  int eager_flows = 0;
  for (const auto& flow : eagerly["sync"]["flows"]) eager_flows += flow["eager"].get<bool>();
  EXPECT_EQ(eager_flows * 2, static_cast<int>(eagerly["sync"]["flows"].size()));
  Result eager_table = RunCli(job + "--sync-steps 1000 --sync-eager");
  EXPECT_EQ(eager_table.exit_code, 1);
  EXPECT_THAT(eager_table.out,
              HasSubstr("sync every 1000 steps, and after every step between (eager, at their "
                        "bound): "));
  EXPECT_THAT(eager_table.out, HasSubstr("steps between"));
  EXPECT_THAT(eager_table.err, HasSubstr("with --sync-eager every sync has one step to cross"));
  Result table = RunCli(job + "--sync-steps 1000");
  EXPECT_THAT(table.out, HasSubstr("region ap-northeast-1: 25% of the samples"));
  EXPECT_THAT(table.out, HasSubstr("sync every 1000 steps: "));
  EXPECT_THAT(table.out, HasSubstr("(the slowest region), cost "));
  // A sync every step at this rate is more than the links carry.
  Result slow = RunCli(job + "--sync-steps 1");
  EXPECT_EQ(slow.exit_code, 1);
  EXPECT_THAT(slow.err, HasSubstr("heterps: no feasible plan (sync constraint): the link "));
  EXPECT_THAT(slow.err, HasSubstr("raise --sync-steps"));
  const std::string cluster = "plan --cluster examples/clusters/fleet-64.yaml ";
  for (const auto& [flags, error] : std::vector<std::pair<std::string, std::string>>{
           {"--data-shares us-east-1", "--data-shares: 'us-east-1' is not REGION=SHARE"},
           {"--data-shares us-east-1=0.5,eu-west-1=0.4", "shares add up to 0.9, not 1"},
           {"--data-shares us-east-1=0.5,mars-1=0.5", "region 'mars-1' is not a region"},
           {"--data-shares us-east-1=1", "two regions or more"},
           {"--sync-steps 10", "--sync-steps requires --data-shares"},
           {"--data-shares us-east-1=0.5,eu-west-1=0.4",
            "heterps: error: --data-shares: the regions' shares add up to 0.9, not 1\n"},
           {"--data-shares us-east-1=0.5,eu-west-1=0.5 --data-region us-east-1", "excludes"},
           {"--data-shares us-east-1=0.5,eu-west-1=0.5 --pareto", "excludes"},
           {"--data-shares us-east-1=0.5,eu-west-1=0.5 --report " + TempPath("r.html"),
            "--report: a plan across regions (--data-shares) has no page yet"},
           {"--data-shares us-east-1=0.5,eu-west-1=0.5 --scheduler exact --policy-in p.json",
            "--policy-in and --policy-out are rl's; the exact scheduler has no policy"}}) {
    Result bad = RunCli(cluster + flags);
    EXPECT_EQ(bad.exit_code, 2) << flags;
    EXPECT_THAT(bad.err, HasSubstr(error)) << flags;
  }
}

// A plan that would carry the data out of its region fails before training starts, naming the
// plan, the stage, its region and the data's; so does a region the catalog lacks.
TEST(CliTest, TrainRefusesAPlanThatTakesTheDataOutOfItsRegion) {
  const std::string plan_path = TempPath("anywhere.json");
  Result planned = RunCli(
      "plan --cluster examples/clusters/fleet-64.yaml --scheduler exact --throughput 2000000 "
      "--json --out " +
      plan_path);
  ASSERT_EQ(planned.exit_code, 0) << planned.err;
  const auto plan = nlohmann::json::parse(planned.out);
  const std::string type = plan["stages"][0]["type"], here = plan["stages"][0]["region"];
  const std::string elsewhere = here == "eu-west-1" ? "us-east-1" : "eu-west-1";
  Result r =
      RunCli("train --cluster examples/clusters/fleet-64.yaml --plan " + plan_path +
             " --data-region " + elsewhere + " --rows 1000 --job-dir " + TempPath("residency-job"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "heterps: error: " + plan_path + ": stages[0].type: " + type +
                       " is in region '" + here +
                       "', but the data (synthetic) is kept in region '" + elsewhere +
                       "' and nothing derived from it may leave it\n");
  // A plan made under a rule runs under the same rule only.
  const std::string kept_path = TempPath("kept.json");
  ASSERT_EQ(RunCli("plan --cluster examples/clusters/fleet-64.yaml --scheduler exact --throughput "
                   "2000000 --data-region eu-west-1 --out " +
                   kept_path)
                .exit_code,
            0);
  for (const std::string& flag : {std::string(), std::string(" --data-region us-east-1")}) {
    Result other = RunCli("train --cluster examples/clusters/fleet-64.yaml --plan " + kept_path +
                          flag + " --rows 1000 --job-dir " + TempPath("residency-kept"));
    EXPECT_EQ(other.exit_code, 2);
    EXPECT_THAT(other.err, HasSubstr(kept_path + ": data_region: the plan keeps the data in "
                                                 "region 'eu-west-1', the job "));
    EXPECT_THAT(other.err, HasSubstr("; run it under the plan's rule, so that the job's re-plans "
                                     "keep it too"));
  }
  // ... and under the same policy on activations.
  Result policy = RunCli("train --cluster examples/clusters/fleet-64.yaml --plan " + kept_path +
                         " --data-region eu-west-1 --activations-may-cross --rows 1000 --job-dir " +
                         TempPath("residency-policy"));
  EXPECT_EQ(policy.exit_code, 2);
  EXPECT_EQ(policy.err,
            "heterps: error: " + kept_path +
                ": activations_may_cross: the plan keeps everything in region "
                "'eu-west-1', the job lets activations leave it (--activations-may-cross); run it "
                "under the plan's rule, so that the job's re-plans keep it too\n");
  Result local =
      RunCli("train --data-region eu-west-1 --rows 1000 --job-dir " + TempPath("residency-local"));
  EXPECT_EQ(local.exit_code, 2);
  EXPECT_THAT(local.err, HasSubstr("the data (synthetic) is kept in region 'eu-west-1', where "
                                   "cluster 'local'"));
  EXPECT_THAT(local.err, HasSubstr("its types name no region"));
}

TEST(CliTest, BadSpecIsOneLineNamingFileLineAndField) {
  Result r = RunCli("plan --model tests/specs/bad-width.yaml --throughput 1000");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err,
            "heterps: error: tests/specs/bad-width.yaml:9: layers[4].sizes: 360 does not match "
            "the previous layer's output width 367\n");
  EXPECT_EQ(r.out, "");
}

TEST(CliTest, BadInputsExitTwo) {
  Result missing = RunCli("plan --model no-such.yaml --throughput 10");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("no-such.yaml: cannot open"));

  Result scheduler = RunCli("plan --scheduler annealing");
  EXPECT_EQ(scheduler.exit_code, 2);
  EXPECT_THAT(scheduler.err,
              HasSubstr("valid: auto, bo, brute, exact, genetic, greedy, homogeneous, "
                        "manual, random, rl"));

  Result flag = RunCli("plan --frobnicate");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_THAT(flag.err, HasSubstr("heterps: error:"));

  Result no_limit = RunCli("plan --model examples/models/dlrm-small.yaml");
  EXPECT_EQ(no_limit.exit_code, 2);
  EXPECT_THAT(no_limit.err, HasSubstr("--throughput is required"));

  // Numbers are checked for range, integrality and finiteness where they are read.
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {"plan --throughput 0", "--throughput: must be > 0, got 0"},
           {"plan --throughput -5", "--throughput: must be > 0, got -5"},
           {"plan --throughput nan", "--throughput: not a finite number: nan"},
           {"plan --time-limit -1", "--time-limit: must be > 0, got -1"},
           {"plan --max-plans -5", "--max-plans: must be >= 0, got -5"},
           {"train --lr inf", "--lr: not a finite number: inf"},
           {"train --rows 1.5", "--rows"}}) {
    const Result r = RunCli(args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_THAT(r.err, HasSubstr(message)) << args;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  {
    std::ifstream in("tests/specs/runtime/two-stages.json");
    std::string plan((std::istreambuf_iterator<char>(in)), {});
    const size_t at = plan.find("\"units\": 2");
    ASSERT_NE(at, std::string::npos);
    plan.replace(at, 10, "\"units\": 1.5");
    std::ofstream(TempPath("units.json")) << plan;
    const Result r = RunCli(
        "train --rows 1000 --batch 256 --cluster tests/specs/runtime/local-two.yaml --plan " +
        TempPath("units.json"));
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("units.json: stages[0].units: not an integer: 1.5"));
  }
  // An empty data file trains nothing: an error, in one process as in many.
  std::ofstream(TempPath("empty.tsv")).flush();
  const Result empty = RunCli("train --single-process --data " + TempPath("empty.tsv"));
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_THAT(empty.err, HasSubstr("empty.tsv: 0 lines, no training lines"));
  // What comes from input reaches the terminal escaped: a file name holding an escape sequence.
  const Result escaped =
      RunCli("plan --throughput 10 --model '" + TempPath("\x1b[31mred.yaml") + "'");
  EXPECT_EQ(escaped.exit_code, 2);
  EXPECT_THAT(escaped.err, HasSubstr("\\x1b[31mred.yaml"));
  EXPECT_EQ(escaped.err.find('\x1b'), std::string::npos);

  // Options the scheduler would ignore are errors, not silently dropped.
  Result ignored = RunCli("plan --scheduler exact --max-plans 10");
  EXPECT_EQ(ignored.exit_code, 2);
  EXPECT_THAT(ignored.err, HasSubstr("--max-plans: the exact scheduler has no budget of plans"));
  ignored = RunCli("plan --scheduler exact --policy-in p.bin");
  EXPECT_EQ(ignored.exit_code, 2);
  EXPECT_THAT(ignored.err, HasSubstr("the exact scheduler has no policy"));

  Result unwritable = RunCli("plan --out /no/such/dir/plan.json");
  EXPECT_EQ(unwritable.exit_code, 2);
  EXPECT_THAT(unwritable.err, HasSubstr("/no/such/dir/plan.json: cannot write"));

  Result brute = RunCli(
      "plan --scheduler brute --model examples/models/bst-attention.yaml "
      "--cluster examples/clusters/fleet-64.yaml --throughput 1000");
  EXPECT_EQ(brute.exit_code, 2);
  EXPECT_THAT(brute.err, HasSubstr("use the exact scheduler"));
}

TEST(CliTest, ParetoWritesTheFrontierAsJsonAndCsv) {
  const std::string json_path = TempPath("pareto.json"), csv_path = TempPath("pareto.csv");
  Result r = RunCli("plan --pareto --pareto-points 5 --throughput 4000000 --out " + json_path +
                    " --csv " + csv_path);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("the cheapest plan (auto) at 5 limits from 40,000 to 4,000,000"));
  auto doc = nlohmann::json::parse(Slurp(json_path));
  ASSERT_EQ(doc["frontier"].size(), 5u);
  double previous_cost = 0;
  for (const auto& plan : doc["frontier"]) {
    ASSERT_TRUE(plan["feasible"].get<bool>());
    EXPECT_GE(plan["throughput"].get<double>(), plan["throughput_limit"].get<double>());
    // A higher limit never makes the cheapest plan cheaper.
    EXPECT_GE(plan["cost_usd"].get<double>(), previous_cost * (1 - 1e-9));
    previous_cost = plan["cost_usd"].get<double>();
  }
  std::string csv = Slurp(csv_path);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 6);  // header + 5 limits
  EXPECT_EQ(csv.rfind("throughput_limit,feasible,throughput,cost_usd", 0), 0u);

  Result bad = RunCli("plan --pareto --throughput 1000 --pareto-from 5000");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err,
              HasSubstr("--pareto-from (5,000) must be below the throughput limit (1,000)"));
}

TEST(CliTest, RlWritesAndReadsPolicies) {
  const std::string policy = TempPath("policy.bin");
  Result trained = RunCli("plan --scheduler rl --max-plans 300 --json --policy-out " + policy);
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  EXPECT_EQ(nlohmann::json::parse(trained.out)["scheduler"], "rl");
  Result warm = RunCli(
      "plan --scheduler rl --max-plans 300 --json --throughput 1100000 "
      "--policy-in " +
      policy);
  EXPECT_EQ(warm.exit_code, 0) << warm.err;
  // A policy for another cluster (another number of types) is refused, naming the file.
  Result other = RunCli(
      "plan --scheduler rl --cluster examples/clusters/local.yaml "
      "--throughput 1000 --policy-in " +
      policy);
  EXPECT_EQ(other.exit_code, 2);
  EXPECT_THAT(other.err, HasSubstr(policy + ": the policy has features"));
}

// On a catalog of more types than genetic's population, its first population holds the best
// homogeneous plans, not the first types': it is never worse than the homogeneous baseline.
TEST(CliTest, GeneticSeesEveryTypeOfALargeCatalog) {
  const std::string args =
      " --json --model examples/models/dlrm-large.yaml --cluster examples/clusters/fleet-64.yaml "
      "--throughput 1000000";
  Result homogeneous = RunCli("plan --scheduler homogeneous" + args);
  ASSERT_EQ(homogeneous.exit_code, 0) << homogeneous.err;
  Result genetic = RunCli("plan --scheduler genetic --max-plans 300" + args);
  ASSERT_EQ(genetic.exit_code, 0) << genetic.err;
  EXPECT_LE(nlohmann::json::parse(genetic.out)["cost_usd"].get<double>(),
            nlohmann::json::parse(homogeneous.out)["cost_usd"].get<double>() * (1 + 1e-9));
}

// At a limit every scheduler can meet, each returns a feasible plan for every layer, no cheaper
// than the certified optimum; where one cannot, it says why and exits 1.
TEST(CliTest, EverySchedulerRunsOnTheExamples) {
  const std::string args = " --model examples/models/wide-deep.yaml --throughput 100000";
  Result exact = RunCli("plan --json --scheduler exact" + args);
  ASSERT_EQ(exact.exit_code, 0) << exact.err;
  const auto optimum = nlohmann::json::parse(exact.out);
  ASSERT_TRUE(optimum["certified_optimal"].get<bool>());
  const double best = optimum["cost_usd"].get<double>();
  auto layers_of = [](const nlohmann::json& plan) {
    size_t n = 0;
    for (const auto& stage : plan["stages"]) n += stage["layers"].size();
    return n;
  };
  for (const char* scheduler :
       {"greedy", "manual", "homogeneous", "rl", "genetic", "bo", "random"}) {
    SCOPED_TRACE(scheduler);
    const std::string name = scheduler;
    const bool budgeted = name == "rl" || name == "genetic" || name == "bo" || name == "random";
    Result r = RunCli(std::string("plan --json ") + (budgeted ? "--max-plans 200 " : "") +
                      "--scheduler " + scheduler + args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto plan = nlohmann::json::parse(r.out);
    EXPECT_EQ(plan["scheduler"], scheduler);
    EXPECT_TRUE(plan["feasible"].get<bool>());
    EXPECT_GE(plan["cost_usd"].get<double>(), best * (1 - 1e-9));
    EXPECT_GE(plan["throughput"].get<double>(), 100000 * (1 - 1e-9));
    EXPECT_EQ(layers_of(plan), layers_of(optimum));
    // Every plan carries a bound: never above the optimum, so the gap is never too small.
    EXPECT_LE(plan["lower_bound_usd"].get<double>(), best * (1 + 1e-9));
    EXPECT_GE(plan["optimality_gap"].get<double>(),
              (plan["cost_usd"].get<double>() - best) / plan["cost_usd"].get<double>() - 1e-9);
  }
  // The hand-made plan cannot reach 500,000 samples/s: exit 1 and the reason.
  Result manual = RunCli(
      "plan --scheduler manual --model examples/models/wide-deep.yaml "
      "--throughput 500000");
  EXPECT_EQ(manual.exit_code, 1);
  EXPECT_THAT(manual.err, HasSubstr("no feasible plan"));
}

TEST(CliTest, GenDataWritesDataAndTheTeacherSidecar) {
  const std::string out = TempPath("gen.tsv");
  Result r = RunCli("gen-data --rows 3000 --seed 4 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote 3,000 rows to " + out));
  EXPECT_THAT(r.out, HasSubstr("teacher AUC 0."));
  EXPECT_EQ(r.err, "");  // no progress bar when stderr is not a terminal
  std::istringstream lines(Slurp(out));
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    ++count;
    EXPECT_EQ(std::count(line.begin(), line.end(), '\t'), 39) << line;
  }
  EXPECT_EQ(count, 3000);
  auto sidecar = nlohmann::json::parse(Slurp(out + ".teacher.json"));
  EXPECT_EQ(sidecar["rows"], 3000);

  // Compressed as the name says: gzip that zcat reads, the same rows as the plain file.
  const std::string gz = TempPath("gen-z.tsv.gz");
  r = RunCli("gen-data --rows 3000 --seed 4 --out " + gz);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::system(("zcat " + gz + " | cmp -s - " + out).c_str()), 0);
  EXPECT_TRUE(std::filesystem::exists(gz + ".teacher.json"));
  // A file gzipped afterwards keeps its teacher: train.tsv.teacher.json beside train.tsv.gz.
  ASSERT_EQ(std::system(("gzip -kf " + out).c_str()), 0);
  r = RunCli("train --single-process --batch 256 --data " + out + ".gz");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("(the teacher's: " +
                               absl::StrFormat("%.4f", sidecar["teacher_auc"].get<double>())));

  r = RunCli("gen-data --rows 0 --out " + out);
  EXPECT_EQ(r.exit_code, 2);
  r = RunCli("gen-data --rows 10 --out /nonexistent/dir/x.tsv");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("heterps: error: /nonexistent/dir/x.tsv: cannot create"));
}

// `heterps certs`: a CA and a gateway certificate per region that chain to it, the keys this
// user's alone; nothing overwritten; one more region signed by the same CA later.
TEST(CliTest, CertsMakesARunsCaAndACertificatePerRegion) {
  const std::string dir = TempPath("certs");
  std::filesystem::remove_all(dir);
  Result r = RunCli("certs --regions us-east-1,eu-west-1 --days 7 --out " + dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("heterps-regions-ca (the run's CA)"));
  EXPECT_THAT(r.out, HasSubstr("gateway.eu-west-1.heterps          " + dir + "/eu-west-1.pem"));
  for (const std::string region : {"us-east-1", "eu-west-1"}) {
    const std::string verify = "openssl verify -CAfile " + dir + "/ca.pem " + dir + "/" + region +
                               ".pem >/dev/null 2>&1";
    EXPECT_EQ(std::system(verify.c_str()), 0) << region;
    const auto perms = std::filesystem::status(dir + "/" + region + "-key.pem").permissions();
    EXPECT_EQ(perms & std::filesystem::perms::all, std::filesystem::perms::owner_read |
                                                       std::filesystem::perms::owner_write);
  }
  const std::string ca = Slurp(dir + "/ca.pem");
  r = RunCli("certs --regions us-east-1 --out " + dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "heterps: error: " + dir + "/ca.pem exists: heterps certs overwrites no "
                   "certificate or key\n");
  EXPECT_EQ(Slurp(dir + "/ca.pem"), ca);
  r = RunCli("certs --regions ap-south-1 --out " + dir + " --ca " + dir + "/ca.pem --ca-key " +
             dir + "/ca-key.pem");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::system(("openssl verify -CAfile " + dir + "/ca.pem " + dir +
                         "/ap-south-1.pem >/dev/null 2>&1")
                            .c_str()),
            0);
  r = RunCli("certs --regions sa --out " + dir + " --ca " + dir + "/us-east-1.pem --ca-key " +
             dir + "/us-east-1-key.pem");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("the CA's certificate is not a CA's"));
  r = RunCli("certs --regions 'a b' --out " + dir);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("'a b' is not a region's name"));
}

// The binary form: `heterps convert` writes it, and every run on it is the run on the text it came
// from (the same losses and parameters), with nothing parsed.
TEST(CliTest, ConvertedDataTrainsAsTheTextItCameFrom) {
  const std::string text = TempPath("convert.tsv");
  const std::string binary = TempPath("convert.hpx");
  ASSERT_EQ(RunCli("gen-data --rows 8000 --seed 8 --out " + text).exit_code, 0);
  Result r = RunCli("convert --data " + text + " --out " + binary);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("wrote 8,000 records to " + binary));
  EXPECT_EQ(r.err, "");  // no progress bar when stderr is not a terminal
  // The text, the binary file, and the text parsed by 3 threads in each reader.
  const std::string runs[3] = {"--data " + text, "--data " + binary,
                               "--data " + text + " --reader-threads 3"};
  for (const char* mode : {"--single-process", "--mode sync"}) {
    nlohmann::json m[3];
    for (int i = 0; i < 3; ++i) {
      const std::string metrics = TempPath("convert-metrics.json");
      r = RunCli(
          absl::StrFormat("train %s --batch 256 %s --metrics-out %s", mode, runs[i], metrics));
      ASSERT_EQ(r.exit_code, 0) << mode << " " << runs[i] << ": " << r.err;
      EXPECT_THAT(r.out, HasSubstr("7,200 training samples"));
      m[i] = nlohmann::json::parse(Slurp(metrics));
    }
    for (int i = 1; i < 3; ++i) {
      EXPECT_EQ(m[i]["losses"], m[0]["losses"]) << mode << " " << runs[i];
      EXPECT_EQ(m[i]["eval_auc"], m[0]["eval_auc"]) << mode << " " << runs[i];
      EXPECT_EQ(m[i]["parameter_digest"], m[0]["parameter_digest"]) << mode << " " << runs[i];
    }
  }
  // A multi-hot layout with a header, zstd-compressed by its name.
  const std::string model = "examples/models/movielens-genres.yaml";
  const std::string csv = TempPath("convert.csv");
  const std::string zst = TempPath("convert.hpx.zst");
  ASSERT_EQ(RunCli("gen-data --model " + model + " --rows 3000 --out " + csv).exit_code, 0);
  r = RunCli("convert --threads 3 --model " + model + " --data " + csv + " --out " + zst);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json losses[2];
  for (int i = 0; i < 2; ++i) {
    const std::string metrics = TempPath("convert-mh.json");
    r = RunCli(absl::StrFormat("train --single-process --model %s --data %s --metrics-out %s",
                               model, i == 0 ? csv : zst, metrics));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    losses[i] = nlohmann::json::parse(Slurp(metrics))["losses"];
  }
  EXPECT_EQ(losses[1], losses[0]);
  // Errors: a bad line names the file and line and leaves nothing; another layout is refused.
  r = RunCli("convert --model " + model + " --data " + text + " --out " + TempPath("x.hpx"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("heterps: error: " + text + ":1: "));
  EXPECT_FALSE(std::filesystem::exists(TempPath("x.hpx")));
  r = RunCli("train --single-process --model " + model + " --data " + binary);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(binary + ": converted with a layout of 13 dense features"));
}

// A declared layout written by gen-data, and planned with the ids per slot the data holds.
TEST(CliTest, GenDataWritesADeclaredLayoutThatPlanMeasures) {
  const std::string model = "examples/models/movielens-genres.yaml";
  const std::string out = TempPath("movielens.csv");
  Result r = RunCli("gen-data --model " + model + " --rows 2000 --ids-per-slot 8 --out " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(Slurp(out));
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "liked,age,user_id,movie_id,genres,timestamp");
  int count = 0, genres = 0;
  while (std::getline(lines, line)) {
    ++count;
    ASSERT_EQ(std::count(line.begin(), line.end(), ','), 5) << line;
    std::istringstream fields(line);
    std::string field;
    for (int i = 0; i < 5; ++i) std::getline(fields, field, ',');  // the fifth: genres
    if (!field.empty()) genres += 1 + std::count(field.begin(), field.end(), '|');
  }
  EXPECT_EQ(count, 2000);
  EXPECT_NEAR(genres / 2000.0, 8.0, 0.5);  // 0 .. 16 ids, uniformly
  // The spec guesses 1.7 ids per slot; the data holds (1 + 1 + 8) / 3.
  r = RunCli("plan --model " + model + " --throughput 1e6 --data " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("layer emb: 3.3"));
  EXPECT_THAT(r.err, HasSubstr("1.70 in the spec"));
  // Training on synthetic data (no --data) writes the spec's layout, not Criteo's.
  r = RunCli("train --single-process --model " + model + " --rows 3000");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("movielens-genres: 2,700 training samples"));
}

// Every example model trains on the single process, on synthetic data in its layout; the one
// whose layers are for planning only (custom) says so in one line.
TEST(CliTest, EveryExampleModelTrains) {
  int models = 0;
  for (const auto& entry : std::filesystem::directory_iterator("examples/models")) {
    const std::string model = entry.path().string();
    SCOPED_TRACE(model);
    const Result r = RunCli("train --single-process --batch 256 --rows 1500 --model " + model);
    ++models;
    if (entry.path().filename() == "bst-attention.yaml") {
      EXPECT_EQ(r.exit_code, 2);
      EXPECT_THAT(r.err, HasSubstr("custom layers describe costs for planning; they cannot be "
                                   "trained"));
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      continue;
    }
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("eval AUC"));
  }
  EXPECT_GE(models, 8);
}

TEST(CliTest, TrainRunsOnSyntheticDataAndWritesMetrics) {
  const std::string metrics = TempPath("metrics.json");
  const std::string data = TempPath("train.tsv");
  ASSERT_EQ(RunCli("gen-data --rows 20000 --seed 5 --out " + data).exit_code, 0);
  Result r =
      RunCli("train --single-process --data " + data + " --batch 256 --metrics-out " + metrics);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("dlrm-small: 18,000 training samples (1 epoch), 2,000 held out"));
  EXPECT_THAT(r.out, HasSubstr("eval AUC"));
  EXPECT_THAT(r.out, HasSubstr("(the teacher's: 0."));
  auto m = nlohmann::json::parse(Slurp(metrics));
  for (const char* key :
       {"train_samples", "eval_samples", "train_logloss", "eval_logloss", "eval_auc", "teacher_auc",
        "samples_per_second", "peak_rss_bytes", "losses"}) {
    EXPECT_TRUE(m.contains(key)) << key;
  }
  EXPECT_EQ(m["train_samples"], 18000);
  EXPECT_GT(m["eval_auc"].get<double>(), 0.58);  // chance is 0.5
  // One thread: the same run gives the same losses, here on the same lines gzipped in two
  // files that a glob names (heterps expands it: the shell is given it quoted).
  const std::string parts = TempPath("part_");
  ASSERT_EQ(std::system(("split -n l/2 -d " + data + " " + parts + " && gzip -f " + parts + "00 " +
                         parts + "01")
                            .c_str()),
            0);
  const std::string glob = "'" + parts + "*.gz'";
  Result again = RunCli("train --single-process --data " + glob + " --batch 256 --metrics-out " +
                        metrics + "2");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  auto m2 = nlohmann::json::parse(Slurp(metrics + "2"));
  EXPECT_EQ(m2["losses"], m["losses"]);
  EXPECT_EQ(m2["data_files"].size(), 2u);
  // Two threads sharing each step: the one thread's run, to the bit.
  Result shared = RunCli("train --single-process --threads 2 --sync-threads --data " + data +
                         " --batch 256 --metrics-out " + metrics + "4");
  ASSERT_EQ(shared.exit_code, 0) << shared.err;
  EXPECT_THAT(shared.out, HasSubstr("(2 threads sharing each step)"));
  auto m4 = nlohmann::json::parse(Slurp(metrics + "4"));
  EXPECT_EQ(m4["losses"], m["losses"]);
  EXPECT_EQ(m4["parameter_digest"], m["parameter_digest"]);
  EXPECT_EQ(m4["sync_threads"], true);

  // The default: planned on this host, every role a process of its own (here on the gzip files).
  r = RunCli("train --data " + glob + " --batch 256 --metrics-out " + metrics + "3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("plan for dlrm-small on local (scheduler auto"));
  EXPECT_THAT(r.out, HasSubstr("dlrm-small: 18,000 training samples (1 epoch, 71 steps, sync)"));
  EXPECT_THAT(r.out, HasSubstr("predicted/batch"));
  auto d = nlohmann::json::parse(Slurp(metrics + "3"));
  for (const char* key : {"eval_auc", "samples_per_second", "predicted_samples_per_second",
                          "parameter_digest", "stages", "losses"}) {
    EXPECT_TRUE(d.contains(key)) << key;
  }
  EXPECT_EQ(d["train_samples"], 18000);
  EXPECT_NEAR(d["eval_auc"].get<double>(), m["eval_auc"].get<double>(), 1e-4);

  // Regions emulated in this process: the windows and each link's bytes in the summary and the
  // metrics; bad shares and hubs named.
  Result regions = RunCli("train --single-process --data " + data +
                          " --batch 256 --data-shares us=0.7,eu=0.3 --sync-steps 10 "
                          "--sync-threshold 0.01 --sync-hub us --metrics-out " + metrics + "4");
  ASSERT_EQ(regions.exit_code, 0) << regions.err;
  EXPECT_THAT(regions.out, HasSubstr("regions         us 70%, eu 30% (emulated in this process)"));
  EXPECT_THAT(regions.out, HasSubstr("every 10 steps, threshold 0.01, delay 1, through us"));
  auto g = nlohmann::json::parse(Slurp(metrics + "4"));
  ASSERT_TRUE(g.contains("regions"));
  ASSERT_EQ(g["regions"]["links"].size(), 2u);
  EXPECT_GT(g["regions"]["links"][0]["bytes"].get<int64_t>(), 0);
  EXPECT_GE(g["regions"]["windows"].get<int64_t>(), 7);  // 70 steps, every 10, and the flush
  EXPECT_NEAR(g["eval_auc"].get<double>(), m["eval_auc"].get<double>(), 0.03);
  // Eagerly, the rows that moved 5% after every step too: more windows, said in the summary and
  // the metrics; an eager threshold not above the threshold is refused, not ignored.
  Result eager = RunCli("train --single-process --data " + data +
                        " --batch 256 --data-shares us=0.7,eu=0.3 --sync-steps 10 "
                        "--sync-threshold 0.01 --sync-eager-threshold 0.05 --metrics-out " +
                        metrics + "5");
  ASSERT_EQ(eager.exit_code, 0) << eager.err;
  EXPECT_THAT(eager.out, HasSubstr("every 10 steps, threshold 0.01, and after each step between "
                                   "rows past 0.05, delay 1, peer to peer"));
  auto e = nlohmann::json::parse(Slurp(metrics + "5"));
  EXPECT_NEAR(e["regions"]["eager_threshold"].get<double>(), 0.05, 1e-6);
  EXPECT_GT(e["regions"]["windows"].get<int64_t>(), g["regions"]["windows"].get<int64_t>());
  r = RunCli("train --single-process --data " + data +
             " --data-shares us=0.7,eu=0.3 --sync-threshold 0.1 --sync-eager-threshold 0.05");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--sync-eager-threshold 0.05 must be above --sync-threshold 0.1"));
  for (const auto& [flags, message] :
       {std::pair<std::string, std::string>{"--data-shares us=0.5,eu=0.6", "sum to 1.1, not 1"},
        {"--data-shares us=0.5,eu=0.5 --sync-hub ap", "--sync-hub: 'ap' is none of the regions"},
        {"--data-shares us", "'us' is not REGION=SHARE"}}) {
    r = RunCli("train --single-process --data " + data + " " + flags);
    EXPECT_EQ(r.exit_code, 2) << flags;
    EXPECT_THAT(r.err, HasSubstr(message)) << flags;
  }
  r = RunCli("train --data " + data + " --data-shares us=0.5,eu=0.5");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--data-shares requires --single-process"));
  // Each region its own files: its share its lines'.
  const std::string us = TempPath("us.tsv"), eu = TempPath("eu.tsv");
  ASSERT_EQ(std::system(("head -n 5000 " + data + " > " + us + " && tail -n +5001 " + data +
                         " > " + eu)
                            .c_str()),
            0);
  Result own = RunCli("train --single-process --batch 256 --region-data us=" + us +
                      " --region-data eu=" + eu + " --sync-steps 10");
  ASSERT_EQ(own.exit_code, 0) << own.err;
  EXPECT_THAT(own.out, HasSubstr("18,000 training samples"));
  EXPECT_THAT(own.out, HasSubstr("regions         us 25%, eu 75% (emulated in this process)"));
  r = RunCli("train --single-process --region-data us=" + us);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--region-data: name two regions or more"));
  r = RunCli("train --single-process --sync-steps 10");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("need --data-shares, --region-data or --region"));

  // Bad input: one line, exit code 2.
  for (const char* mode : {"--single-process ", ""}) {
    r = RunCli(std::string("train ") + mode + "--data /nonexistent.tsv");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr("heterps: error: /nonexistent.tsv: "));
  }
  r = RunCli("train --data " + data + " --optimizer lbfgs");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--optimizer"));
  // Options of the other mode are errors, not silently ignored.
  r = RunCli("train --single-process --plan plan.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--plan excludes --single-process"));
  r = RunCli("train --single-process --eval-interval 10");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--eval-interval excludes --single-process"));
  r = RunCli("train --tls --tls-cert c.pem --tls-key k.pem");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--tls excludes --tls-cert"));
  r = RunCli("train --cluster-state /nonexistent/dir/state.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--cluster-state /nonexistent/dir/state.json: no directory"));
  r = RunCli("train --threads 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--threads requires --single-process"));
  r = RunCli("train --single-process --sync-threads");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--sync-threads requires --threads"));
  r = RunCli("train --micro-batch 32 --replicas 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--replicas requires --single-process"));
  r = RunCli("train --single-process --threads 2 --micro-batch 64 --data " + data);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("as a synchronous job does, on 1 thread"));
  r = RunCli("train --single-process --micro-batch 48 --data " + data);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err,
              HasSubstr("a micro-batch of 48 samples is not a multiple of the block size 64"));
  // A bad line, then an empty one (skipped, and not counted as bad or as data).
  std::ofstream(data, std::ios::app) << "1\tnot a line\n\r\n";
  for (const char* mode : {"--single-process ", ""}) {
    r = RunCli(std::string("train ") + mode + "--data " + data + " --batch 256");
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_THAT(r.err, HasSubstr(data + ":20001: line: has 2 fields, expected 40"));
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    // Two epochs: the bad line (a training line) counts once, and is trained on in neither.
    const std::string out = TempPath(std::string("skipped") + (*mode ? "-single" : "") + ".json");
    r = RunCli(std::string("train ") + mode + "--data " + data +
               " --batch 256 --epochs 2 --skip-bad-lines --metrics-out " + out);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.out, HasSubstr("skipped lines   1"));
    const auto metrics = nlohmann::json::parse(Slurp(out));
    EXPECT_EQ(metrics["skipped_lines"], 1) << mode;
    EXPECT_EQ(metrics["train_samples"], 2 * 18000) << mode;
  }
  // Bad labels on held-out lines only (every 10th with --eval-fraction 0.1): skipped, counted and
  // named like training lines (this once ended the single process with SIGSEGV).
  const std::string held = TempPath("held-out-bad.tsv");
  {
    std::ifstream in(data);
    std::ofstream out(held);
    std::string line;
    for (int n = 1; n <= 2000 && std::getline(in, line); ++n) {
      if (n % 10 == 0 && n <= 30) line = "x" + line.substr(line.find('\t'));
      out << line << "\n";
    }
  }
  for (const char* mode : {"--single-process ", ""}) {
    const std::string out = TempPath(std::string("held") + (*mode ? "-single" : "") + ".json");
    r = RunCli(std::string("train ") + mode + "--data " + held +
               " --batch 256 --eval-fraction 0.1 --skip-bad-lines --metrics-out " + out);
    ASSERT_EQ(r.exit_code, 0) << mode << r.err;
    EXPECT_THAT(r.out, HasSubstr("skipped lines   3 (first: " + held + ":10: ")) << mode;
    EXPECT_EQ(nlohmann::json::parse(Slurp(out))["skipped_lines"], 3) << mode;
  }
}

// The spec's optimizer section reaches the tables: its rate trains exactly as the same --lr, a
// flag overrides it, and Adagrad's initial accumulator changes the run.
TEST(CliTest, TheSpecsOptimizerSettingsTrain) {
  const std::string data = TempPath("optimizer.tsv");
  ASSERT_EQ(RunCli("gen-data --rows 4000 --seed 3 --out " + data).exit_code, 0);
  std::string base = Slurp("examples/models/dlrm-small.yaml");
  ASSERT_FALSE(base.empty());
  auto spec = [&](const std::string& name, const std::string& section) {
    const std::string path = TempPath(name);
    std::ofstream(path) << base << "\n" << section;
    return path;
  };
  auto losses = [&](const std::string& args) {
    const std::string out = TempPath("optimizer-metrics.json");
    Result r = RunCli("train --single-process --batch 256 --data " + data + " --metrics-out " +
                      out + " " + args);
    EXPECT_EQ(r.exit_code, 0) << args << r.err;
    return nlohmann::json::parse(Slurp(out))["losses"];
  };
  const std::string lr = spec("lr.yaml", "optimizer:\n  embeddings: {lr: 0.2}\n");
  const std::string acc = spec("acc.yaml", "optimizer:\n  embeddings: {initial_accumulator: 1}\n");
  const auto defaults = losses("");
  EXPECT_EQ(losses("--model " + lr), losses("--lr 0.2"));
  EXPECT_NE(losses("--model " + lr), defaults);
  EXPECT_EQ(losses("--model " + lr + " --lr 0.05"), defaults);  // 0.05 x 256 / 256: the default
  EXPECT_NE(losses("--model " + acc), defaults);
}

// A label derived from a rating by a threshold: gen-data writes ratings on either side of it, and
// training reads them as labels.
TEST(CliTest, ALabelThresholdTrainsOnRatings) {
  std::string spec = Slurp("examples/models/movielens-genres.yaml");
  const std::string from = "{name: liked, role: label}";
  ASSERT_NE(spec.find(from), std::string::npos);
  spec.replace(spec.find(from), from.size(), "{name: rating, role: label, threshold: 4}");
  const std::string path = TempPath("ratings.yaml"), data = TempPath("ratings.csv");
  std::ofstream(path) << spec;
  Result r = RunCli("gen-data --model " + path + " --rows 6000 --out " + data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(Slurp(data));
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line.substr(0, 7), "rating,");
  std::set<std::string> ratings;
  while (std::getline(lines, line)) ratings.insert(line.substr(0, line.find(',')));
  EXPECT_EQ(ratings, (std::set<std::string>{"3", "4"}));
  r = RunCli("train --single-process --batch 256 --model " + path + " --data " + data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("eval AUC        0."));
  EXPECT_THAT(r.out, HasSubstr("(the teacher's: 0."));
}

TEST(CliTest, ProfileWritesWhatThePlannerReads) {
  const std::string profile = TempPath("profile.json");
  // This host's CPU and, for testing, the host twin of a GPU: every layer measured on both.
  Result r = RunCli("profile --repeats 2 --gpu-emulate 1 --out " + profile);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("host-cpu (cpu)"));
  EXPECT_THAT(r.out, HasSubstr("gpu-twin (twin:0)"));
  auto both = nlohmann::json::parse(Slurp(profile));
  int twin = 0;
  for (const auto& e : both["entries"]) twin += e["type"] == "gpu-twin";
  EXPECT_GE(twin, 7);
  EXPECT_EQ(both.count("tier"), 0u);
  // With a GPU tier: the twin measured with the tier feeding the stage on it, its entry written.
  r = RunCli("profile --repeats 2 --batch 512 --gpu-emulate 1 --gpu-cache-gib 0.001 --out " +
             profile);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("GPU tier of gpu-twin (0.001 GiB): "));
  EXPECT_THAT(r.out, HasSubstr("dense parameters held on the device"));
  EXPECT_THAT(r.out, HasSubstr("network of gpu-twin: "));
  EXPECT_THAT(r.out, HasSubstr(" (the GPU tier's own step)"));
  auto tier = nlohmann::json::parse(Slurp(profile));
  ASSERT_EQ(tier["tier"].size(), 1u);
  EXPECT_EQ(tier["tier"][0]["type"], "gpu-twin");
  EXPECT_EQ(tier["tier"][0]["lookups_per_batch"], 512 * 26);
  EXPECT_GT(tier["tier"][0]["loaded_rows_per_batch"].get<double>(), 0);
  EXPECT_EQ(tier["tier"][0]["tier_bytes"], static_cast<int64_t>(0.001 * (int64_t{1} << 30)));
  // Planned with it for a tier of another size: refused, both sizes named.
  r = RunCli("train --batch 512 --gpu-emulate 1 --gpu-cache-gib 0.002 --profile " + profile +
             " --job-dir " + TempPath("tier-mismatch"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(profile + ": tier[0]: gpu-twin was measured with a GPU tier of "
                                         "0.001 GiB, the job's is 0.002 GiB"));
  // This host's CPU alone, for the local catalog, on a data file (shorter than two batches).
  const std::string data = TempPath("profile-data.tsv");
  r = RunCli("gen-data --rows 3000 --seed 5 --out " + data);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = RunCli("profile --repeats 2 --data " + data + " --out " + profile);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("top.0"));
  EXPECT_THAT(r.out, HasSubstr("a synchronous step of 2 replicas"));
  EXPECT_THAT(r.out, HasSubstr("network of host-cpu"));
  EXPECT_THAT(r.out, HasSubstr("wrote " + profile));
  auto p = nlohmann::json::parse(Slurp(profile));
  EXPECT_EQ(p["model"], "dlrm-small");
  EXPECT_EQ(p["batch_size"], 2048);
  EXPECT_GE(p["entries"].size(), 7u);
  for (const auto& e : p["entries"]) EXPECT_GT(e["seconds_per_batch"].get<double>(), 0);
  ASSERT_EQ(p["network"].size(), 1u);
  EXPECT_EQ(p["network"][0]["type"], "host-cpu");
  EXPECT_GT(p["network"][0]["bytes_per_second"].get<double>(), 0);
  EXPECT_GE(p["network"][0]["seconds_per_message"].get<double>(), 0);
  // Data that is not there: one line naming it.
  r = RunCli("profile --data /nonexistent/x.tsv --out " + TempPath("never.json"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/x.tsv"));
  // The planner takes it: measured figures for the local host.
  r = RunCli("plan --cluster examples/clusters/local.yaml --throughput 1000 --profile " + profile);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("host-cpu"));
}

}  // namespace
}  // namespace heterps
