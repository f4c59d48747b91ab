#include "heterps/launcher/job_status.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "heterps/base/json.h"
#include "heterps/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace heterps::launcher {
namespace {

using json = nlohmann::ordered_json;

constexpr char kStatusFile[] = "/status.json";

json MethodsToJson(const std::vector<base::MethodStats>& methods) {
  json out = json::array();
  for (const base::MethodStats& m : methods) {
    out.push_back({{"method", m.method},
                   {"calls", m.calls},
                   {"errors", m.errors},
                   {"seconds", m.seconds},
                   {"buckets", m.buckets},
                   {"sent_bytes", m.sent_bytes},
                   {"received_bytes", m.received_bytes}});
  }
  return out;
}

// The optional list `key` of calls by method (absent in a status written before it existed).
absl::StatusOr<std::vector<base::MethodStats>> MethodsFrom(const base::JsonObject& o,
                                                           absl::string_view key) {
  std::vector<base::MethodStats> out;
  if (!o.Has(key)) return out;
  HETERPS_ASSIGN_OR_RETURN(std::vector<base::JsonObject> methods, o.Objects(key));
  for (const base::JsonObject& m : methods) {
    base::MethodStats stats;
    HETERPS_ASSIGN_OR_RETURN(stats.method, m.String("method"));
    HETERPS_ASSIGN_OR_RETURN(stats.calls, m.Int("calls", 0));
    HETERPS_ASSIGN_OR_RETURN(stats.errors, m.Int("errors", 0, stats.calls));
    HETERPS_ASSIGN_OR_RETURN(stats.seconds, m.Double("seconds"));
    HETERPS_ASSIGN_OR_RETURN(stats.buckets, m.Ints("buckets"));
    HETERPS_ASSIGN_OR_RETURN(stats.sent_bytes, m.IntOr("sent_bytes", 0));
    HETERPS_ASSIGN_OR_RETURN(stats.received_bytes, m.IntOr("received_bytes", 0));
    if (stats.buckets.size() != base::kCallLatencyBounds.size() + 1) {
      return m.Error("buckets", absl::StrCat("has ", stats.buckets.size(), " counts, expected ",
                                             base::kCallLatencyBounds.size() + 1));
    }
    out.push_back(std::move(stats));
  }
  return out;
}

absl::StatusOr<ReplicaStatus> ReplicaFrom(const base::JsonObject& o) {
  ReplicaStatus r;
  HETERPS_ASSIGN_OR_RETURN(int64_t stage, o.Int("stage", 0, INT32_MAX));
  HETERPS_ASSIGN_OR_RETURN(int64_t replica, o.Int("replica", 0, INT32_MAX));
  r.stage = static_cast<int>(stage);
  r.replica = static_cast<int>(replica);
  HETERPS_ASSIGN_OR_RETURN(r.micro_batches, o.Int("micro_batches", 0));
  HETERPS_ASSIGN_OR_RETURN(r.busy_seconds, o.Double("busy_seconds"));
  HETERPS_ASSIGN_OR_RETURN(r.idle_seconds, o.Double("idle_seconds"));
  HETERPS_ASSIGN_OR_RETURN(r.send_seconds, o.Double("send_seconds"));
  HETERPS_ASSIGN_OR_RETURN(r.ps_seconds, o.Double("ps_seconds"));
  HETERPS_ASSIGN_OR_RETURN(r.bytes_sent, o.Int("bytes_sent", 0));
  HETERPS_ASSIGN_OR_RETURN(int64_t queue, o.Int("queue_depth", 0, INT32_MAX));
  HETERPS_ASSIGN_OR_RETURN(int64_t in_flight, o.Int("in_flight", 0, INT32_MAX));
  r.queue_depth = static_cast<int>(queue);
  r.in_flight = static_cast<int>(in_flight);
  HETERPS_ASSIGN_OR_RETURN(r.pcie_bytes, o.IntOr("pcie_bytes", 0));
  HETERPS_ASSIGN_OR_RETURN(r.tier_hits, o.IntOr("tier_hits", 0));
  HETERPS_ASSIGN_OR_RETURN(r.tier_misses, o.IntOr("tier_misses", 0));
  HETERPS_ASSIGN_OR_RETURN(r.ps_rpcs, MethodsFrom(o, "ps_rpcs"));
  return r;
}

absl::StatusOr<TableStatus> TableFrom(const base::JsonObject& o) {
  TableStatus t;
  HETERPS_ASSIGN_OR_RETURN(int64_t table, o.Int("table", 0, INT32_MAX));
  t.table = static_cast<int>(table);
  HETERPS_ASSIGN_OR_RETURN(t.memory_rows, o.Int("memory_rows", 0));
  HETERPS_ASSIGN_OR_RETURN(t.memory_bytes, o.Int("memory_bytes", 0));
  HETERPS_ASSIGN_OR_RETURN(t.cold_rows, o.Int("cold_rows", 0));
  HETERPS_ASSIGN_OR_RETURN(t.hits, o.Int("hits", 0));
  HETERPS_ASSIGN_OR_RETURN(t.misses, o.Int("misses", 0));
  HETERPS_ASSIGN_OR_RETURN(t.spills, o.Int("spills", 0));
  return t;
}

}  // namespace

