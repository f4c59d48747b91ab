// The /metrics endpoint: the exposition format against the status it renders, the HTTP server's
// answers (auth, errors), and a real job scraped while it runs.
#include <httplib.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <regex>
#include <set>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/launcher/job_metrics.h"
#include "heterps/ps/rpc/grpc_ps_client.h"
#include "tests/job_runner.h"
#include "tools/metrics_http.h"

namespace heterps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The samples of a text exposition: "name{labels}" -> value. Fails the test on a line that is not
// a comment or a sample, on a sample whose family has no TYPE line before it (a histogram's
// _bucket, _sum and _count samples belong to it), and on a family declared twice.
std::map<std::string, double> ParseExposition(const std::string& text) {
  static const std::regex kSample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$)");
  static const std::regex kType(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
  static const std::regex kHistogramPart(R"(^(.*)_(bucket|sum|count)$)");
  std::map<std::string, double> samples;
  std::set<std::string> typed, histograms;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::string l(line);
    std::smatch m;
    if (std::regex_match(l, m, kType)) {
      EXPECT_TRUE(typed.insert(m[1]).second) << "declared twice: " << l;
      if (m[2] == "histogram") histograms.insert(m[1]);
      continue;
    }
    if (absl::StartsWith(l, "# HELP ")) continue;
    if (!std::regex_match(l, m, kSample)) {
      ADD_FAILURE() << "not a sample: " << l;
      continue;
    }
    const std::string name = m[1];
    std::smatch part;
    const bool in_histogram =
        std::regex_match(name, part, kHistogramPart) && histograms.count(part[1].str()) > 0;
    EXPECT_TRUE(in_histogram || (typed.count(name) && !histograms.count(name)))
        << "no TYPE before " << l;
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(m[3].str(), &value)) << l;
    samples[m[1].str() + m[2].str()] = value;
  }
  return samples;
}

// `promtool check metrics` (Debian's prometheus package) finds nothing to say of `text`; where
// promtool is not installed, says so and checks nothing (the callers that need it skip first).
void PromtoolAccepts(const std::string& text) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    std::fprintf(stderr, "no promtool here: the exposition is not linted\n");
    return;
  }
  const std::string path = ::testing::TempDir() + "/heterps-exposition.txt";
  {
    std::ofstream out(path);
    out << text;
  }
  const std::string said = path + ".promtool";
  const int rc = std::system(("promtool check metrics <" + path + " >" + said + " 2>&1").c_str());
  EXPECT_EQ(rc, 0) << testing::Slurp(said);
  EXPECT_EQ(testing::Slurp(said), "");
}

