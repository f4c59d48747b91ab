#include "heterps/launcher/job_metrics.h"

#include <cmath>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace heterps::launcher {
namespace {

// A label value escaped as the format wants: backslash, double quote and newline.
std::string Escape(absl::string_view value) {
  std::string out;
  for (char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  return absl::StrFormat("%.17g", x);
}

// One metric family: its HELP and TYPE lines, then a sample per series.
class Family {
 public:
  Family(std::string* out, absl::string_view name, absl::string_view type, absl::string_view help)
      : out_(out), name_(name) {
    absl::StrAppend(out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  Family& Add(double value, absl::string_view labels = "") {
    absl::StrAppend(out_, name_, labels.empty() ? "" : absl::StrCat("{", labels, "}"), " ",
                    Number(value), "\n");
    return *this;
  }

 private:
  std::string* out_;
  std::string name_;
};

std::string ReplicaLabels(const ReplicaStatus& r) {
  return absl::StrCat("stage=\"", r.stage, "\",replica=\"", r.replica, "\"");
}

// Calls by method of many series (a label set each) as one histogram family
// `<name>_seconds` and one counter family `<name>_errors_total`.
void AddCallFamilies(
    std::string* out, absl::string_view name, absl::string_view who,
    const std::vector<std::pair<std::string, const std::vector<base::MethodStats>*>>& series) {
  // Each method's labels, once: its series's and its name.
  std::vector<std::pair<std::string, const base::MethodStats*>> each;
  for (const auto& [labels, methods] : series) {
    for (const base::MethodStats& m : *methods) {
      each.emplace_back(
          absl::StrCat(labels, labels.empty() ? "" : ",", "method=\"", Escape(m.method), "\""), &m);
    }
  }
  const std::string seconds = absl::StrCat(name, "_seconds");
  absl::StrAppend(out, "# HELP ", seconds, " Latency of the RPCs ", who,
                  ", by method (every call, failed ones included)\n# TYPE ", seconds,
                  " histogram\n");
  for (const auto& [l, stats] : each) {
    const base::MethodStats& m = *stats;
    int64_t cumulative = 0;
    for (size_t b = 0; b < base::kCallLatencyBounds.size(); ++b) {
      cumulative += b < m.buckets.size() ? m.buckets[b] : 0;
      absl::StrAppend(out, seconds, "_bucket{", l, ",le=\"",
                      absl::StrFormat("%g", base::kCallLatencyBounds[b]), "\"} ", cumulative, "\n");
    }
    absl::StrAppend(out, seconds, "_bucket{", l, ",le=\"+Inf\"} ", m.calls, "\n");
    absl::StrAppend(out, seconds, "_sum{", l, "} ", Number(m.seconds), "\n");
    absl::StrAppend(out, seconds, "_count{", l, "} ", m.calls, "\n");
  }
  Family errors(out, absl::StrCat(name, "_errors_total"), "counter",
                absl::StrCat("RPCs ", who, " that failed, by method"));
  for (const auto& [l, m] : each) errors.Add(static_cast<double>(m->errors), l);
}

}  // namespace

std::string JobStatusToPrometheus(const JobStatus& s) {
  std::string out;
  Family(&out, "heterps_job_state", "gauge",
         "1 for the job's state: running, done, failed or stopped")
      .Add(1, absl::StrCat("state=\"", Escape(s.state), "\""));
  Family(&out, "heterps_job_restarts_total", "counter",
         "Restarts of the job from a checkpoint after a failed process")
      .Add(s.restarts);
  Family(&out, "heterps_job_generation", "gauge", "The plan's generation (grows at each re-plan)")
      .Add(static_cast<double>(s.generation));
  Family(&out, "heterps_step", "gauge", "Training steps done").Add(static_cast<double>(s.step));
  Family(&out, "heterps_job_steps", "gauge", "Training steps of the whole job, done or not")
      .Add(static_cast<double>(s.total_steps));
  Family(&out, "heterps_samples_total", "counter", "Training samples done")
      .Add(static_cast<double>(s.samples));
  Family(&out, "heterps_samples_per_second", "gauge", "Measured training throughput")
      .Add(s.samples_per_second);
  Family(&out, "heterps_predicted_samples_per_second", "gauge",
         "The plan's predicted training throughput")
      .Add(s.predicted_samples_per_second);
  Family(&out, "heterps_train_loss", "gauge", "Training logloss of the recent steps").Add(s.loss);
  Family(&out, "heterps_step_running_seconds", "gauge",
         "How long the step in progress has run (a hung step grows it)")
      .Add(s.step_seconds);
  if (s.eval_step >= 0) {
    Family(&out, "heterps_eval_step", "gauge", "Steps trained before the latest evaluation")
        .Add(static_cast<double>(s.eval_step));
    Family(&out, "heterps_eval_logloss", "gauge", "Logloss of the latest evaluation (held out)")
        .Add(s.eval_logloss);
    Family(&out, "heterps_eval_auc", "gauge", "AUC of the latest evaluation (held out)")
        .Add(s.eval_auc);
  }

  // Per replica.
  struct PerReplica {
    const char* name;
    const char* type;
    const char* help;
    std::function<double(const ReplicaStatus&)> value;
  };
  const std::vector<PerReplica> replica_metrics = {
      {"heterps_replica_micro_batches_total", "counter", "Micro-batches a replica processed",
       [](const ReplicaStatus& r) { return static_cast<double>(r.micro_batches); }},
      {"heterps_replica_busy_seconds_total", "counter",
       "Seconds a replica computed (forward, backward, its parameter-server calls included)",
       [](const ReplicaStatus& r) { return r.busy_seconds; }},
      {"heterps_replica_ps_seconds_total", "counter",
       "Seconds of a replica's busy time spent waiting for the parameter servers",
       [](const ReplicaStatus& r) { return r.ps_seconds; }},
      {"heterps_replica_send_seconds_total", "counter",
       "Seconds a replica spent sending activations or gradients to its neighbour stages",
       [](const ReplicaStatus& r) { return r.send_seconds; }},
      {"heterps_replica_idle_seconds_total", "counter",
       "Seconds a replica waited for work (upstream, downstream or the step's barrier)",
       [](const ReplicaStatus& r) { return r.idle_seconds; }},
      {"heterps_replica_sent_bytes_total", "counter", "Bytes a replica sent to other stages",
       [](const ReplicaStatus& r) { return static_cast<double>(r.bytes_sent); }},
      {"heterps_replica_queue_depth", "gauge", "Micro-batches waiting in a replica's queue",
       [](const ReplicaStatus& r) { return static_cast<double>(r.queue_depth); }},
      {"heterps_replica_in_flight", "gauge", "Micro-batches a replica has sent on, not yet back",
       [](const ReplicaStatus& r) { return static_cast<double>(r.in_flight); }},
      {"heterps_replica_pcie_bytes_total", "counter",
       "Bytes between host and device of a replica's stage and its GPU tier, both ways",
       [](const ReplicaStatus& r) { return static_cast<double>(r.pcie_bytes); }},
      {"heterps_gpu_tier_hits_total", "counter", "Keys a replica found in its GPU tier",
       [](const ReplicaStatus& r) { return static_cast<double>(r.tier_hits); }},
      {"heterps_gpu_tier_misses_total", "counter",
       "Keys a replica's GPU tier passed through to the parameter servers",
       [](const ReplicaStatus& r) { return static_cast<double>(r.tier_misses); }},
  };
  for (const PerReplica& m : replica_metrics) {
    Family family(&out, m.name, m.type, m.help);
    for (const ReplicaStatus& r : s.replicas) family.Add(m.value(r), ReplicaLabels(r));
  }

  std::vector<std::pair<std::string, const std::vector<base::MethodStats>*>> client_calls;
  for (const ReplicaStatus& r : s.replicas) client_calls.emplace_back(ReplicaLabels(r), &r.ps_rpcs);
  AddCallFamilies(&out, "heterps_ps_client_rpc", "a replica made to the parameter servers",
                  client_calls);
  out += ParameterServersToPrometheus(s.parameter_servers);
  return out;
}

std::string ParameterServersToPrometheus(const std::vector<ShardStatus>& shards) {
  std::string out;
  {
    Family calls(&out, "heterps_ps_calls_total", "counter", "RPCs a parameter-server shard served");
    for (const ShardStatus& shard : shards) {
      calls.Add(static_cast<double>(shard.calls), absl::StrCat("shard=\"", shard.shard, "\""));
    }
  }
  struct PerTable {
    const char* name;
    const char* type;
    const char* help;
    std::function<double(const TableStatus&)> value;
  };
  const std::vector<PerTable> table_metrics = {
      {"heterps_ps_memory_rows", "gauge", "Rows a table holds in memory (the hot tier)",
       [](const TableStatus& t) { return static_cast<double>(t.memory_rows); }},
      {"heterps_ps_memory_bytes", "gauge", "Bytes of a table's rows in memory",
       [](const TableStatus& t) { return static_cast<double>(t.memory_bytes); }},
      {"heterps_ps_ssd_rows", "gauge", "Rows a table holds on SSD (the cold tier, RocksDB)",
       [](const TableStatus& t) { return static_cast<double>(t.cold_rows); }},
      {"heterps_ps_hits_total", "counter", "Row accesses a table served from memory",
       [](const TableStatus& t) { return static_cast<double>(t.hits); }},
      {"heterps_ps_misses_total", "counter", "Lookups that brought a row back from SSD",
       [](const TableStatus& t) { return static_cast<double>(t.misses); }},
      {"heterps_ps_spills_total", "counter", "Rows a table moved from memory to SSD",
       [](const TableStatus& t) { return static_cast<double>(t.spills); }},
  };
  for (const PerTable& m : table_metrics) {
    Family family(&out, m.name, m.type, m.help);
    for (const ShardStatus& shard : shards) {
      for (const TableStatus& t : shard.tables) {
        family.Add(m.value(t), absl::StrCat("shard=\"", shard.shard, "\",table=\"", t.table, "\""));
      }
    }
  }
  std::vector<std::pair<std::string, const std::vector<base::MethodStats>*>> server_calls;
  for (const ShardStatus& shard : shards) {
    server_calls.emplace_back(absl::StrCat("shard=\"", shard.shard, "\""), &shard.rpcs);
  }
  AddCallFamilies(&out, "heterps_ps_server_rpc", "a parameter-server shard served", server_calls);
  return out;
}

}  // namespace heterps::launcher
