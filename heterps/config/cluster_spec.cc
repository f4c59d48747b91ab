#include "heterps/config/cluster_spec.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "heterps/base/env.h"
#include "heterps/base/status_macros.h"
#include "heterps/config/internal/yaml_reader.h"

namespace heterps::config {

bool IsRegionName(absl::string_view name) {
  return !name.empty() && name.find_first_not_of(
                              "abcdefghijklmnopqrstuvwxyz"
                              "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == absl::string_view::npos;
}

namespace {

using internal::MapReader;
using internal::NumberRule;
using internal::Positive;

// "cpu", "cuda:N" or "twin:N" (the host twin of a GPU, for tests).
bool IsDeviceName(absl::string_view name) {
  if (name == "cpu") return true;
  if (!absl::ConsumePrefix(&name, "cuda:") && !absl::ConsumePrefix(&name, "twin:")) return false;
  return !name.empty() && name.find_first_not_of("0123456789") == absl::string_view::npos;
}

absl::StatusOr<ResourceType> ParseType(const YAML::Node& node, absl::string_view source,
                                       const std::string& path, const std::string& region) {
  HETERPS_ASSIGN_OR_RETURN(MapReader reader, MapReader::Create(node, source, path));
  ResourceType type;
  type.line = reader.line();
  HETERPS_ASSIGN_OR_RETURN(type.name, reader.String("name"));
  if (type.name.empty()) return reader.Error("name", "must not be empty");
  HETERPS_ASSIGN_OR_RETURN(std::string kind, reader.Choice("kind", {"cpu", "gpu"}));
  type.kind = kind == "gpu" ? DeviceKind::kGpu : DeviceKind::kCpu;
  HETERPS_ASSIGN_OR_RETURN(double tflops, reader.Number("tflops", Positive()));
  HETERPS_ASSIGN_OR_RETURN(double mem_gbs, reader.Number("mem_gbs", Positive()));
  HETERPS_ASSIGN_OR_RETURN(double lookup_mrows, reader.Number("lookup_mrows", Positive()));
  HETERPS_ASSIGN_OR_RETURN(double memory_gib, reader.Number("memory_gib", Positive()));
  HETERPS_ASSIGN_OR_RETURN(double network_gbps, reader.Number("network_gbps", Positive()));
  HETERPS_ASSIGN_OR_RETURN(double overhead_us,
                           reader.Number("overhead_us", internal::NonNegative(0)));
  HETERPS_ASSIGN_OR_RETURN(double latency_us,
                           reader.Number("latency_us", internal::NonNegative(0)));
  HETERPS_ASSIGN_OR_RETURN(type.price_per_hour, reader.Number("price_per_hour", Positive()));
  HETERPS_ASSIGN_OR_RETURN(type.units, reader.Integer("units", Positive()));
  HETERPS_ASSIGN_OR_RETURN(type.dp_loss,
                           reader.Number("dp_loss", NumberRule{false, 0.0, 0, false, 1.0}));
  HETERPS_ASSIGN_OR_RETURN(double ssd_gib, reader.Number("ssd_gib", internal::NonNegative(0)));
  HETERPS_ASSIGN_OR_RETURN(double ssd_kiops, reader.Number("ssd_kiops", internal::NonNegative(0)));
  if (ssd_gib > 0 && ssd_kiops == 0) {
    return reader.Error("ssd_kiops", "must be > 0 where ssd_gib is (the SSD's random reads/s)");
  }
  type.ssd_bytes = ssd_gib * 1024.0 * 1024.0 * 1024.0;
  type.ssd_read_rate = ssd_kiops * 1e3;
  HETERPS_ASSIGN_OR_RETURN(type.local_device, reader.String("local_device", ""));
  if (!type.local_device.empty() && !IsDeviceName(type.local_device)) {
    return reader.Error("local_device", absl::StrCat("must be 'cpu', 'cuda:N' or 'twin:N', got '",
                                                     type.local_device, "'"));
  }
  const bool cuda =
      absl::StartsWith(type.local_device, "cuda:") || absl::StartsWith(type.local_device, "twin:");
  if (!type.local_device.empty() && cuda != (type.kind == DeviceKind::kGpu)) {
    return reader.Error("local_device",
                        absl::StrCat("'", type.local_device, "' is not a device of kind ", kind));
  }
  const bool own_region = reader.Has("region");
  HETERPS_ASSIGN_OR_RETURN(type.region, reader.String("region", region.c_str()));
  if (own_region && !IsRegionName(type.region)) {
    return reader.Error("region", absl::StrCat("must be letters, digits, '-', '_' or '.', got '",
                                               type.region, "'"));
  }
  HETERPS_RETURN_IF_ERROR(reader.Finish());
  type.flops = tflops * 1e12;
  type.mem_bandwidth = mem_gbs * 1e9;
  type.lookup_rate = lookup_mrows * 1e6;
  type.memory = memory_gib * 1024.0 * 1024.0 * 1024.0;
  type.network = network_gbps * 1e9 / 8.0;
  type.overhead = overhead_us * 1e-6;
  type.latency = latency_us * 1e-6;
  return type;
}

absl::StatusOr<RegionLink> ParseLink(const YAML::Node& node, absl::string_view source,
                                     const std::string& path,
                                     const std::vector<std::string>& regions) {
  HETERPS_ASSIGN_OR_RETURN(MapReader reader, MapReader::Create(node, source, path));
  RegionLink link;
  link.line = reader.line();
  for (auto [key, field] : {std::pair{"from", &link.from}, std::pair{"to", &link.to}}) {
    HETERPS_ASSIGN_OR_RETURN(*field, reader.String(key));
    if (std::find(regions.begin(), regions.end(), *field) == regions.end()) {
      return reader.Error(key, absl::StrCat("no type is in region '", *field, "'; ",
                                            regions.empty()
                                                ? std::string("the types name no region")
                                                : absl::StrCat("the types' regions: ",
                                                               absl::StrJoin(regions, ", "))));
    }
  }
  if (link.from == link.to) {
    return reader.Error("to", absl::StrCat("a link joins two regions, not '", link.from,
                                           "' with itself (inside a region the types' own "
                                           "network figures apply)"));
  }
  HETERPS_ASSIGN_OR_RETURN(double gbps, reader.Number("bandwidth_gbps", Positive()));
  HETERPS_ASSIGN_OR_RETURN(double ms,
                           reader.Number("latency_ms", internal::NumberRule{true, 0, 0, false}));
  HETERPS_ASSIGN_OR_RETURN(double per_gb,
                           reader.Number("egress_per_gb", internal::NumberRule{true, 0, 0, false}));
  HETERPS_RETURN_IF_ERROR(reader.Finish());
  link.bandwidth = gbps * 1e9 / 8.0;
  link.latency = ms * 1e-3;
  link.egress_per_byte = per_gb / 1e9;
  return link;
}

}  // namespace

absl::string_view DeviceKindName(DeviceKind kind) {
  return kind == DeviceKind::kGpu ? "gpu" : "cpu";
}

bool SameHardware(const ResourceType& a, const ResourceType& b) {
  return a.kind == b.kind && a.flops == b.flops && a.mem_bandwidth == b.mem_bandwidth &&
         a.lookup_rate == b.lookup_rate && a.memory == b.memory && a.network == b.network &&
         a.overhead == b.overhead && a.latency == b.latency && a.dp_loss == b.dp_loss &&
         a.ssd_bytes == b.ssd_bytes && a.ssd_read_rate == b.ssd_read_rate;
}

std::vector<std::string> ClusterSpec::Regions() const {
  std::vector<std::string> regions;
  for (const ResourceType& type : types) {
    if (!type.region.empty() &&
        std::find(regions.begin(), regions.end(), type.region) == regions.end()) {
      regions.push_back(type.region);
    }
  }
  return regions;
}

const RegionLink* ClusterSpec::FindLink(absl::string_view from, absl::string_view to) const {
  for (const RegionLink& link : links) {
    if (link.from == from && link.to == to) return &link;
  }
  return nullptr;
}

int ClusterSpec::FindType(absl::string_view name) const {
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

namespace {

// The `links` table (null where the spec has none): one link per ordered pair of the types'
// distinct regions, none twice.
absl::Status ParseLinks(const YAML::Node* node, const MapReader& top, absl::string_view source,
                        ClusterSpec* cluster) {
  const std::vector<std::string> regions = cluster->Regions();
  if (node != nullptr && !node->IsSequence()) {
    return top.Error("links", "must be a list of links between regions (from, to, "
                              "bandwidth_gbps, latency_ms, egress_per_gb)");
  }
  const size_t count = node != nullptr ? node->size() : 0;
  for (size_t i = 0; i < count; ++i) {
    const std::string path = absl::StrCat("links[", i, "]");
    HETERPS_ASSIGN_OR_RETURN(RegionLink link, ParseLink((*node)[i], source, path, regions));
    if (const RegionLink* first = cluster->FindLink(link.from, link.to)) {
      return internal::SpecError(source, link.line, path,
                                 absl::StrCat("a second link from '", link.from, "' to '", link.to,
                                              "' (first at line ", first->line, ")"));
    }
    cluster->links.push_back(std::move(link));
  }
  for (const std::string& from : regions) {
    for (const std::string& to : regions) {
      if (from == to || cluster->FindLink(from, to) != nullptr) continue;
      return top.Error(
          "links", absl::StrCat("no link from '", from, "' to '", to, "': the types are in ",
                                regions.size(), " regions (", absl::StrJoin(regions, ", "),
                                "), and each ordered pair of them needs one (from, to, "
                                "bandwidth_gbps, latency_ms, egress_per_gb)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClusterSpec> ParseClusterSpec(absl::string_view yaml_text,
                                             absl::string_view source) {
  HETERPS_ASSIGN_OR_RETURN(YAML::Node root, internal::ParseYaml(yaml_text, source));
  HETERPS_ASSIGN_OR_RETURN(MapReader top, MapReader::Create(root, source, ""));
  ClusterSpec cluster;
  cluster.source = std::string(source);
  HETERPS_ASSIGN_OR_RETURN(cluster.name, top.String("name"));
  if (cluster.name.empty()) return top.Error("name", "must not be empty");
  const bool has_region = top.Has("region");
  HETERPS_ASSIGN_OR_RETURN(std::string region, top.String("region", ""));
  if (has_region && !IsRegionName(region)) {
    return top.Error("region",
                     absl::StrCat("must be letters, digits, '-', '_' or '.', got '", region, "'"));
  }
  HETERPS_ASSIGN_OR_RETURN(YAML::Node types, top.Node("types"));
  const bool has_links = top.Has("links");
  YAML::Node links;
  if (has_links) {
    HETERPS_ASSIGN_OR_RETURN(links, top.Node("links"));
  }
  HETERPS_RETURN_IF_ERROR(top.Finish());
  if (!types.IsSequence() || types.size() == 0) {
    return top.Error("types", "must be a non-empty list of resource types");
  }
  absl::flat_hash_map<std::string, int> lines;
  for (size_t i = 0; i < types.size(); ++i) {
    std::string path = absl::StrCat("types[", i, "]");
    HETERPS_ASSIGN_OR_RETURN(ResourceType type, ParseType(types[i], source, path, region));
    auto [it, inserted] = lines.emplace(type.name, type.line);
    if (!inserted) {
      return internal::SpecError(
          source, type.line, path + ".name",
          absl::StrCat("duplicate type name '", type.name, "' (first at line ", it->second, ")"));
    }
    cluster.types.push_back(std::move(type));
  }
  HETERPS_RETURN_IF_ERROR(ParseLinks(has_links ? &links : nullptr, top, source, &cluster));
  return cluster;
}

absl::StatusOr<ClusterSpec> LoadClusterSpec(const std::string& path, base::Env* env) {
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, path));
  return ParseClusterSpec(text, path);
}

}  // namespace heterps::config