TEST(MetricsTest, TheExpositionSaysWhatTheStatusSays) {
  launcher::JobStatus s;
  s.state = "running \"now\"\n";
  s.restarts = 2;
  s.step = 40;
  s.total_steps = 100;
  s.samples = 81920;
  s.samples_per_second = 12345.5;
  s.loss = 0.4321;
  s.eval_step = 30;
  s.eval_logloss = 0.47;
  s.eval_auc = 0.75;
  for (int r = 0; r < 2; ++r) {
    launcher::ReplicaStatus replica;
    replica.stage = r;
    replica.replica = 1 - r;
    replica.micro_batches = 10 + r;
    replica.busy_seconds = 1.25 * (r + 1);
    replica.ps_seconds = 0.5;
    if (r == 0) {
      base::CallStats calls;
      calls.Record("PullSparse", true, absl::Microseconds(700));
      calls.Record("PullSparse", false, absl::Seconds(30));
      replica.ps_rpcs = calls.Snapshot();
    }
    s.replicas.push_back(replica);
  }
  launcher::ShardStatus shard;
  shard.shard = 3;
  shard.calls = 77;
  shard.tables = {{0, 1000, 64000, 5, 900, 4, 2}, {1, 10, 640, 0, 9, 0, 0}};
  base::CallStats served;
  served.Record("Commit", true, absl::Milliseconds(2));
  shard.rpcs = served.Snapshot();
  s.parameter_servers.push_back(shard);

  const std::map<std::string, double> got = ParseExposition(launcher::JobStatusToPrometheus(s));
  EXPECT_EQ(got.at("heterps_job_state{state=\"running \\\"now\\\"\\n\"}"), 1);
  EXPECT_EQ(got.at("heterps_job_restarts_total"), 2);
  EXPECT_EQ(got.at("heterps_step"), 40);
  EXPECT_EQ(got.at("heterps_job_steps"), 100);
  EXPECT_EQ(got.at("heterps_samples_total"), 81920);
  EXPECT_EQ(got.at("heterps_samples_per_second"), 12345.5);
  EXPECT_EQ(got.at("heterps_train_loss"), 0.4321);
  EXPECT_EQ(got.at("heterps_eval_step"), 30);
  EXPECT_EQ(got.at("heterps_eval_logloss"), 0.47);
  EXPECT_EQ(got.at("heterps_eval_auc"), 0.75);
  EXPECT_EQ(got.at("heterps_replica_micro_batches_total{stage=\"0\",replica=\"1\"}"), 10);
  EXPECT_EQ(got.at("heterps_replica_busy_seconds_total{stage=\"1\",replica=\"0\"}"), 2.5);
  EXPECT_EQ(got.at("heterps_replica_ps_seconds_total{stage=\"1\",replica=\"0\"}"), 0.5);
  EXPECT_EQ(got.at("heterps_ps_calls_total{shard=\"3\"}"), 77);
  EXPECT_EQ(got.at("heterps_ps_memory_rows{shard=\"3\",table=\"0\"}"), 1000);
  EXPECT_EQ(got.at("heterps_ps_memory_bytes{shard=\"3\",table=\"1\"}"), 640);
  EXPECT_EQ(got.at("heterps_ps_ssd_rows{shard=\"3\",table=\"0\"}"), 5);
  EXPECT_EQ(got.at("heterps_ps_hits_total{shard=\"3\",table=\"0\"}"), 900);
  EXPECT_EQ(got.at("heterps_ps_misses_total{shard=\"3\",table=\"0\"}"), 4);
  EXPECT_EQ(got.at("heterps_ps_spills_total{shard=\"3\",table=\"0\"}"), 2);
  // Calls as histograms: cumulative buckets up to +Inf = the count, their sum, their errors.
  const std::string pull = "stage=\"0\",replica=\"1\",method=\"PullSparse\"";
  EXPECT_EQ(got.at("heterps_ps_client_rpc_seconds_bucket{" + pull + ",le=\"0.0005\"}"), 0);
  EXPECT_EQ(got.at("heterps_ps_client_rpc_seconds_bucket{" + pull + ",le=\"0.001\"}"), 1);
  EXPECT_EQ(got.at("heterps_ps_client_rpc_seconds_bucket{" + pull + ",le=\"10\"}"), 1);
  EXPECT_EQ(got.at("heterps_ps_client_rpc_seconds_bucket{" + pull + ",le=\"+Inf\"}"), 2);
  EXPECT_EQ(got.at("heterps_ps_client_rpc_seconds_count{" + pull + "}"), 2);
  EXPECT_DOUBLE_EQ(got.at("heterps_ps_client_rpc_seconds_sum{" + pull + "}"), 30.0007);
  EXPECT_EQ(got.at("heterps_ps_client_rpc_errors_total{" + pull + "}"), 1);
  const std::string commit = "shard=\"3\",method=\"Commit\"";
  EXPECT_EQ(got.at("heterps_ps_server_rpc_seconds_bucket{" + commit + ",le=\"0.0025\"}"), 1);
  EXPECT_EQ(got.at("heterps_ps_server_rpc_seconds_count{" + commit + "}"), 1);
  EXPECT_EQ(got.at("heterps_ps_server_rpc_errors_total{" + commit + "}"), 0);
  // 11 replica families x 2 replicas, 6 table families x 2 tables, 1 shard, 13 job-wide, and a
  // histogram (17 buckets, sum, count) and error counter per method.
  const size_t histogram = base::kCallLatencyBounds.size() + 1 + 2 + 1;
  EXPECT_EQ(got.size(), 11u * 2 + 6 * 2 + 1 + 13 + 2 * histogram);

  // And Prometheus's own linter passes it: names, types, suffixes, help.
  PromtoolAccepts(launcher::JobStatusToPrometheus(s));
}

