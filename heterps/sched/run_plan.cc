#include "heterps/sched/run_plan.h"

#include <cmath>
#include <map>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "nlohmann/json.hpp"

namespace heterps::sched {
namespace {

using json = nlohmann::json;

// Reads `key` of `object` as T; InvalidArgument naming the field if it is missing or mistyped.
template <typename T>
absl::StatusOr<T> Field(const json& object, const std::string& path, const char* key,
                        absl::string_view source) {
  const std::string where = path.empty() ? key : absl::StrCat(path, ".", key);
  if (!object.is_object() || !object.contains(key)) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", where, ": missing"));
  }
  const json& value = object.at(key);
  if constexpr (std::is_same_v<T, bool>) {
    if (!value.is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", where, ": not true or false: ", value.dump()));
    }
  } else if constexpr (std::is_integral_v<T>) {
    // A number with a fraction ("units": 1.5) is not silently cut to an integer.
    // And a float that is whole must fit the integer (8.9e61 does not: converting it is undefined).
    if (!value.is_number_integer() &&
        !(value.is_number_float() && std::isfinite(value.get<double>()) &&
          value.get<double>() == std::floor(value.get<double>()) &&
          std::fabs(value.get<double>()) < 9.2e18)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", where, ": not an integer: ", value.dump()));
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (value.is_number() && !std::isfinite(value.get<double>())) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": ", where, ": not finite"));
    }
  }
  try {
    return value.get<T>();
  } catch (const json::exception&) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", where, ": not a ", std::is_same_v<T, std::string> ? "string" : "number"));
  }
}

// An optional field: `fallback` when absent, an error naming it when present and mistyped.
template <typename T>
absl::StatusOr<T> OptionalField(const json& object, const std::string& path, const char* key,
                                T fallback, absl::string_view source) {
  if (!object.is_object() || !object.contains(key)) return fallback;
  return Field<T>(object, path, key, source);
}

}  // namespace

std::string RunPlan::StageName(const config::ModelSpec& model, int stage) const {
  const RunStage& s = stages[stage];
  if (s.first == s.last) return model.layers[s.first].name;
  return absl::StrCat(model.layers[s.first].name, "..", model.layers[s.last].name);
}

RunPlan FromPlan(const cost::CostModel& model, const PricedPlan& plan) {
  RunPlan run;
  run.model = model.model().name;
  run.cluster = model.cluster().name;
  run.scheduler = plan.scheduler;
  run.batch_size = static_cast<int64_t>(model.batch());
  run.throughput = plan.throughput;
  run.throughput_limit = model.workload().throughput_limit;
  run.cost_per_hour_usd = plan.cost_per_hour_usd;
  run.cost_usd = plan.cost_usd;
  run.feasible = plan.feasible;
  run.data_region = model.workload().data_region;
  run.activations_may_cross = model.workload().activations_may_cross;
  for (const PricedStage& s : plan.stages) {
    const config::ResourceType& type = model.cluster().types[s.spec.type];
    run.stages.push_back({s.spec.first, s.spec.last, type.name, type.local_device, s.units,
                          s.seconds_per_batch, s.compute_seconds, s.comm_seconds});
  }
  if (plan.ps.type >= 0) {
    run.servers = {model.cluster().types[plan.ps.type].name, plan.ps.shards, plan.ps.memory_bytes,
                   plan.ps.ssd_bytes};
  }
  return run;
}

