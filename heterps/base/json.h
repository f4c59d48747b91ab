// Reading JSON documents (job descriptions, status files, checkpoint records, plans, profiles)
// with checked accessors: a missing field, a wrong type, a fraction where an integer belongs, a
// number out of range are errors that name the file and the field, never an exception or an
// abort.
//
//   HETERPS_ASSIGN_OR_RETURN(JsonObject root, JsonObject::Parse(text, "job/checkpoint.json"));
//   HETERPS_ASSIGN_OR_RETURN(int64_t step, root.Int("step", 0));
//   HETERPS_ASSIGN_OR_RETURN(std::vector<JsonObject> stages, root.Objects("stages"));
//
// Errors are InvalidArgument: "<source>: <path>: <problem>", the path as in "stages[1].units".
//
// Thread safety: a JsonObject is a read-only view; it may be read from several threads.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace heterps::base {

class JsonObject {
 public:
  // Parses a document whose root is an object.
  static absl::StatusOr<JsonObject> Parse(absl::string_view text, absl::string_view source);

  bool Has(absl::string_view key) const;
  // Required fields. Int: an integer (no fraction) in [min, max]; Double: a finite number.
  absl::StatusOr<int64_t> Int(absl::string_view key,
                              int64_t min = std::numeric_limits<int64_t>::min(),
                              int64_t max = std::numeric_limits<int64_t>::max()) const;
  absl::StatusOr<uint64_t> Uint(absl::string_view key) const;
  absl::StatusOr<double> Double(absl::string_view key) const;
  absl::StatusOr<std::string> String(absl::string_view key) const;
  absl::StatusOr<bool> Bool(absl::string_view key) const;
  absl::StatusOr<JsonObject> Object(absl::string_view key) const;
  absl::StatusOr<std::vector<JsonObject>> Objects(absl::string_view key) const;
  absl::StatusOr<std::vector<std::string>> Strings(absl::string_view key) const;
  absl::StatusOr<std::vector<double>> Doubles(absl::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> Ints(absl::string_view key) const;
  // Optional fields: `otherwise` when absent (or null); an error when present with a wrong type.
  absl::StatusOr<int64_t> IntOr(absl::string_view key, int64_t otherwise) const;
  absl::StatusOr<double> DoubleOr(absl::string_view key, double otherwise) const;
  absl::StatusOr<std::string> StringOr(absl::string_view key, std::string otherwise) const;
  absl::StatusOr<bool> BoolOr(absl::string_view key, bool otherwise) const;

  // An error naming the first field of this object that `known` does not list.
  absl::Status OnlyKeys(std::initializer_list<absl::string_view> known) const;
  // An error about `key` of this object (or about the object itself when `key` is empty).
  absl::Status Error(absl::string_view key, absl::string_view problem) const;
  const std::string& source() const { return *source_; }
  const std::string& path() const { return path_; }

 private:
  JsonObject(std::shared_ptr<const nlohmann::json> root, const nlohmann::json* node,
             std::shared_ptr<const std::string> source, std::string path)
      : root_(std::move(root)), node_(node), source_(std::move(source)), path_(std::move(path)) {}
  // The field, or an error when it is missing.
  absl::StatusOr<const nlohmann::json*> Get(absl::string_view key) const;
  std::string PathOf(absl::string_view key) const;

  std::shared_ptr<const nlohmann::json> root_;  // keeps the document alive
  const nlohmann::json* node_;
  std::shared_ptr<const std::string> source_;
  std::string path_;
};

}  // namespace heterps::base
