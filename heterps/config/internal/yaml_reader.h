// Reading YAML specs with messages that name the file, the line and the field.
//
// The only code in heterps that touches yaml-cpp; exceptions from it stop here and become
// InvalidArgument statuses of the form "<source>:<line>: <field path>: <problem>".
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heterps/base/status_macros.h"
#include "yaml-cpp/yaml.h"

namespace heterps::config::internal {

// Parses YAML text; malformed YAML gives "<source>:<line>: <parser message>". An empty document
// is an error too.
absl::StatusOr<YAML::Node> ParseYaml(absl::string_view text, absl::string_view source);

// 1-based line of a node, 0 if unknown.
int LineOf(const YAML::Node& node);

// The error every spec problem becomes.
absl::Status SpecError(absl::string_view source, int line, absl::string_view path,
                       absl::string_view problem);

// What a numeric field accepts.
struct NumberRule {
  bool required = true;
  double default_value = 0;  // used when !required and the field is absent
  double min = -std::numeric_limits<double>::infinity();
  bool min_exclusive = false;  // value must be > min (else >= min)
  double max_exclusive = std::numeric_limits<double>::infinity();  // value must be < this
};

// Positive: > 0, required.
inline NumberRule Positive() { return NumberRule{true, 0, 0, true}; }
// Non-negative with a default when absent.
inline NumberRule NonNegative(double default_value) {
  return NumberRule{false, default_value, 0, false};
}

// Reads the fields of one YAML mapping. Remembers which keys were read so that Finish() can
// report the first unknown one. Not thread-safe.
class MapReader {
 public:
  // Fails if `node` is not a mapping, or has a duplicate or non-scalar key.
  static absl::StatusOr<MapReader> Create(const YAML::Node& node, absl::string_view source,
                                          std::string path);

  // Whether the field is present; either way `key` counts as a known field.
  bool Has(absl::string_view key) {
    asked_.insert(std::string(key));
    return fields_.count(std::string(key)) > 0;
  }
  int line() const { return line_; }
  const std::string& path() const { return path_; }

  // A string field; required when `default_value` is null.
  absl::StatusOr<std::string> String(absl::string_view key,
                                     const char* default_value = nullptr);
  // A string field that must be one of `choices`.
  absl::StatusOr<std::string> Choice(absl::string_view key, const std::vector<std::string>& choices,
                                     const char* default_value = nullptr);
  // A finite number obeying `rule`.
  absl::StatusOr<double> Number(absl::string_view key, const NumberRule& rule);
  // An integer obeying `rule` (written without fraction or exponent).
  absl::StatusOr<int64_t> Integer(absl::string_view key, const NumberRule& rule);
  // A required field's raw node (for sequences and nested mappings), marked as read.
  absl::StatusOr<YAML::Node> Node(absl::string_view key);

  // An error about `key` at its line (or the mapping's line if absent).
  absl::Status Error(absl::string_view key, absl::string_view problem) const;
  // The error for a required `key` that is absent: "missing required field" + `more` at the
  // mapping's line; but where the mapping has a field nobody asked for that is a typo of `key`
  // (base::Nearest), "unknown field, did you mean '<key>'? (a required field)" at that field.
  absl::Status Missing(absl::string_view key, absl::string_view more = "") const;
  // Fails on the first field that was never read, suggesting the nearest known field where one
  // is a typo away.
  absl::Status Finish() const;

 private:
  struct Field {
    YAML::Node key;
    YAML::Node value;
    bool read = false;
  };
  MapReader(absl::string_view source, std::string path, int line)
      : source_(source), path_(std::move(path)), line_(line) {}
  absl::StatusOr<const Field*> Find(absl::string_view key);
  std::string FieldPath(absl::string_view key) const;

  std::string source_;
  std::string path_;
  int line_ = 0;
  std::map<std::string, Field> fields_;
  std::vector<std::string> order_;  // keys in file order, for Finish()
  std::set<std::string> asked_;     // keys the caller asked for: the known fields
};

}  // namespace heterps::config::internal