TEST(MetricsTest, TheServerAnswersScrapesAndRefusesWhatItMust) {
  int renders = 0;
  bool fail = false;
  auto render = [&]() -> absl::StatusOr<std::string> {
    if (fail) return absl::NotFoundError("status.json: gone");
    return absl::StrCat("# TYPE x counter\nx ", ++renders, "\n");
  };
  auto server = tools::MetricsHttp::Start({}, render);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto r = client.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "# TYPE x counter\nx 1\n");
  EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("version=0.0.4"));
  r = client.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "# TYPE x counter\nx 2\n");  // rendered afresh for every scrape
  r = client.Get("/other");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  fail = true;
  r = client.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_THAT(r->body, HasSubstr("status.json: gone"));
  fail = false;

  // Beyond loopback: a token, sent as a bearer token by every scrape.
  tools::MetricsHttpOptions open;
  open.host = "0.0.0.0";
  auto refused = tools::MetricsHttp::Start(open, render);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("needs the job's token"));
  open.token = "s3cret";
  auto guarded = tools::MetricsHttp::Start(open, render);
  ASSERT_TRUE(guarded.ok()) << guarded.status();
  httplib::Client scraper("127.0.0.1", (*guarded)->port());
  r = scraper.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = scraper.Get("/metrics", {{"Authorization", "Bearer s3creT"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = scraper.Get("/metrics", {{"Authorization", "Bearer s3cret"}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);

  // A port in use is said so.
  tools::MetricsHttpOptions taken;
  taken.port = (*server)->port();
  auto twice = tools::MetricsHttp::Start(taken, render);
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(twice.status().message(), HasSubstr("cannot listen on 127.0.0.1:"));
}

// Runs headless Chromium on `args` (then the page's URL); its stdout.
std::string Chromium(const std::vector<std::string>& args, const std::string& page) {
  std::string command = "chromium --headless --no-sandbox --disable-gpu --hide-scrollbars";
  for (const std::string& a : args) command += " " + a;
  command += " file://" + page + " 2>/dev/null";
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  char buffer[65536];
  size_t n = 0;
  while (pipe != nullptr && (n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  if (pipe != nullptr) pclose(pipe);
  return out;
}

// The value of attribute `name` of the report's check element in a DOM dump, or -1.
int CheckAttribute(const std::string& dom, const std::string& name) {
  std::smatch m;
  const std::regex element(R"(<div id="report-check"[^>]*>)");
  if (!std::regex_search(dom, m, element)) return -1;
  const std::string tag = m[0];
  if (!std::regex_search(tag, m, std::regex(name + R"re(="(\d+)")re"))) return -1;
  return std::stoi(m[1]);
}

// A real job, scraped while it trains: its step, its replicas and its parameter servers. Its
// report.html reloads itself while the job runs, and after it, opened in a real browser, draws
// every chart without a script error.
TEST(MetricsTest, ARunningJobIsScrapedAndItsReportDraws) {
  const std::string dir = testing::Dir("metrics-job");
  const int port = testing::FreePort();
  testing::Background job({"train", "--rows", "60000", "--batch", "256", "--job-dir", dir,
                           "--metrics-port", std::to_string(port), "--eval-interval", "40",
                           "--metrics-out", dir + "/metrics.json", "--metrics-linger", "120"},
                          dir);
  httplib::Client client("127.0.0.1", port);
  std::map<std::string, double> seen;
  std::string running;
  ASSERT_TRUE(job.WaitFor(
      [&] {
        auto r = client.Get("/metrics");
        if (!r || r->status != 200) return false;
        seen = ParseExposition(r->body);
        running = r->body;
        return seen.count("heterps_job_state{state=\"running\"}") && seen["heterps_step"] >= 5 &&
               seen.count("heterps_eval_auc");
      },
      absl::Seconds(90)))
      << job.err();
  PromtoolAccepts(running);
  EXPECT_GT(seen.at("heterps_samples_total"), 0);
  EXPECT_EQ(static_cast<int64_t>(seen.at("heterps_eval_step")) % 40, 0);
  EXPECT_GT(seen.at("heterps_eval_auc"), 0.5);  // the teacher's data is learnable
  EXPECT_GT(seen.at("heterps_replica_busy_seconds_total{stage=\"0\",replica=\"0\"}"), 0);
  EXPECT_GT(seen.at("heterps_ps_memory_rows{shard=\"0\",table=\"0\"}"), 0);
  // The replica's calls to the servers as it counted them, and as the server did.
  EXPECT_GT(seen.at("heterps_ps_client_rpc_seconds_count{stage=\"0\",replica=\"0\",method="
                    "\"PullSparse\"}"),
            0);
  EXPECT_GT(seen.at("heterps_ps_server_rpc_seconds_count{shard=\"0\",method=\"PullSparse\"}"), 0);
  EXPECT_THAT(testing::Slurp(dir + "/report.html"), HasSubstr("http-equiv=\"refresh\""));
  // The end state is served until a scrape has read it (--metrics-linger 120 here): scraped every
  // 20 ms, the job ends long before that, and the port file goes with the endpoint.
  std::map<std::string, double> end;
  absl::Time done_seen = absl::InfiniteFuture();
  job.WaitFor(
      [&] {  // until the command ends
        auto r = client.Get("/metrics");
        if (r && r->status == 200) end = ParseExposition(r->body);
        if (end.count("heterps_job_state{state=\"done\"}") > 0) {
          done_seen = std::min(done_seen, absl::Now());
        }
        return false;
      },
      absl::Seconds(240));
  ASSERT_GT(end.count("heterps_job_state{state=\"done\"}"), 0u) << job.err();
  EXPECT_LT(absl::Now() - done_seen, absl::Seconds(60)) << "the endpoint outlived its last scrape";
  EXPECT_EQ(end.at("heterps_step"), end.at("heterps_job_steps"));
  EXPECT_EQ(job.Wait(), 0) << job.err();
  EXPECT_THAT(job.err(), HasSubstr("serving the final metrics until the next scrape"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/metrics.port"));
  // The job directory and everything the job wrote in it (checkpoints, logs, the report) are
  // this user's alone.
  using std::filesystem::perms;
  const perms others = perms::group_all | perms::others_all;
  EXPECT_EQ(std::filesystem::status(dir).permissions() & others, perms::none);
  int files = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == "out" || name == "err") continue;  // the test's own capture of the command
    ++files;
    EXPECT_EQ(entry.status().permissions() & others, perms::none) << entry.path();
  }
  EXPECT_GT(files, 5);
  // An evaluation every 40 steps but the last (the end's is the job's own).
  const nlohmann::json metrics = testing::Metrics(dir);
  const int64_t steps = metrics.at("steps").get<int64_t>();
  ASSERT_EQ(metrics.at("evals").size(), static_cast<size_t>((steps - 1) / 40));
  for (size_t i = 0; i < metrics.at("evals").size(); ++i) {
    EXPECT_EQ(metrics["evals"][i]["step"], 40 * static_cast<int64_t>(i + 1));
  }

  const std::string report = testing::Slurp(dir + "/report.html");
  EXPECT_THAT(report, Not(HasSubstr("http-equiv=\"refresh\"")));
  EXPECT_THAT(report, Not(HasSubstr("src=\"http")));  // self-contained
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no chromium here to open the report (scripts/deps.sh installs it)";
  }
  const std::string dom = Chromium({"--dump-dom"}, dir + "/report.html");
  EXPECT_EQ(CheckAttribute(dom, "data-errors"), 0)
      << dom.substr(dom.size() - std::min<size_t>(dom.size(), 400));
  EXPECT_EQ(CheckAttribute(dom, "data-charts"), 6);
  EXPECT_EQ(CheckAttribute(dom, "data-drawn"), 6);
  // The screenshot, kept in the build directory as the test's artifact.
  const std::string shot = std::filesystem::path(testing::kBinary).parent_path().parent_path() /
                           "Testing" / "report.png";
  std::filesystem::create_directories(std::filesystem::path(shot).parent_path());
  Chromium({"--window-size=1400,1500", "--screenshot=" + shot}, dir + "/report.html");
  EXPECT_GT(std::filesystem::file_size(shot), 10000u);
  EXPECT_THAT(job.err(), HasSubstr(absl::StrCat("metrics on http://127.0.0.1:", port, "/metrics")));
}

// heterps ps-server --metrics-port: one shard's tables and the calls it served, by method, agree
// with what the client counted and what it stored.
TEST(MetricsTest, AParameterServerServesItsOwnMetrics) {
  const std::string dir = testing::Dir("metrics-ps");
  testing::Background server(
      {"ps-server", "--data-dir", dir + "/data", "--port-file", dir + "/port", "--metrics-port",
       "0", "--metrics-port-file", dir + "/metrics.port"},
      dir);
  ASSERT_TRUE(server.WaitFor([&] {
    return std::filesystem::exists(dir + "/port") && std::filesystem::exists(dir + "/metrics.port");
  })) << server.err();
  ps::rpc::GrpcPsClientOptions options;
  options.servers = {"127.0.0.1:" +
                     std::string(absl::StripAsciiWhitespace(testing::Slurp(dir + "/port")))};
  auto client = ps::rpc::GrpcPsClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  ps::SparseTableOptions table;
  table.dim = 8;
  ASSERT_TRUE((*client)->CreateSparseTable(0, table).ok());
  std::vector<float> values(100 * 8);
  for (int batch = 0; batch < 7; ++batch) {
    std::vector<uint64_t> keys(100);
    std::iota(keys.begin(), keys.end(), uint64_t{50} * batch);  // 400 distinct keys in all
    ASSERT_TRUE((*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(values))).ok());
  }

  int port = 0;
  ASSERT_TRUE(
      absl::SimpleAtoi(absl::StripAsciiWhitespace(testing::Slurp(dir + "/metrics.port")), &port));
  httplib::Client scraper("127.0.0.1", port);
  auto r = scraper.Get("/metrics");
  ASSERT_TRUE(r && r->status == 200);
  const std::map<std::string, double> got = ParseExposition(r->body);
  PromtoolAccepts(r->body);
  int64_t pulls = 0;
  for (const base::MethodStats& m : (*client)->CallStats()) {
    if (m.method == "PullSparse") pulls = m.calls;
  }
  EXPECT_EQ(pulls, 7);
  const std::string pull = "shard=\"0\",method=\"PullSparse\"";
  EXPECT_EQ(got.at("heterps_ps_server_rpc_seconds_count{" + pull + "}"), pulls);
  EXPECT_EQ(got.at("heterps_ps_server_rpc_seconds_bucket{" + pull + ",le=\"+Inf\"}"), pulls);
  EXPECT_GT(got.at("heterps_ps_server_rpc_seconds_sum{" + pull + "}"), 0);
  EXPECT_EQ(got.at("heterps_ps_server_rpc_errors_total{" + pull + "}"), 0);
  EXPECT_EQ(got.at("heterps_ps_server_rpc_seconds_count{shard=\"0\",method=\"CreateTable\"}"), 1);
  EXPECT_EQ(got.at("heterps_ps_memory_rows{shard=\"0\",table=\"0\"}"), 400);
  EXPECT_GE(got.at("heterps_ps_calls_total{shard=\"0\"}"), 8);  // Info, CreateTable, 7 pulls

  client->reset();
  server.Signal(SIGTERM);
  EXPECT_EQ(server.Wait(), 0) << server.err();
  EXPECT_THAT(server.err(), HasSubstr("metrics on http://127.0.0.1:"));
}

// heterps plan --report: the plan beside its baselines, and with --pareto the frontier.
TEST(MetricsTest, APlanReportDrawsItsFrontier) {
  if (std::system("command -v chromium >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no chromium here to open the report (scripts/deps.sh installs it)";
  }
  const std::string dir = testing::Dir("plan-report");
  testing::Outcome r =
      testing::Heterps({"plan", "--time-limit", "2", "--report", dir + "/plan.html"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string dom = Chromium({"--dump-dom"}, dir + "/plan.html");
  EXPECT_EQ(CheckAttribute(dom, "data-errors"), 0);
  EXPECT_EQ(CheckAttribute(dom, "data-charts"), 1);
  EXPECT_EQ(CheckAttribute(dom, "data-drawn"), 1);
  EXPECT_THAT(dom, ::testing::HasSubstr("<b>parameter servers</b>"));  // beside the pipeline
  r = testing::Heterps({"plan", "--pareto", "--pareto-points", "4", "--time-limit", "2", "--report",
                        dir + "/frontier.html"},
                       dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  dom = Chromium({"--dump-dom"}, dir + "/frontier.html");
  EXPECT_EQ(CheckAttribute(dom, "data-errors"), 0);
  EXPECT_EQ(CheckAttribute(dom, "data-charts"), 2);
  EXPECT_EQ(CheckAttribute(dom, "data-drawn"), 2);
}

}  // namespace
}  // namespace heterps
