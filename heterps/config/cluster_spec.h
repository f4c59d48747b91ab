// The cluster spec (resource catalog): the resource types a job may rent, as read from
// cluster.yaml.
//
// Every figure is stored in base SI units (FLOP/s, bytes/s, rows/s, bytes, seconds, USD per hour)
// whatever unit the YAML field is written in; docs/config.md lists the fields and their units.
//
// Example:
//   HETERPS_ASSIGN_OR_RETURN(ClusterSpec cluster, LoadClusterSpec("examples/clusters/cloud.yaml"));
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/base/env.h"

namespace heterps::config {

enum class DeviceKind { kCpu, kGpu };

absl::string_view DeviceKindName(DeviceKind kind);

// One rentable resource type: one *unit* is one instance (or one device) of it.
struct ResourceType {
  std::string name;  // unique in the cluster
  DeviceKind kind = DeviceKind::kCpu;
  int line = 0;  // 1-based line in the spec file

  double flops = 0;           // effective FP32 FLOP/s of one unit (YAML: tflops)
  double mem_bandwidth = 0;   // bytes/s of memory bandwidth (YAML: mem_gbs, GB/s)
  double lookup_rate = 0;     // random embedding-row lookups per second (YAML: lookup_mrows, M/s)
  double memory = 0;          // bytes of memory one unit offers to a stage (YAML: memory_gib)
  double network = 0;         // bytes/s of network bandwidth (YAML: network_gbps, Gbit/s)
  double overhead = 0;        // seconds of fixed cost per operation (YAML: overhead_us)
  double latency = 0;         // seconds per network message, one way (YAML: latency_us)
  double price_per_hour = 0;  // USD per unit-hour
  int64_t units = 0;          // units available to rent
  double dp_loss = 0;         // data-parallel efficiency loss beta in [0, 1) (YAML: dp_loss)
  // The SSD tier of a parameter server on this type (docs/cost_model.md, "Parameter servers"):
  // bytes of SSD per unit (YAML: ssd_gib; 0: none, every row in memory) and random row reads
  // per second from it (YAML: ssd_kiops, thousands; needed with ssd_gib).
  double ssd_bytes = 0;
  double ssd_read_rate = 0;
  std::string local_device;  // "cpu" or "cuda:N" when this host has the type; empty otherwise
  // The region the units are in (YAML: region, or the cluster's `region`): a job whose data is
  // kept in its region runs only on types of that region (cost::Workload::data_region). Empty:
  // the catalog names no region.
  std::string region;
};

// Whether two types are the same machine: every figure but the name, the price, the units and
// where it is (local_device, region) equal. Another market or price for the same hardware (spot and
// on-demand) is such a pair; a profile's measurements of one are the other's (docs/cost_model.md).
bool SameHardware(const ResourceType& a, const ResourceType& b);

// A region's name: letters, digits, '-', '_' and '.', as cloud providers spell them.
bool IsRegionName(absl::string_view name);

// The network from one region to another (YAML: an entry of `links`): what a byte sent from a
// unit in `from` to a unit in `to` takes and costs. Inside a region the types' own network
// figures apply, and nothing is charged.
struct RegionLink {
  std::string from, to;
  int line = 0;                 // 1-based line in the spec file
  double bandwidth = 0;         // bytes/s (YAML: bandwidth_gbps, Gbit/s), > 0
  double latency = 0;           // seconds, one way (YAML: latency_ms), >= 0
  double egress_per_byte = 0;   // USD per byte sent (YAML: egress_per_gb, USD per 1e9 bytes),
                                // >= 0: the provider charges the sending region
};

struct ClusterSpec {
  std::string name;
  std::string source;  // file the spec came from, for messages
  std::vector<ResourceType> types;
  // One link for each ordered pair of distinct regions (the spec is refused otherwise).
  std::vector<RegionLink> links;
  // The link from region `from` to region `to`, or null if there is none (the same region, or a
  // catalog built without one).
  const RegionLink* FindLink(absl::string_view from, absl::string_view to) const;
  // The regions the types are in, in order of first appearance (empty when none names one).
  std::vector<std::string> Regions() const;

  // Index of the type called `name`, or -1.
  int FindType(absl::string_view name) const;
};

// Parses and validates a cluster spec; errors as for ParseModelSpec.
absl::StatusOr<ClusterSpec> ParseClusterSpec(absl::string_view yaml_text, absl::string_view source);

// Reads and parses a file through `env`; NotFound if it cannot be read.
absl::StatusOr<ClusterSpec> LoadClusterSpec(const std::string& path,
                                            base::Env* env = base::DefaultEnv());

}  // namespace heterps::config