std::string JobStatusToJson(const JobStatus& s) {
  json replicas = json::array();
  for (const ReplicaStatus& r : s.replicas) {
    replicas.push_back({{"stage", r.stage},
                        {"replica", r.replica},
                        {"micro_batches", r.micro_batches},
                        {"busy_seconds", r.busy_seconds},
                        {"idle_seconds", r.idle_seconds},
                        {"send_seconds", r.send_seconds},
                        {"ps_seconds", r.ps_seconds},
                        {"bytes_sent", r.bytes_sent},
                        {"queue_depth", r.queue_depth},
                        {"in_flight", r.in_flight},
                        {"pcie_bytes", r.pcie_bytes},
                        {"tier_hits", r.tier_hits},
                        {"tier_misses", r.tier_misses},
                        {"ps_rpcs", MethodsToJson(r.ps_rpcs)}});
  }
  json shards = json::array();
  for (const ShardStatus& shard : s.parameter_servers) {
    json tables = json::array();
    for (const TableStatus& t : shard.tables) {
      tables.push_back({{"table", t.table},
                        {"memory_rows", t.memory_rows},
                        {"memory_bytes", t.memory_bytes},
                        {"cold_rows", t.cold_rows},
                        {"hits", t.hits},
                        {"misses", t.misses},
                        {"spills", t.spills}});
    }
    shards.push_back({{"shard", shard.shard},
                      {"calls", shard.calls},
                      {"tables", tables},
                      {"rpcs", MethodsToJson(shard.rpcs)}});
  }
  json root = {{"state", s.state},
               {"error", s.error},
               {"pid", s.pid},
               {"generation", s.generation},
               {"restarts", s.restarts},
               {"step", s.step},
               {"total_steps", s.total_steps},
               {"samples", s.samples},
               {"samples_per_second", s.samples_per_second},
               {"predicted_samples_per_second", s.predicted_samples_per_second},
               {"loss", s.loss},
               {"step_seconds", s.step_seconds},
               {"phase", s.phase},
               {"eval_step", s.eval_step},
               {"eval_logloss", s.eval_logloss},
               {"eval_auc", s.eval_auc},
               {"replicas", replicas},
               {"parameter_servers", shards},
               {"updated", s.updated}};
  return root.dump(1, ' ', false, json::error_handler_t::replace) + "\n";
}

