// A job's status (job_status.h) in Prometheus's text exposition format (version 0.0.4), for the
// /metrics endpoint of `heterps train --metrics-port` and `heterps node` (tools/metrics_http.h).
//
//   HETERPS_ASSIGN_OR_RETURN(JobStatus status, ReadJobStatus(env, job_dir));
//   std::string text = JobStatusToPrometheus(status);
//
// Every metric is named heterps_<what>_<unit>, has a HELP and a TYPE line, and carries the labels
// that tell its series apart: stage and replica for a replica's figures, shard and table for the
// parameter servers'. Counters (time spent, batches, bytes, hits) only grow within one attempt of
// the job; a restart (heterps_job_restarts_total) starts the replicas' counters again, as a
// restarted process does in any Prometheus setup. Names and labels: docs/runtime.md, "Metrics".
//
// Thread safety: a pure function.
#pragma once

#include <string>

#include "heterps/launcher/job_status.h"

namespace heterps::launcher {

std::string JobStatusToPrometheus(const JobStatus& status);

// The parameter servers' part alone (calls, tables' tiers, RPC latencies): what
// `heterps ps-server --metrics-port` serves for its own shard.
std::string ParameterServersToPrometheus(const std::vector<ShardStatus>& shards);

}  // namespace heterps::launcher
