#include "absl/strings/string_view.h"
#include "heterps/config/internal/yaml_reader.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace heterps::config::internal {

absl::StatusOr<YAML::Node> ParseYaml(absl::string_view text, absl::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return SpecError(source, e.mark.line + 1, "", absl::StrCat("malformed YAML: ", e.msg));
  }
  if (!root.IsDefined() || root.IsNull()) return SpecError(source, 1, "", "the document is empty");
  return root;
}

int LineOf(const YAML::Node& node) {
  if (!node.IsDefined()) return 0;
  const YAML::Mark mark = node.Mark();
  return mark.line < 0 ? 0 : mark.line + 1;
}

absl::Status SpecError(absl::string_view source, int line, absl::string_view path,
                       absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(source, ":", line, ": ", path,
                                                 path.empty() ? "" : ": ", problem));
}

absl::StatusOr<MapReader> MapReader::Create(const YAML::Node& node, absl::string_view source,
                                            std::string path) {
  MapReader reader(source, std::move(path), LineOf(node));
  if (!node.IsMap()) return SpecError(source, reader.line_, reader.path_, "must be a mapping");
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) {
      return SpecError(source, LineOf(it->first), reader.path_, "field names must be plain words");
    }
    std::string key = it->first.Scalar();
    if (reader.fields_.count(key)) {
      return SpecError(source, LineOf(it->first), reader.FieldPath(key), "duplicate field");
    }
    reader.fields_[key] = Field{it->first, it->second, false};
    reader.order_.push_back(key);
  }
  return reader;
}

std::string MapReader::FieldPath(absl::string_view key) const {
  return path_.empty() ? std::string(key) : absl::StrCat(path_, ".", key);
}

absl::Status MapReader::Error(absl::string_view key, absl::string_view problem) const {
  auto it = fields_.find(std::string(key));
  int line = it == fields_.end() ? line_ : LineOf(it->second.key);
  return SpecError(source_, line, FieldPath(key), problem);
}

absl::StatusOr<const MapReader::Field*> MapReader::Find(absl::string_view key) {
  asked_.insert(std::string(key));
  auto it = fields_.find(std::string(key));
  if (it == fields_.end()) return nullptr;
  it->second.read = true;
  if (it->second.value.IsNull()) return Error(key, "has no value");
  return &it->second;
}

absl::StatusOr<std::string> MapReader::String(absl::string_view key, const char* default_value) {
  HETERPS_ASSIGN_OR_RETURN(const Field* field, Find(key));
  if (field == nullptr) {
    if (default_value != nullptr) return std::string(default_value);
    return Error(key, "missing required field");
  }
  if (!field->value.IsScalar()) return Error(key, "must be a string");
  return field->value.Scalar();
}

absl::StatusOr<std::string> MapReader::Choice(absl::string_view key,
                                              const std::vector<std::string>& choices,
                                              const char* default_value) {
  HETERPS_ASSIGN_OR_RETURN(std::string value, String(key, default_value));
  for (const std::string& choice : choices) {
    if (value == choice) return value;
  }
  return Error(key, absl::StrCat("unknown value '", value, "' (expected one of: ",
                                 absl::StrJoin(choices, ", "), ")"));
}

absl::StatusOr<double> MapReader::Number(absl::string_view key, const NumberRule& rule) {
  HETERPS_ASSIGN_OR_RETURN(const Field* field, Find(key));
  if (field == nullptr) {
    if (!rule.required) return rule.default_value;
    return Error(key, "missing required field");
  }
  if (!field->value.IsScalar()) return Error(key, "must be a number");
  const std::string& text = field->value.Scalar();
  double value = 0;
  try {
    value = field->value.as<double>();
  } catch (const YAML::Exception&) {
    return Error(key, absl::StrCat("must be a number, got '", text, "'"));
  }
  if (!std::isfinite(value)) return Error(key, absl::StrCat("must be finite, got '", text, "'"));
  bool low = rule.min_exclusive ? !(value > rule.min) : value < rule.min;
  if (low) {
    return Error(key, absl::StrCat("must be ", rule.min_exclusive ? "> " : ">= ", rule.min,
                                   ", got ", text));
  }
  if (!(value < rule.max_exclusive)) {
    return Error(key, absl::StrCat("must be < ", rule.max_exclusive, ", got ", text));
  }
  return value;
}

absl::StatusOr<int64_t> MapReader::Integer(absl::string_view key, const NumberRule& rule) {
  HETERPS_ASSIGN_OR_RETURN(double value, Number(key, rule));
  if (!Has(key)) return static_cast<int64_t>(value);
  const std::string& text = fields_.at(std::string(key)).value.Scalar();
  if (text.find_first_not_of("+-0123456789") != std::string::npos || std::abs(value) > 9e15) {
    return Error(key, absl::StrCat("must be a whole number, got '", text, "'"));
  }
  return static_cast<int64_t>(value);
}

absl::StatusOr<YAML::Node> MapReader::Node(absl::string_view key) {
  HETERPS_ASSIGN_OR_RETURN(const Field* field, Find(key));
  if (field == nullptr) return Error(key, "missing required field");
  return field->value;
}

absl::Status MapReader::Finish() const {
  for (const std::string& key : order_) {
    if (fields_.at(key).read) continue;
    std::vector<std::string> known(asked_.begin(), asked_.end());
    return Error(key, absl::StrCat("unknown field (expected one of: ", absl::StrJoin(known, ", "),
                                   ")"));
  }
  return absl::OkStatus();
}

}  // namespace heterps::config::internal
