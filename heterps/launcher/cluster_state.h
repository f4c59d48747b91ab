// What changes a running job's plan from outside (docs/elastic.md): the cluster state file (units
// available and prices, per type: what a cloud controller, a script or a person rewrites) and the
// job's control file (<job_dir>/control.json, written by `heterps ctl`: a new throughput limit, a
// deadline, or a plan to switch to).
//
//   cluster-state.json:
//     {"types": [{"name": "v100-spot", "units": 0},                  // preempted
//                {"name": "cpu-spot", "price_per_hour": 0.35}]}      // a new spot price
//
//   control.json (heterps ctl DIR --throughput 50000 | --deadline 2026-11-24T06:00:00Z
//                                 | --plan plan.json [--ps-shards 3]):
//     {"format": "heterps-control-v1", "throughput": 50000}
//
// A type the state does not name keeps the cluster spec's figures. Every reader checks every
// field: a malformed file is an error naming the file and the field, and the caller keeps what
// it had (a bad update never changes a running job).
//
// Thread safety: plain values and functions of their arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "heterps/base/env.h"
#include "heterps/config/cluster_spec.h"

namespace heterps::launcher {

struct TypeState {
  std::string name;
  std::optional<int64_t> units;          // available now; 0: none (preempted)
  std::optional<double> price_per_hour;  // USD per unit-hour now
};

struct ClusterState {
  std::vector<TypeState> types;
};

// Parses a cluster state against the cluster it changes: every name a type of `cluster`, once;
// units >= 0 integers, prices >= 0 and finite. InvalidArgument "<source>: types[1].units: ...".
absl::StatusOr<ClusterState> ParseClusterState(absl::string_view text, absl::string_view source,
                                               const config::ClusterSpec& cluster);

// `cluster` with the state's units and prices.
config::ClusterSpec ApplyClusterState(config::ClusterSpec cluster, const ClusterState& state);

// What `heterps ctl` asks of a running job. At most one of throughput and deadline.
struct JobControl {
  double throughput = 0;               // samples/s the plan must reach from now on; 0: unchanged
  std::optional<absl::Time> deadline;  // finish by then, at the lowest cost
  std::string plan_json;               // a plan (docs/plan_format.md) to switch to; empty: none
  std::string plan_source;             // where plan_json came from, for messages
  int ps_shards = 0;                   // parameter servers of that plan; 0: sized for it
};

// The most a cluster-state file, a watched cluster spec or a control request may hold, when the
// job starts and while it runs: larger ones are refused (a state is a few lines per type).
inline constexpr size_t kMaxClusterStateBytes = size_t{1} << 20;

// <job_dir>/control.json, written atomically.
absl::Status WriteJobControl(base::Env* env, const std::string& job_dir, const JobControl& control);
// Parses a control file. InvalidArgument naming `source` and the field.
absl::StatusOr<JobControl> ParseJobControl(absl::string_view text, absl::string_view source);
std::string JobControlPath(const std::string& job_dir);

}  // namespace heterps::launcher
