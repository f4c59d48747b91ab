// The layout of a data file, declared: the delimiter, an optional header line, and each column's
// role. What a line becomes (an Example) and what a reader hands to training (a Batch).
//
//   Schema schema = CriteoSchema();                  // or the model spec's `data` section
//   HETERPS_ASSIGN_OR_RETURN(LineParser parser, LineParser::Create(schema));
//   Example e;
//   HETERPS_RETURN_IF_ERROR(parser.Parse(line, &e));
//
// Columns and the model: the `dense` columns, in the order declared, are the model's dense
// features 0, 1, ...; the `sparse` and `multi_hot` columns, in the order declared, are its slots
// 0, 1, ... (docs/data.md). Without a header the columns are positional: a line has exactly one
// field per column. With a header, a column names a field of the header line (the first line of
// every file), the fields no column names are ignored, and a line has as many fields as the header.
//
// What a field becomes:
// - label: 0 or 1 (also written 0.0 or 1.0); with a threshold, any number, the label 1 where it
//   is >= the threshold;
// - dense: a number (`integer`: a whole number, possibly written as 260.0), then the transform
//   (log1p: log(1 + max(x, 0)); none: x). Empty: 0. Not finite: an error;
// - sparse: one id (hex of at most 16 digits, a decimal integer, or any string), the table key
//   SlotKey(slot, value) where value is the number, or XXH3-64 of a string's bytes, taken modulo
//   the column's `buckets` when it declares some. Empty: the value kMissing, a key of its own
//   (an id whose value would be kMissing, as -1 is, takes kMissingId instead);
// - multi_hot: ids separated by `separator`, each as for sparse, empty ones dropped, the first
//   `max_ids` kept. Empty: no ids (the slot pools to a zero vector);
// - ignore: nothing (only the field count is checked).
// Numbers may carry spaces around them (CSV written by hand or by pandas); a trailing "\r" of the
// line is dropped.
//
// Thread safety: a LineParser is immutable after Create (Parse is const); the rest are values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterps::data {

inline constexpr uint64_t kMissing = ~uint64_t{0};  // the value of an empty sparse field
// The value an id whose value would be kMissing (decimal -1, hex ffffffffffffffff) takes instead,
// so that it never shares the empty field's key: a value no data set is likely to hold (the
// first 64 bits of the SHA-256 of "heterps missing"; in 64 bits some id must share it).
inline constexpr uint64_t kMissingId = 0x164eea8e0d025ef6ull;

// The key of value `value` in slot `slot`: MixKey(value ^ MixKey(slot + 1)), stable across runs,
// hosts and versions, and different in different slots for equal values.
uint64_t SlotKey(int slot, uint64_t value);

enum class ColumnRole { kLabel, kDense, kSparse, kMultiHot, kIgnore };
enum class IdFormat { kHex, kDecimal, kString };
enum class Transform { kNone, kLog1p };

absl::string_view ColumnRoleName(ColumnRole role);

struct Column {
  std::string name;  // the header's name for it; with no header, a name for messages
  ColumnRole role = ColumnRole::kIgnore;
  bool integer = false;                    // kDense: whole numbers only
  Transform transform = Transform::kNone;  // kDense
  IdFormat ids = IdFormat::kString;        // kSparse, kMultiHot
  char separator = '|';                    // kMultiHot: between the ids of a field
  int max_ids = 256;                       // kMultiHot: ids kept per field, the first ones
  // kSparse, kMultiHot: ids hashed into this many values (the id's value modulo `buckets`), the
  // slot's vocabulary; 0: every value its own key.
  uint64_t buckets = 0;
  // kLabel: the field is a number, and the label is 1 where it is >= this (a rating of 4 or more,
  // a click count of 1 or more); unset: the field is the label itself, 0 or 1.
  std::optional<double> threshold = std::nullopt;
  int line = 0;  // line of the declaration in `Schema::source`, 0 if none
};

