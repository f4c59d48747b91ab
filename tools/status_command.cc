#include "tools/status_command.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/file.h"
#include "nlohmann/json.hpp"
#include "tools/cli_common.h"
#include "tools/table.h"

namespace heterps::tools {

CLI::App* AddStatusCommand(CLI::App& app, StatusFlags& flags) {
  CLI::App* cmd = app.add_subcommand("status", "Show a training job's progress and counters");
  cmd->add_option("job_dir", flags.job_dir, "The job's directory (heterps train --job-dir)")
      ->required();
  return cmd;
}

int RunStatus(const StatusFlags& flags) {
  const std::string path = flags.job_dir + "/status.json";
  absl::StatusOr<std::string> text = base::ReadTextFile(path);
  if (!text.ok()) {
    return Fail(absl::NotFoundError(
        absl::StrCat(path, ": no status (not a job directory, or the job has not started)")));
  }
  const nlohmann::json s = nlohmann::json::parse(*text, nullptr, false);
  if (s.is_discarded() || !s.is_object()) {
    return Fail(absl::DataLossError(absl::StrCat(path, ": not a job status")));
  }
  const int64_t step = s.value("step", int64_t{0}), total = s.value("total_steps", int64_t{0});
  std::printf("%s: step %lld of %lld %s, %s samples, %s samples/s", s.value("state", "?").c_str(),
              static_cast<long long>(step), static_cast<long long>(total),
              Bar(step, std::max<int64_t>(total, 1)).c_str(),
              WithCommas(s.value("samples", 0.0)).c_str(),
              WithCommas(s.value("samples_per_second", 0.0)).c_str());
  const double predicted = s.value("predicted_samples_per_second", 0.0);
  if (predicted > 0) std::printf(" (plan: %s)", WithCommas(predicted).c_str());
  std::printf(", loss %.4f, %d restarts; updated %s\n\n", s.value("loss", 0.0),
              s.value("restarts", 0), s.value("updated", "?").c_str());
  Table replicas(
      {"stage", "replica", "micro-batches", "busy", "idle", "send", "sent", "queue", "in flight"},
      {true, true, true, true, true, true, true, true, true});
  for (const auto& r : s.value("replicas", nlohmann::json::array())) {
    replicas.AddRow(
        {std::to_string(r.value("stage", 0)), std::to_string(r.value("replica", 0)),
         WithCommas(r.value("micro_batches", 0.0)), HumanSeconds(r.value("busy_seconds", 0.0)),
         HumanSeconds(r.value("idle_seconds", 0.0)), HumanSeconds(r.value("send_seconds", 0.0)),
         absl::StrFormat("%.1f MB", r.value("bytes_sent", 0.0) / 1e6),
         std::to_string(r.value("queue_depth", 0)), std::to_string(r.value("in_flight", 0))});
  }
  std::printf("%s\n", replicas.Render().c_str());
  Table shards(
      {"shard", "table", "rows in memory", "memory", "rows on SSD", "hits", "misses", "spills"},
      {true, true, true, true, true, true, true, true});
  for (const auto& shard : s.value("parameter_servers", nlohmann::json::array())) {
    for (const auto& t : shard.value("tables", nlohmann::json::array())) {
      shards.AddRow({std::to_string(shard.value("shard", 0)), std::to_string(t.value("table", 0)),
                     WithCommas(t.value("memory_rows", 0.0)),
                     absl::StrFormat("%.1f MB", t.value("memory_bytes", 0.0) / 1e6),
                     WithCommas(t.value("cold_rows", 0.0)), WithCommas(t.value("hits", 0.0)),
                     WithCommas(t.value("misses", 0.0)), WithCommas(t.value("spills", 0.0))});
    }
  }
  std::printf("%s", shards.Render().c_str());
  return 0;
}

}  // namespace heterps::tools