absl::StatusOr<RunPlan> ReadRunPlan(absl::string_view json_text, absl::string_view source,
                                    const config::ModelSpec& model,
                                    const config::ClusterSpec& cluster) {
  const json root = json::parse(json_text, nullptr, false);
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", what));
  };
  if (root.is_discarded() || !root.is_object()) return bad("not JSON");
  HETERPS_ASSIGN_OR_RETURN(const std::string format,
                           OptionalField<std::string>(root, "", "format", "", source));
  if (format != "heterps-plan-v1") {
    return bad("format: not a heterps plan (expected \"heterps-plan-v1\")");
  }
  RunPlan plan;
  HETERPS_ASSIGN_OR_RETURN(std::string model_name, Field<std::string>(root, "", "model", source));
  HETERPS_ASSIGN_OR_RETURN(std::string cluster_name,
                           Field<std::string>(root, "", "cluster", source));
  HETERPS_ASSIGN_OR_RETURN(int64_t batch, Field<int64_t>(root, "", "batch_size", source));
  if (model_name != model.name) {
    return bad(absl::StrCat("model: the plan is for '", model_name, "', the model (", model.source,
                            ") is '", model.name, "'"));
  }
  if (cluster_name != cluster.name) {
    return bad(absl::StrCat("cluster: the plan is for '", cluster_name, "', the cluster (",
                            cluster.source, ") is '", cluster.name, "'"));
  }
  if (batch != model.batch_size) {
    return bad(absl::StrCat("batch_size: the plan has ", batch, ", the model ", model.batch_size));
  }
  plan.model = model_name;
  plan.cluster = cluster_name;
  plan.batch_size = batch;
  HETERPS_ASSIGN_OR_RETURN(plan.scheduler,
                           OptionalField<std::string>(root, "", "scheduler", "", source));
  HETERPS_ASSIGN_OR_RETURN(plan.feasible, OptionalField(root, "", "feasible", false, source));
  if (root.contains("data_region") && !root["data_region"].is_null()) {
    HETERPS_ASSIGN_OR_RETURN(plan.data_region, Field<std::string>(root, "", "data_region", source));
  }
  HETERPS_ASSIGN_OR_RETURN(plan.activations_may_cross,
                           OptionalField(root, "", "activations_may_cross", false, source));
  HETERPS_ASSIGN_OR_RETURN(plan.throughput, OptionalField(root, "", "throughput", 0.0, source));
  HETERPS_ASSIGN_OR_RETURN(plan.throughput_limit,
                           OptionalField(root, "", "throughput_limit", 0.0, source));
  HETERPS_ASSIGN_OR_RETURN(plan.cost_per_hour_usd,
                           OptionalField(root, "", "cost_per_hour_usd", 0.0, source));
  HETERPS_ASSIGN_OR_RETURN(plan.cost_usd, OptionalField(root, "", "cost_usd", 0.0, source));
  if (!root.contains("stages") || !root["stages"].is_array() || root["stages"].empty()) {
    return bad("stages: missing or empty");
  }
  std::map<std::string, int64_t> units_by_type;
  int next = 0;  // the layer the next stage must start at
  for (size_t s = 0; s < root["stages"].size(); ++s) {
    const json& stage = root["stages"][s];
    const std::string path = absl::StrCat("stages[", s, "]");
    HETERPS_ASSIGN_OR_RETURN(std::string type_name,
                             Field<std::string>(stage, path, "type", source));
    HETERPS_ASSIGN_OR_RETURN(int64_t units, Field<int64_t>(stage, path, "units", source));
    const int type = cluster.FindType(type_name);
    if (type < 0) {
      return bad(absl::StrCat(path, ".type: '", type_name, "' is not a type of cluster ",
                              cluster.name, " (", cluster.source, ")"));
    }
    if (units < 1) return bad(absl::StrCat(path, ".units: ", units, " (an infeasible plan?)"));
    units_by_type[type_name] += units;
    if (!stage.contains("layers") || !stage["layers"].is_array() || stage["layers"].empty()) {
      return bad(absl::StrCat(path, ".layers: missing or empty"));
    }
    RunStage run;
    run.type = type_name;
    run.device = cluster.types[type].local_device;
    run.units = units;
    HETERPS_ASSIGN_OR_RETURN(run.seconds_per_batch,
                             OptionalField(stage, path, "seconds_per_batch", 0.0, source));
    HETERPS_ASSIGN_OR_RETURN(run.compute_seconds,
                             OptionalField(stage, path, "compute_seconds", 0.0, source));
    HETERPS_ASSIGN_OR_RETURN(run.comm_seconds,
                             OptionalField(stage, path, "comm_seconds", 0.0, source));
    run.first = next;
    for (size_t l = 0; l < stage["layers"].size(); ++l) {
      const std::string where = absl::StrCat(path, ".layers[", l, "]");
      const json& name = stage["layers"][l];
      if (!name.is_string()) return bad(absl::StrCat(where, ": not a string"));
      const int index = model.FindLayer(name.get<std::string>());
      if (index < 0) {
        return bad(absl::StrCat(where, ": '", name.get<std::string>(), "' is not a layer of ",
                                model.name, " (", model.source, ")"));
      }
      if (index != next) {
        return bad(absl::StrCat(where, ": '", name.get<std::string>(), "' where the model has '",
                                next < static_cast<int>(model.layers.size())
                                    ? model.layers[next].name
                                    : std::string("no more layers"),
                                "': a plan covers every layer once, in order"));
      }
      ++next;
    }
    run.last = next - 1;
    plan.stages.push_back(run);
  }
  if (root.contains("parameter_servers") && !root["parameter_servers"].is_null()) {
    const json& ps = root["parameter_servers"];
    const std::string path = "parameter_servers";
    constexpr double kGib = 1024.0 * 1024.0 * 1024.0;
    RunServers& servers = plan.servers;
    HETERPS_ASSIGN_OR_RETURN(servers.type, Field<std::string>(ps, path, "type", source));
    HETERPS_ASSIGN_OR_RETURN(servers.shards, Field<int64_t>(ps, path, "shards", source));
    HETERPS_ASSIGN_OR_RETURN(const double memory_gib,
                             Field<double>(ps, path, "memory_gib_per_shard", source));
    HETERPS_ASSIGN_OR_RETURN(const double ssd_gib,
                             Field<double>(ps, path, "ssd_gib_per_shard", source));
    if (cluster.FindType(servers.type) < 0) {
      return bad(absl::StrCat(path, ".type: '", servers.type, "' is not a type of cluster ",
                              cluster.name, " (", cluster.source, ")"));
    }
    if (servers.shards < 1 || servers.shards > cost::kMaxPsShards) {
      return bad(
          absl::StrCat(path, ".shards: ", servers.shards, " (1 to ", cost::kMaxPsShards, ")"));
    }
    if (!(memory_gib >= 0) || !(ssd_gib >= 0)) {
      return bad(absl::StrCat(path, ": memory_gib_per_shard and ssd_gib_per_shard must be >= 0"));
    }
    servers.memory_bytes = memory_gib * kGib;
    servers.ssd_bytes = ssd_gib * kGib;
    units_by_type[servers.type] += servers.shards;
  }
  if (next != static_cast<int>(model.layers.size())) {
    return bad(absl::StrCat("stages: the plan ends at layer '", model.layers[next - 1].name,
                            "'; the model goes on to '", model.layers.back().name, "'"));
  }
  for (const auto& [type_name, units] : units_by_type) {
    const config::ResourceType& type = cluster.types[cluster.FindType(type_name)];
    if (units > type.units) {
      return bad(absl::StrCat("stages: ", units, " units of ", type_name, " where cluster ",
                              cluster.name, " has ", type.units));
    }
  }
  return plan;
}

}  // namespace heterps::sched