struct Schema {
  char delimiter = '\t';
  bool header = false;
  std::vector<Column> columns;
  std::string source;  // the file that declared it, for messages ("" for a built-in layout)

  int dense_features() const;  // dense columns
  int slots() const;           // sparse and multi-hot columns
  // Whether slot `slot` is a multi-hot column.
  bool multi_hot(int slot) const;
  // The column of slot `slot`, and of dense feature `feature`.
  const Column& slot_column(int slot) const;
};

// Criteo's display-advertising layout: label, I1..I13 (integer, log1p), C1..C26 (hex), tab
// separated, no header. The layout used when a model spec declares none.
Schema CriteoSchema();
inline constexpr int kDenseFeatures = 13;  // Criteo's
inline constexpr int kSparseSlots = 26;

// Checks a schema on its own: exactly one label column; names present and unique with a header;
// a multi-hot separator that is not the delimiter; max_ids >= 1. InvalidArgument
// "<source>:<line>: data.columns[i]: <problem>".
absl::Status CheckSchema(const Schema& schema);

// One parsed line.
struct Example {
  float label = 0;
  std::vector<float> dense;     // per dense feature, transformed
  std::vector<uint64_t> keys;   // the slots' keys, slot after slot
  std::vector<int32_t> counts;  // per slot: keys it holds (1 for a sparse column)
};

// Parses lines of one schema (and, with a header, of one file).
class LineParser {
 public:
  // `header` is the file's first line when the schema has a header (ignored otherwise).
  // InvalidArgument when a named column is not in the header ("column "x" is not in the header").
  static absl::StatusOr<LineParser> Create(const Schema& schema, absl::string_view header = {});

  // Parses one line (without its newline; a trailing "\r" is dropped). InvalidArgument naming the
  // column ("label", "I3", "C17", or "line" for a wrong field count) and the problem; the caller
  // adds file and line.
  absl::Status Parse(absl::string_view line, Example* out) const;

  // Whether `line`, which failed to parse as data, looks like a header line (its label field is
  // not a number): a hint for a schema that declares none.
  bool LooksLikeHeader(absl::string_view line) const;

  int fields() const { return fields_; }  // per line

 private:
  std::vector<Column> columns_;
  std::vector<int> field_of_;  // per column: its field in a line
  std::vector<int> index_;     // per column: its dense feature or slot
  char delimiter_ = '\t';
  int fields_ = 0, dense_ = 0, slots_ = 0;
};

// Parses `line` with the Criteo layout (CriteoSchema()).
absl::Status ParseLine(absl::string_view line, Example* out);

// Examples stored as arrays, row-major: what a reader hands to training.
//
// Keys are ragged: sample r's slot s holds keys [KeyBegin(r, s), KeyEnd(r, s)). While every slot of
// every sample holds exactly one key (Criteo's data, any one-hot layout) `offsets` stays empty and
// `keys` is size x slots; otherwise `offsets` has size * slots + 1 entries, from 0.
struct Batch {
  int size = 0;
  int dense_width = 0;           // dense features per sample
  int slots = 0;                 // slots per sample
  std::vector<float> labels;     // size
  std::vector<float> dense;      // size * dense_width
  std::vector<uint64_t> keys;    // offsets.back() (size * slots while one-hot)
  std::vector<int32_t> offsets;  // empty while one-hot

  bool one_hot() const { return offsets.empty(); }
  int64_t KeyBegin(int64_t r, int s) const {
    return one_hot() ? r * slots + s : offsets[r * slots + s];
  }
  int64_t KeyEnd(int64_t r, int s) const {
    return one_hot() ? r * slots + s + 1 : offsets[r * slots + s + 1];
  }

  void Clear();  // no samples; keeps the widths and the memory
  void Add(const Example& e);
  // Gives a one-hot batch its offsets (one key per slot so far), before a sample that holds other
  // than one key in a slot is appended.
  void MakeRagged();
  // Appends sample `r` of `other` (of the same widths).
  void Append(const Batch& other, int64_t r);
};

}  // namespace heterps::data
