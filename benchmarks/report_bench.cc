// What the job report and the /metrics endpoint cost a running job: the time to write
// report.html (rendered from a long job's series and a status of 8 replicas and 4 shards) and to
// render one scrape, against the interval at which each happens (a write every 5 s at most, a
// scrape every 5 s at Prometheus's usual setting).
//
//   build/benchmarks/report_bench
#include <cstdio>
#include <filesystem>

#include "absl/time/clock.h"
#include "heterps/base/env.h"
#include "heterps/launcher/job_metrics.h"
#include "heterps/launcher/job_status.h"
#include "tools/html_report.h"

int main() {
  const std::string dir = std::filesystem::temp_directory_path() / "heterps-report-bench";
  std::filesystem::create_directories(dir);
  heterps::launcher::JobStatus status;
  status.state = "running";
  // Each replica and shard with the latency histograms of six methods.
  heterps::base::CallStats calls;
  for (const char* method :
       {"PullSparse", "PushSparse", "AccumulateSparse", "PullDense", "PushDense", "Commit"}) {
    for (int i = 1; i <= 100; ++i) calls.Record(method, true, absl::Microseconds(37 * i));
  }
  for (int r = 0; r < 8; ++r) {
    heterps::launcher::ReplicaStatus replica;
    replica.stage = r / 4;
    replica.replica = r % 4;
    replica.micro_batches = 1000;
    replica.busy_seconds = 10;
    replica.ps_rpcs = calls.Snapshot();
    status.replicas.push_back(replica);
  }
  for (int s = 0; s < 4; ++s) {
    heterps::launcher::ShardStatus shard;
    shard.shard = s;
    shard.tables = {{0, 1000000, 64000000, 0, 900, 1, 0}};
    shard.rpcs = calls.Snapshot();
    status.parameter_servers.push_back(shard);
  }
  if (!heterps::launcher::WriteJobStatus(heterps::base::DefaultEnv(), dir, status).ok()) return 1;
  nlohmann::ordered_json plan = {{"model", "bench"}, {"stages", nlohmann::ordered_json::array()}};
  heterps::tools::JobReport report(dir, plan);
  // Ten hours of progress at 10 steps/s (the page keeps 1,000 points of it).
  for (int i = 0; i < 360000; ++i) {
    heterps::launcher::JobProgress p;
    p.step = i;
    p.samples = int64_t{2048} * i;
    p.seconds = i * 0.1;
    p.loss = 0.5;
    report.Progress(p);  // writes once here (the first call), then at most every 5 s
  }
  constexpr int kWrites = 50;
  absl::Time start = absl::Now();
  for (int i = 0; i < kWrites; ++i) {
    if (!report.Finish(nullptr, "running").ok()) return 1;
  }
  const double write_s = absl::ToDoubleSeconds(absl::Now() - start) / kWrites;
  constexpr int kScrapes = 2000;
  start = absl::Now();
  size_t bytes = 0;
  for (int i = 0; i < kScrapes; ++i) {
    auto read = heterps::launcher::ReadJobStatus(heterps::base::DefaultEnv(), dir);
    bytes += heterps::launcher::JobStatusToPrometheus(*read).size();
  }
  const double scrape_s = absl::ToDoubleSeconds(absl::Now() - start) / kScrapes;
  std::printf(
      "report_bench: report.html of %.0f KB (ten hours of progress, 8 replicas, 4 shards, six "
      "RPC methods each) "
      "written in %.2f ms: %.3f%% of one core at one write per 5 s\n"
      "              a /metrics scrape rendered in %.3f ms (%zu bytes): %.4f%% of one core at one "
      "scrape per 5 s\n",
      std::filesystem::file_size(report.path()) / 1e3, 1e3 * write_s, 100 * write_s / 5,
      1e3 * scrape_s, bytes / kScrapes, 100 * scrape_s / 5);
  std::filesystem::remove_all(dir);
  return 0;
}
