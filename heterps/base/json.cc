#include "heterps/base/json.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "heterps/base/status_macros.h"

namespace heterps::base {
namespace {

using json = nlohmann::json;

// What a value is, for messages: its type and, for short scalars, the value.
std::string Describe(const json& value) {
  std::string text = value.dump(-1, ' ', true, json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return absl::StrCat(value.type_name(), " ", text);
}

}  // namespace

absl::StatusOr<JsonObject> JsonObject::Parse(absl::string_view text, absl::string_view source) {
  auto root = std::make_shared<json>(json::parse(text, nullptr, false));
  auto name = std::make_shared<const std::string>(source);
  if (root->is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not JSON"));
  }
  if (!root->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": expected a JSON object, found ", Describe(*root)));
  }
  const json* node = root.get();
  return JsonObject(std::move(root), node, std::move(name), "");
}

std::string JsonObject::PathOf(absl::string_view key) const {
  if (key.empty()) return path_.empty() ? "(the document)" : path_;
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

absl::Status JsonObject::Error(absl::string_view key, absl::string_view problem) const {
  return absl::InvalidArgumentError(absl::StrCat(*source_, ": ", PathOf(key), ": ", problem));
}

absl::Status JsonObject::OnlyKeys(std::initializer_list<absl::string_view> known) const {
  for (auto it = node_->begin(); it != node_->end(); ++it) {
    bool found = false;
    for (absl::string_view k : known) found = found || k == it.key();
    if (!found) {
      return Error(
          it.key(),
          absl::StrCat("unknown field (expected one of: ", absl::StrJoin(known, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

bool JsonObject::Has(absl::string_view key) const {
  auto it = node_->find(std::string(key));
  return it != node_->end() && !it->is_null();
}

absl::StatusOr<const json*> JsonObject::Get(absl::string_view key) const {
  auto it = node_->find(std::string(key));
  if (it == node_->end() || it->is_null()) return Error(key, "missing");
  return &*it;
}

absl::StatusOr<int64_t> JsonObject::Int(absl::string_view key, int64_t min, int64_t max) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  int64_t value = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return Error(key, absl::StrCat("out of range, found ", Describe(*v)));
    }
    value = v->get<int64_t>();
  } else {
    return Error(key, absl::StrCat("expected an integer, found ", Describe(*v)));
  }
  if (value < min || value > max) {
    return Error(key, absl::StrCat(value, " is out of range [", min, ", ", max, "]"));
  }
  return value;
}

absl::StatusOr<uint64_t> JsonObject::Uint(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  if (v->is_number_unsigned()) return v->get<uint64_t>();
  return Error(key, absl::StrCat("expected a non-negative integer, found ", Describe(*v)));
}

absl::StatusOr<double> JsonObject::Double(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  if (!v->is_number()) return Error(key, absl::StrCat("expected a number, found ", Describe(*v)));
  const double value = v->get<double>();
  if (!std::isfinite(value)) return Error(key, "not a finite number");
  return value;
}

absl::StatusOr<std::string> JsonObject::String(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  if (!v->is_string()) return Error(key, absl::StrCat("expected a string, found ", Describe(*v)));
  return v->get<std::string>();
}

absl::StatusOr<bool> JsonObject::Bool(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  if (!v->is_boolean()) {
    return Error(key, absl::StrCat("expected true or false, found ", Describe(*v)));
  }
  return v->get<bool>();
}

absl::StatusOr<JsonObject> JsonObject::Object(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  if (!v->is_object()) return Error(key, absl::StrCat("expected an object, found ", Describe(*v)));
  return JsonObject(root_, v, source_, PathOf(key));
}

absl::StatusOr<std::vector<JsonObject>> JsonObject::Objects(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  if (!v->is_array()) return Error(key, absl::StrCat("expected an array, found ", Describe(*v)));
  std::vector<JsonObject> out;
  for (size_t i = 0; i < v->size(); ++i) {
    const std::string path = absl::StrCat(PathOf(key), "[", i, "]");
    if (!(*v)[i].is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(*source_, ": ", path, ": expected an object, found ", Describe((*v)[i])));
    }
    out.push_back(JsonObject(root_, &(*v)[i], source_, path));
  }
  return out;
}

namespace {

// The elements of array `v`, each checked by `is` and read by `get`.
template <typename T, typename Is>
absl::StatusOr<std::vector<T>> Elements(const JsonObject& object, absl::string_view key,
                                        const json& v, Is is, const char* expected) {
  if (!v.is_array()) {
    return object.Error(key, absl::StrCat("expected an array, found ", Describe(v)));
  }
  std::vector<T> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!is(v[i])) {
      return object.Error(
          key, absl::StrCat("element ", i, ": expected ", expected, ", found ", Describe(v[i])));
    }
    out.push_back(v[i].get<T>());
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> JsonObject::Strings(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  return Elements<std::string>(
      *this, key, *v, [](const json& e) { return e.is_string(); }, "a string");
}

absl::StatusOr<std::vector<double>> JsonObject::Doubles(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  return Elements<double>(
      *this, key, *v, [](const json& e) { return e.is_number() && std::isfinite(e.get<double>()); },
      "a finite number");
}

absl::StatusOr<std::vector<int64_t>> JsonObject::Ints(absl::string_view key) const {
  HETERPS_ASSIGN_OR_RETURN(const json* v, Get(key));
  return Elements<int64_t>(
      *this, key, *v,
      [](const json& e) {
        return e.is_number_integer() &&
               !(e.is_number_unsigned() && e.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX));
      },
      "an integer");
}

absl::StatusOr<int64_t> JsonObject::IntOr(absl::string_view key, int64_t otherwise) const {
  return Has(key) ? Int(key) : otherwise;
}
absl::StatusOr<double> JsonObject::DoubleOr(absl::string_view key, double otherwise) const {
  return Has(key) ? Double(key) : otherwise;
}
absl::StatusOr<std::string> JsonObject::StringOr(absl::string_view key,
                                                 std::string otherwise) const {
  return Has(key) ? String(key) : otherwise;
}
absl::StatusOr<bool> JsonObject::BoolOr(absl::string_view key, bool otherwise) const {
  return Has(key) ? Bool(key) : otherwise;
}

}  // namespace heterps::base
