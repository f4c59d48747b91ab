#include "heterps/config/internal/yaml_reader.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "heterps/base/spelling.h"

namespace heterps::config::internal {

namespace {

// The byte offset of the first byte that does not begin or continue a well-formed UTF-8 sequence
// (RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF), or text.size().
size_t FirstInvalidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    int extra = 0;
    unsigned min = 0;
    unsigned code = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      extra = 1, min = 0x80, code = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      extra = 2, min = 0x800, code = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      extra = 3, min = 0x10000, code = c & 0x07;
    } else {
      return i;
    }
    if (i + extra >= text.size()) return i;  // cut short
    for (int k = 1; k <= extra; ++k) {
      const auto n = static_cast<unsigned char>(text[i + k]);
      if ((n & 0xc0) != 0x80) return i;
      code = (code << 6) | (n & 0x3f);
    }
    if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return i;
    i += extra + 1;
  }
  return i;
}

}  // namespace

absl::StatusOr<YAML::Node> ParseYaml(absl::string_view text, absl::string_view source) {
  // Names from a spec go into JSON and onto terminals: text that is not UTF-8 stops here.
  if (const size_t bad = FirstInvalidUtf8(text); bad < text.size()) {
    const int line = 1 + static_cast<int>(std::count(text.begin(), text.begin() + bad, '\n'));
    return SpecError(source, line, "",
                     absl::StrCat("not UTF-8 text (byte ", bad + 1, " of the file)"));
  }
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
  return absl::InvalidArgumentError(
      absl::StrCat(source, ":", line, ": ", path, path.empty() ? "" : ": ", problem));
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
    return Missing(key);
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
  return Error(key, absl::StrCat("unknown value ", base::Quote(value),
                                 " (expected one of: ", absl::StrJoin(choices, ", "), ")"));
}

absl::StatusOr<double> MapReader::Number(absl::string_view key, const NumberRule& rule) {
  HETERPS_ASSIGN_OR_RETURN(const Field* field, Find(key));
  if (field == nullptr) {
    if (!rule.required) return rule.default_value;
    return Missing(key);
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
    return Error(
        key, absl::StrCat("must be ", rule.min_exclusive ? "> " : ">= ", rule.min, ", got ", text));
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
  if (field == nullptr) return Missing(key);
  return field->value;
}

absl::Status MapReader::Missing(absl::string_view key, absl::string_view more) const {
  // A field of the mapping that nobody asked for and that is a typo of `key` is the mistake to
  // show: "missing" alone would point at the wrong line.
  const std::vector<std::string> wanted = {std::string(key)};
  for (const std::string& k : order_) {
    if (fields_.at(k).read || asked_.count(k) > 0) continue;
    if (!base::Nearest(k, wanted).empty()) {
      return Error(k, absl::StrCat("unknown field, did you mean '", key, "'? (a required field)"));
    }
  }
  return Error(key, absl::StrCat("missing required field", more));
}

absl::Status MapReader::Finish() const {
  for (const std::string& key : order_) {
    if (fields_.at(key).read) continue;
    std::vector<std::string> known(asked_.begin(), asked_.end());
    // A suggestion the mapping already has would send the user to a field that is there.
    std::vector<std::string> absent;
    for (const std::string& k : known) {
      if (fields_.count(k) == 0) absent.push_back(k);
    }
    const std::string nearest = base::Nearest(key, absent);
    return Error(key, absl::StrCat("unknown field", nearest.empty() ? "" : ", did you mean '",
                                   nearest, nearest.empty() ? "" : "'?",
                                   " (expected one of: ", absl::StrJoin(known, ", "), ")"));
  }
  return absl::OkStatus();
}

}  // namespace heterps::config::internal
