#include "heterps/launcher/cluster_state.h"

#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "heterps/base/json.h"
#include "heterps/base/spelling.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "nlohmann/json.hpp"

namespace heterps::launcher {
namespace {

constexpr char kControlFormat[] = "heterps-control-v1";

}  // namespace

absl::StatusOr<ClusterState> ParseClusterState(absl::string_view text, absl::string_view source,
                                               const config::ClusterSpec& cluster) {
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject root, base::JsonObject::Parse(text, source));
  HETERPS_RETURN_IF_ERROR(root.OnlyKeys({"types"}));
  HETERPS_ASSIGN_OR_RETURN(std::vector<base::JsonObject> types, root.Objects("types"));
  ClusterState state;
  std::set<std::string> seen;
  for (const base::JsonObject& t : types) {
    HETERPS_RETURN_IF_ERROR(t.OnlyKeys({"name", "units", "price_per_hour"}));
    TypeState out;
    HETERPS_ASSIGN_OR_RETURN(out.name, t.String("name"));
    if (cluster.FindType(out.name) < 0) {
      return t.Error("name", absl::StrCat(base::Quote(out.name), " is not a type of ", cluster.name,
                                          " (", cluster.source, ")"));
    }
    if (!seen.insert(out.name).second) {
      return t.Error("name", absl::StrCat(base::Quote(out.name), " is named twice"));
    }
    if (t.Has("units")) {
      HETERPS_ASSIGN_OR_RETURN(out.units, t.Int("units", 0, 1 << 20));
    }
    if (t.Has("price_per_hour")) {
      HETERPS_ASSIGN_OR_RETURN(double price, t.Double("price_per_hour"));
      if (!(price >= 0) || !std::isfinite(price)) {
        return t.Error("price_per_hour",
                       absl::StrCat(price, " is not a price (USD per hour >= 0)"));
      }
      out.price_per_hour = price;
    }
    if (!out.units && !out.price_per_hour) {
      return t.Error("", "names neither units nor price_per_hour");
    }
    state.types.push_back(std::move(out));
  }
  return state;
}

config::ClusterSpec ApplyClusterState(config::ClusterSpec cluster, const ClusterState& state) {
  for (const TypeState& t : state.types) {
    const int i = cluster.FindType(t.name);
    if (i < 0) continue;  // ParseClusterState checked the names against this cluster
    if (t.units) cluster.types[i].units = *t.units;
    if (t.price_per_hour) cluster.types[i].price_per_hour = *t.price_per_hour;
  }
  return cluster;
}

std::string JobControlPath(const std::string& job_dir) { return job_dir + "/control.json"; }

absl::Status WriteJobControl(base::Env* env, const std::string& job_dir,
                             const JobControl& control) {
  nlohmann::ordered_json root = {{"format", kControlFormat}};
  if (control.throughput > 0) root["throughput"] = control.throughput;
  if (control.deadline)
    root["deadline"] = absl::FormatTime(absl::RFC3339_full, *control.deadline, absl::UTCTimeZone());
  if (!control.plan_json.empty()) {
    const nlohmann::json plan = nlohmann::json::parse(control.plan_json, nullptr, false);
    if (plan.is_discarded() || !plan.is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(control.plan_source, ": not a JSON plan"));
    }
    root["plan"] = plan;
    root["plan_source"] = control.plan_source;
  }
  if (control.ps_shards > 0) root["ps_shards"] = control.ps_shards;
  return base::WriteFileAtomically(env, JobControlPath(job_dir), root.dump(1) + "\n");
}

absl::StatusOr<JobControl> ParseJobControl(absl::string_view text, absl::string_view source) {
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject root, base::JsonObject::Parse(text, source));
  HETERPS_RETURN_IF_ERROR(
      root.OnlyKeys({"format", "throughput", "deadline", "plan", "plan_source", "ps_shards"}));
  HETERPS_ASSIGN_OR_RETURN(std::string format, root.String("format"));
  if (format != kControlFormat) {
    return root.Error("format",
                      absl::StrCat(base::Quote(format), ", expected '", kControlFormat, "'"));
  }
  JobControl control;
  HETERPS_ASSIGN_OR_RETURN(control.throughput, root.DoubleOr("throughput", 0));
  if (!(control.throughput >= 0)) {
    return root.Error("throughput", "must be samples per second >= 0");
  }
  if (root.Has("deadline")) {
    HETERPS_ASSIGN_OR_RETURN(std::string when, root.String("deadline"));
    absl::Time t;
    std::string why;
    if (!absl::ParseTime(absl::RFC3339_full, when, &t, &why)) {
      return root.Error("deadline",
                        absl::StrCat(base::Quote(when), " is not an RFC 3339 time: ", why));
    }
    control.deadline = t;
  }
  if (control.deadline && control.throughput > 0) {
    return root.Error("deadline", "give a throughput or a deadline, not both");
  }
  if (root.Has("plan")) {
    HETERPS_ASSIGN_OR_RETURN(base::JsonObject plan, root.Object("plan"));
    (void)plan;
    const nlohmann::json parsed = nlohmann::json::parse(text, nullptr, false);
    control.plan_json = parsed["plan"].dump();
    HETERPS_ASSIGN_OR_RETURN(control.plan_source, root.StringOr("plan_source", "control plan"));
  }
  HETERPS_ASSIGN_OR_RETURN(control.ps_shards, root.IntOr("ps_shards", 0));
  if (control.ps_shards < 0 || control.ps_shards > cost::kMaxPsShards) {
    return root.Error("ps_shards", absl::StrCat(control.ps_shards, " is out of range [0, ",
                                                cost::kMaxPsShards, "]"));
  }
  return control;
}

}  // namespace heterps::launcher
