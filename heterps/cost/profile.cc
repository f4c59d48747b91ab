#include "heterps/cost/profile.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "heterps/base/env.h"
#include "heterps/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace heterps::cost {
namespace {

constexpr char kFormat[] = "heterps-profile-v1";

using nlohmann::json;

absl::Status Bad(absl::string_view source, absl::string_view path, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", path, ": ", problem));
}

absl::StatusOr<const json*> Field(const json& object, absl::string_view source,
                                  const std::string& path, const char* key, json::value_t type) {
  auto it = object.find(key);
  std::string field = path.empty() ? key : absl::StrCat(path, ".", key);
  if (it == object.end()) return Bad(source, field, "missing required field");
  bool ok = it->type() == type || (type == json::value_t::number_float && it->is_number());
  if (!ok) return Bad(source, field, absl::StrCat("must be a ", json(type).type_name()));
  return &*it;
}

}  // namespace

absl::StatusOr<Profile> ParseProfile(absl::string_view json_text, absl::string_view source) {
  json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Bad(source, "(file)", "malformed JSON");
  if (!root.is_object()) return Bad(source, "(file)", "must be a JSON object");
  using T = json::value_t;
  Profile profile;
  HETERPS_ASSIGN_OR_RETURN(const json* format, Field(root, source, "", "format", T::string));
  if (format->get<std::string>() != kFormat) {
    return Bad(
        source, "format",
        absl::StrCat("unsupported '", format->get<std::string>(), "' (expected '", kFormat, "')"));
  }
  HETERPS_ASSIGN_OR_RETURN(const json* model, Field(root, source, "", "model", T::string));
  profile.model = model->get<std::string>();
  HETERPS_ASSIGN_OR_RETURN(const json* batch,
                           Field(root, source, "", "batch_size", T::number_float));
  if (!batch->is_number_integer() || batch->get<int64_t>() <= 0) {
    return Bad(source, "batch_size", "must be a positive whole number");
  }
  profile.batch_size = batch->get<int64_t>();
  if (auto host = root.find("host"); host != root.end() && host->is_string()) {
    profile.host = host->get<std::string>();
  }
  HETERPS_ASSIGN_OR_RETURN(const json* entries, Field(root, source, "", "entries", T::array));
  for (size_t i = 0; i < entries->size(); ++i) {
    const json& e = (*entries)[i];
    std::string path = absl::StrCat("entries[", i, "]");
    if (!e.is_object()) return Bad(source, path, "must be an object");
    ProfileEntry entry;
    HETERPS_ASSIGN_OR_RETURN(const json* layer, Field(e, source, path, "layer", T::string));
    HETERPS_ASSIGN_OR_RETURN(const json* type, Field(e, source, path, "type", T::string));
    HETERPS_ASSIGN_OR_RETURN(const json* secs,
                             Field(e, source, path, "seconds_per_batch", T::number_float));
    entry.layer = layer->get<std::string>();
    entry.type = type->get<std::string>();
    entry.seconds_per_batch = secs->get<double>();
    if (!(entry.seconds_per_batch > 0) || !std::isfinite(entry.seconds_per_batch)) {
      return Bad(source, path + ".seconds_per_batch", "must be a positive number");
    }
    profile.entries.push_back(std::move(entry));
  }
  // "wire" is the key's name in files written before it was "network".
  const char* key = root.contains("network") ? "network" : "wire";
  if (root.contains("network") && root.contains("wire")) {
    return Bad(source, "wire", "the old name of \"network\", which the file has too");
  }
  if (auto network = root.find(key); network != root.end()) {
    if (!network->is_array()) return Bad(source, key, "must be an array");
    for (size_t i = 0; i < network->size(); ++i) {
      const json& e = (*network)[i];
      const std::string path = absl::StrCat(key, "[", i, "]");
      if (!e.is_object()) return Bad(source, path, "must be an object");
      NetworkEntry entry;
      HETERPS_ASSIGN_OR_RETURN(const json* type, Field(e, source, path, "type", T::string));
      HETERPS_ASSIGN_OR_RETURN(const json* rate,
                               Field(e, source, path, "bytes_per_second", T::number_float));
      HETERPS_ASSIGN_OR_RETURN(const json* latency,
                               Field(e, source, path, "seconds_per_message", T::number_float));
      entry.type = type->get<std::string>();
      entry.bytes_per_second = rate->get<double>();
      entry.seconds_per_message = latency->get<double>();
      if (!(entry.bytes_per_second > 0) || !std::isfinite(entry.bytes_per_second)) {
        return Bad(source, path + ".bytes_per_second", "must be a positive number");
      }
      if (!(entry.seconds_per_message >= 0) || !std::isfinite(entry.seconds_per_message)) {
        return Bad(source, path + ".seconds_per_message", "must be a number >= 0");
      }
      for (const NetworkEntry& seen : profile.network) {
        if (seen.type == entry.type) {
          return Bad(source, path + ".type",
                     absl::StrCat("a second network entry for ", entry.type));
        }
      }
      profile.network.push_back(std::move(entry));
    }
  }
  if (auto tier = root.find("tier"); tier != root.end()) {
    if (!tier->is_array()) return Bad(source, "tier", "must be an array");
    for (size_t i = 0; i < tier->size(); ++i) {
      const json& e = (*tier)[i];
      const std::string path = absl::StrCat("tier[", i, "]");
      if (!e.is_object()) return Bad(source, path, "must be an object");
      TierEntry entry;
      HETERPS_ASSIGN_OR_RETURN(const json* type, Field(e, source, path, "type", T::string));
      HETERPS_ASSIGN_OR_RETURN(const json* lookups,
                               Field(e, source, path, "lookups_per_batch", T::number_float));
      HETERPS_ASSIGN_OR_RETURN(const json* loaded,
                               Field(e, source, path, "loaded_rows_per_batch", T::number_float));
      HETERPS_ASSIGN_OR_RETURN(const json* passed,
                               Field(e, source, path, "passed_rows_per_batch", T::number_float));
      HETERPS_ASSIGN_OR_RETURN(const json* held, Field(e, source, path, "dense_held", T::boolean));
      entry.type = type->get<std::string>();
      entry.lookups_per_batch = lookups->get<double>();
      entry.loaded_rows_per_batch = loaded->get<double>();
      entry.passed_rows_per_batch = passed->get<double>();
      entry.dense_held = held->get<bool>();
      if (auto bytes = e.find("tier_bytes"); bytes != e.end()) {
        if (!bytes->is_number_integer() || bytes->get<int64_t>() < 0) {
          return Bad(source, path + ".tier_bytes", "must be a whole number >= 0");
        }
        entry.tier_bytes = bytes->get<int64_t>();
      }
      if (!(entry.lookups_per_batch > 0) || !std::isfinite(entry.lookups_per_batch)) {
        return Bad(source, path + ".lookups_per_batch", "must be a positive number");
      }
      if (!(entry.loaded_rows_per_batch >= 0)) {
        return Bad(source, path + ".loaded_rows_per_batch", "must be a number >= 0");
      }
      if (!(entry.passed_rows_per_batch >= 0) ||
          !(entry.loaded_rows_per_batch + entry.passed_rows_per_batch <= entry.lookups_per_batch)) {
        return Bad(source, path + ".passed_rows_per_batch",
                   "must be a number >= 0 that with loaded_rows_per_batch is at most "
                   "lookups_per_batch");
      }
      for (const TierEntry& seen : profile.tier) {
        if (seen.type == entry.type) {
          return Bad(source, path + ".type", absl::StrCat("a second tier entry for ", entry.type));
        }
      }
      profile.tier.push_back(std::move(entry));
    }
  }
  return profile;
}