absl::StatusOr<JobStatus> ParseJobStatus(absl::string_view text, absl::string_view source) {
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject root, base::JsonObject::Parse(text, source));
  JobStatus s;
  HETERPS_ASSIGN_OR_RETURN(s.state, root.String("state"));
  HETERPS_ASSIGN_OR_RETURN(s.error, root.StringOr("error", ""));
  HETERPS_ASSIGN_OR_RETURN(s.pid, root.Int("pid", 0));
  HETERPS_ASSIGN_OR_RETURN(s.generation, root.Int("generation", 0));
  HETERPS_ASSIGN_OR_RETURN(int64_t restarts, root.Int("restarts", 0, INT32_MAX));
  s.restarts = static_cast<int>(restarts);
  HETERPS_ASSIGN_OR_RETURN(s.step, root.Int("step", 0));
  HETERPS_ASSIGN_OR_RETURN(s.total_steps, root.Int("total_steps", 0));
  HETERPS_ASSIGN_OR_RETURN(s.samples, root.Int("samples", 0));
  HETERPS_ASSIGN_OR_RETURN(s.samples_per_second, root.Double("samples_per_second"));
  HETERPS_ASSIGN_OR_RETURN(s.predicted_samples_per_second,
                           root.Double("predicted_samples_per_second"));
  HETERPS_ASSIGN_OR_RETURN(s.loss, root.Double("loss"));
  HETERPS_ASSIGN_OR_RETURN(s.step_seconds, root.DoubleOr("step_seconds", 0));
  HETERPS_ASSIGN_OR_RETURN(s.phase, root.StringOr("phase", ""));
  HETERPS_ASSIGN_OR_RETURN(s.eval_step, root.IntOr("eval_step", -1));
  HETERPS_ASSIGN_OR_RETURN(s.eval_logloss, root.DoubleOr("eval_logloss", 0));
  HETERPS_ASSIGN_OR_RETURN(s.eval_auc, root.DoubleOr("eval_auc", 0));
  HETERPS_ASSIGN_OR_RETURN(std::vector<base::JsonObject> replicas, root.Objects("replicas"));
  for (const base::JsonObject& r : replicas) {
    HETERPS_ASSIGN_OR_RETURN(ReplicaStatus replica, ReplicaFrom(r));
    s.replicas.push_back(replica);
  }
  HETERPS_ASSIGN_OR_RETURN(std::vector<base::JsonObject> shards, root.Objects("parameter_servers"));
  for (const base::JsonObject& o : shards) {
    ShardStatus shard;
    HETERPS_ASSIGN_OR_RETURN(int64_t index, o.Int("shard", 0, INT32_MAX));
    shard.shard = static_cast<int>(index);
    HETERPS_ASSIGN_OR_RETURN(shard.calls, o.Int("calls", 0));
    HETERPS_ASSIGN_OR_RETURN(std::vector<base::JsonObject> tables, o.Objects("tables"));
    for (const base::JsonObject& t : tables) {
      HETERPS_ASSIGN_OR_RETURN(TableStatus table, TableFrom(t));
      shard.tables.push_back(table);
    }
    HETERPS_ASSIGN_OR_RETURN(shard.rpcs, MethodsFrom(o, "rpcs"));
    s.parameter_servers.push_back(std::move(shard));
  }
  HETERPS_ASSIGN_OR_RETURN(s.updated, root.String("updated"));
  return s;
}

absl::Status MarkJobEnded(base::Env* env, const std::string& job_dir, const std::string& state,
                          const std::string& error) {
  absl::StatusOr<JobStatus> status = ReadJobStatus(env, job_dir);
  JobStatus s = status.ok() ? *std::move(status) : JobStatus{};
  s.state = state;
  s.error = error;
  s.updated = absl::FormatTime(env->Now());
  return WriteJobStatus(env, job_dir, s);
}

absl::Status WriteJobStatus(base::Env* env, const std::string& job_dir, const JobStatus& status) {
  return base::WriteFileAtomically(env, job_dir + kStatusFile, JobStatusToJson(status));
}

absl::StatusOr<JobStatus> ReadJobStatus(base::Env* env, const std::string& job_dir) {
  const std::string path = job_dir + kStatusFile;
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, path, 64 << 20));
  return ParseJobStatus(text, path);
}

}  // namespace heterps::launcher
