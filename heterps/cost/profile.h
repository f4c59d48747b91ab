// The profile table: measured per-layer times on local devices (profile.json).
//
// A measurement replaces the analytic compute estimate OCT(l, t) for that (layer, type). Types with
// at least one measurement are also *calibrated*: their unmeasured layers get the analytic estimate
// times the median measured/estimated ratio of the measured ones. A network entry replaces a type's
// network figures (W_t, lat_t) by what a distributed job measured paying on this host for its
// parameter-server traffic. docs/cost_model.md documents the file format:
//
//   {"format": "heterps-profile-v1", "model": "dlrm-small", "batch_size": 2048,
//    "host": "free text", "entries": [{"layer": "top.0", "type": "host-cpu",
//                                      "seconds_per_batch": 0.0021}, ...],
//    "network": [{"type": "host-cpu", "bytes_per_second": 2.1e8, "seconds_per_message": 3e-4}],
//    "tier": [{"type": "h200", "lookups_per_batch": 53248, "loaded_rows_per_batch": 1210,
//              "passed_rows_per_batch": 0, "dense_held": true, "tier_bytes": 4294967296}]}
//
// "network" is optional: without it the types keep the cluster spec's network figures. Files
// written before it was named so call it "wire", which is read as well (not both in one file).
// "tier" is optional too: a type's GPU tier as the profile measured it (the embedding layers
// looked up from a tier on the type's device, as a job with --gpu-cache-gib runs them).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/base/env.h"

namespace heterps::cost {

struct ProfileEntry {
  std::string layer;             // layer name in the model spec
  std::string type;              // resource type name in the cluster spec
  double seconds_per_batch = 0;  // measured forward + backward compute time of one batch, > 0
};

// A type's network figures as measured through the real parameter-server client and server on
// this host (worker/rpc/network_profile.h): they replace the cluster spec's `network` and
// `latency`.
struct NetworkEntry {
  std::string type;                // resource type name in the cluster spec
  double bytes_per_second = 0;     // W_t, > 0
  double seconds_per_message = 0;  // lat_t, >= 0
};

// A GPU type's embedding layers as measured through a GPU tier on its device feeding the stage
// there (worker/profile.h, ProfileOptions::gpu_tier_bytes): of the rows a batch looks up, how
// many the tier loaded from the servers (each with its optimizer state, written back once later)
// and how many passed through it to them (no room: pulled, their gradients pushed), and whether
// the dense parameters and their optimizer were held on the device (none pulled or pushed per
// batch). The cost model charges a first stage on the type that traffic with the servers instead
// of every looked-up row and dense weight (docs/cost_model.md, "The GPU tier").
struct TierEntry {
  std::string type;                  // resource type name in the cluster spec
  double lookups_per_batch = 0;      // rows looked up per batch, all tables, > 0
  double loaded_rows_per_batch = 0;  // loaded from the servers, >= 0
  double passed_rows_per_batch = 0;  // passed through to them, >= 0; with loaded <= lookups
  bool dense_held = false;
  int64_t tier_bytes = 0;  // the tier's budget it was measured with (0: not recorded)
};

struct Profile {
  std::string model;  // the model spec's name the profile was taken on
  int64_t batch_size = 0;
  std::string host;  // free text describing the machine
  std::vector<ProfileEntry> entries;
  std::vector<NetworkEntry> network;  // at most one per type
  std::vector<TierEntry> tier;        // at most one per type
};

// Parses profile JSON; errors are InvalidArgument "<source>: <field path>: <problem>".
absl::StatusOr<Profile> ParseProfile(absl::string_view json_text, absl::string_view source);
// Reads and parses a profile file through `env`; NotFound if it cannot be read.
absl::StatusOr<Profile> LoadProfile(const std::string& path, base::Env* env = base::DefaultEnv());
// The JSON text of `profile` (what ParseProfile reads back).
std::string ProfileToJson(const Profile& profile);

}  // namespace heterps::cost