absl::StatusOr<Profile> LoadProfile(const std::string& path, base::Env* env) {
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, path));
  return ParseProfile(text, path);
}

std::string ProfileToJson(const Profile& profile) {
  json entries = json::array();
  for (const ProfileEntry& e : profile.entries) {
    entries.push_back(
        {{"layer", e.layer}, {"type", e.type}, {"seconds_per_batch", e.seconds_per_batch}});
  }
  json root = {{"format", kFormat},
               {"model", profile.model},
               {"batch_size", profile.batch_size},
               {"host", profile.host},
               {"entries", entries}};
  if (!profile.network.empty()) {
    json network = json::array();
    for (const NetworkEntry& e : profile.network) {
      network.push_back({{"type", e.type},
                         {"bytes_per_second", e.bytes_per_second},
                         {"seconds_per_message", e.seconds_per_message}});
    }
    root["network"] = network;
  }
  if (!profile.tier.empty()) {
    json tier = json::array();
    for (const TierEntry& e : profile.tier) {
      tier.push_back({{"type", e.type},
                      {"lookups_per_batch", e.lookups_per_batch},
                      {"loaded_rows_per_batch", e.loaded_rows_per_batch},
                      {"passed_rows_per_batch", e.passed_rows_per_batch},
                      {"dense_held", e.dense_held},
                      {"tier_bytes", e.tier_bytes}});
    }
    root["tier"] = tier;
  }
  return root.dump(2) + "\n";
}

}  // namespace heterps::cost
