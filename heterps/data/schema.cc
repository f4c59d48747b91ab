#include "heterps/data/schema.h"

#include <charconv>
#include <cmath>
#include <deque>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "heterps/base/mix_key.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/xxhash.h"
#include "heterps/data/criteo.h"

namespace heterps::data {
namespace {

absl::Status Bad(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

std::string Quoted(absl::string_view text) {
  return absl::StrCat("\"", text.size() > 24 ? absl::StrCat(text.substr(0, 24), "...") : text,
                      "\"");
}

absl::string_view TrimSpaces(absl::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

// A finite number, the whole of `text`.
bool ParseFinite(absl::string_view text, double* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end && std::isfinite(*out);
}

// A whole number, written as one (-3) or as an integral float (260.0, 2.6e2).
bool ParseWhole(absl::string_view text, int64_t* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  if (ec == std::errc() && ptr == end) return true;
  double x = 0;
  if (!ParseFinite(text, &x) || x != std::floor(x) || std::fabs(x) >= 9.2e18) return false;
  *out = static_cast<int64_t>(x);
  return true;
}

absl::Status ParseLabel(const Column& column, absl::string_view text, float* out) {
  if (column.threshold.has_value()) {
    double value = 0;
    if (!ParseFinite(TrimSpaces(text), &value)) {
      return Bad(column.name, absl::StrCat(Quoted(text), " is not a number (the label is 1 from ",
                                           *column.threshold, " up)"));
    }
    *out = value >= *column.threshold ? 1.0f : 0.0f;
    return absl::OkStatus();
  }
  int64_t x = -1;
  if (!ParseWhole(TrimSpaces(text), &x) || (x != 0 && x != 1)) {
    return Bad(column.name, absl::StrCat(Quoted(text), " is not 0 or 1"));
  }
  *out = static_cast<float>(x);
  return absl::OkStatus();
}

absl::Status ParseDense(const Column& column, absl::string_view text, float* out) {
  text = TrimSpaces(text);
  double x = 0;
  if (column.integer) {
    int64_t whole = 0;
    if (!text.empty() && !ParseWhole(text, &whole)) {
      return Bad(column.name, absl::StrCat(Quoted(text), " is not an integer"));
    }
    if (column.transform == Transform::kLog1p) {
      *out = DenseTransform(whole);
      return absl::OkStatus();
    }
    x = static_cast<double>(whole);
  } else if (!text.empty() && !ParseFinite(text, &x)) {
    return Bad(column.name, absl::StrCat(Quoted(text), " is not a finite number"));
  }
  if (column.transform == Transform::kLog1p) x = x <= 0 ? 0.0 : std::log1p(x);
  if (std::fabs(x) > std::numeric_limits<float>::max()) {
    return Bad(column.name, absl::StrCat(Quoted(text), " is beyond a float's range"));
  }
  *out = static_cast<float>(x);
  return absl::OkStatus();
}

// One id of a sparse or multi-hot field, not empty, as written.
absl::Status ParseIdValue(const Column& column, absl::string_view text, uint64_t* value) {
  switch (column.ids) {
    case IdFormat::kHex: {
      text = TrimSpaces(text);
      if (text.size() > 16) {
        return Bad(column.name, absl::StrCat(Quoted(text), " has more than 16 hex digits"));
      }
      auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *value, 16);
      if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) {
        return Bad(column.name, absl::StrCat(Quoted(text), " is not hexadecimal"));
      }
      return absl::OkStatus();
    }
    case IdFormat::kDecimal: {
      text = TrimSpaces(text);
      int64_t whole = 0;
      if (!text.empty() && text.front() == '-') {
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), whole);
        if (ec == std::errc() && ptr == text.data() + text.size()) {
          *value = static_cast<uint64_t>(whole);
          return absl::OkStatus();
        }
      } else {
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), *value);
        if (!text.empty() && ec == std::errc() && ptr == text.data() + text.size()) {
          return absl::OkStatus();
        }
      }
      return Bad(column.name, absl::StrCat(Quoted(text), " is not a decimal id"));
    }
    case IdFormat::kString:
      *value = XXH3_64bits(text.data(), text.size());
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

// One id of a sparse or multi-hot field, not empty: its value, kept apart from kMissing (the
// empty field's): the one id whose value is kMissing (decimal -1, hex ffffffffffffffff) takes
// kMissingId's instead. Every key is unchanged but that one's.
absl::Status ParseId(const Column& column, absl::string_view text, uint64_t* value) {
  HETERPS_RETURN_IF_ERROR(ParseIdValue(column, text, value));
  if (*value == kMissing) *value = kMissingId;
  return absl::OkStatus();
}

// The fields of a line (a trailing "\r" dropped) into `out`. A field that begins with a double
// quote is quoted as RFC 4180 says: it may hold the delimiter, and "" inside stands for one
// quote; its value is the text between the quotes, unescaped into `scratch` where it holds ""
// (the views stay valid until the next call with the same scratch). False for a quoted field
// that is not closed, or whose closing quote is followed by something other than the delimiter.
bool SplitFields(absl::string_view line, char delimiter, std::vector<absl::string_view>* out,
                 std::deque<std::string>* scratch) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  out->clear();
  scratch->clear();
  for (size_t start = 0;;) {
    if (start < line.size() && line[start] == '"') {
      // Quoted: up to the quote that is not doubled.
      size_t at = start + 1;
      bool doubled = false;
      while (true) {
        const size_t quote = line.find('"', at);
        if (quote == absl::string_view::npos) return false;
        if (quote + 1 < line.size() && line[quote + 1] == '"') {
          doubled = true;
          at = quote + 2;
          continue;
        }
        absl::string_view value = line.substr(start + 1, quote - start - 1);
        if (doubled) {
          scratch->push_back(absl::StrReplaceAll(value, {{"\"\"", "\""}}));
          value = scratch->back();
        }
        out->push_back(value);
        if (quote + 1 == line.size()) return true;
        if (line[quote + 1] != delimiter) return false;
        start = quote + 2;
        break;
      }
      continue;
    }
    const size_t end = line.find(delimiter, start);
    if (end == absl::string_view::npos) {
      out->push_back(line.substr(start));
      return true;
    }
    out->push_back(line.substr(start, end - start));
    start = end + 1;
  }
}

Column MakeColumn(std::string name, ColumnRole role) {
  Column c;
  c.name = std::move(name);
  c.role = role;
  return c;
}

}  // namespace

uint64_t SlotKey(int slot, uint64_t value) {
  return base::MixKey(value ^ base::MixKey(static_cast<uint64_t>(slot) + 1));
}

absl::string_view ColumnRoleName(ColumnRole role) {
  switch (role) {
    case ColumnRole::kLabel:
      return "label";
    case ColumnRole::kDense:
      return "dense";
    case ColumnRole::kSparse:
      return "sparse";
    case ColumnRole::kMultiHot:
      return "multi_hot";
    case ColumnRole::kIgnore:
      return "ignore";
  }
  return "?";
}

int Schema::dense_features() const {
  int n = 0;
  for (const Column& c : columns) n += c.role == ColumnRole::kDense;
  return n;
}

int Schema::slots() const {
  int n = 0;
  for (const Column& c : columns) {
    n += c.role == ColumnRole::kSparse || c.role == ColumnRole::kMultiHot;
  }
  return n;
}

const Column& Schema::slot_column(int slot) const {
  for (const Column& c : columns) {
    if (c.role != ColumnRole::kSparse && c.role != ColumnRole::kMultiHot) continue;
    if (slot-- == 0) return c;
  }
  return columns.front();  // out of range: the caller checked slot < slots()
}

bool Schema::multi_hot(int slot) const {
  return slot >= 0 && slot < slots() && slot_column(slot).role == ColumnRole::kMultiHot;
}

Schema CriteoSchema() {
  Schema schema;
  schema.columns.push_back(MakeColumn("label", ColumnRole::kLabel));
  for (int j = 0; j < kDenseFeatures; ++j) {
    Column c = MakeColumn(absl::StrCat("I", j + 1), ColumnRole::kDense);
    c.integer = true;
    c.transform = Transform::kLog1p;
    schema.columns.push_back(std::move(c));
  }
  for (int s = 0; s < kSparseSlots; ++s) {
    Column c = MakeColumn(absl::StrCat("C", s + 1), ColumnRole::kSparse);
    c.ids = IdFormat::kHex;
    schema.columns.push_back(std::move(c));
  }
  return schema;
}

absl::Status CheckSchema(const Schema& schema) {
  // "<source>:<line>: data.columns (<name>): <problem>", at the column's line (of the first
  // column for the list as a whole).
  auto error = [&](size_t i, absl::string_view problem) {
    const bool one = i < schema.columns.size();
    const Column* c = one                      ? &schema.columns[i]
                      : schema.columns.empty() ? nullptr
                                               : &schema.columns[0];
    const int line = c != nullptr ? c->line : 0;
    return absl::InvalidArgumentError(absl::StrCat(
        schema.source.empty() ? "<schema>" : schema.source, line > 0 ? ":" : "",
        line > 0 ? absl::StrCat(line) : "", ": data.columns",
        one && !c->name.empty() ? absl::StrCat(" (", c->name, ")") : "", ": ", problem));
  };
  int labels = 0;
  absl::flat_hash_map<std::string, size_t> names;
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    const Column& c = schema.columns[i];
    if (c.role == ColumnRole::kLabel && ++labels > 1) return error(i, "a second label column");
    if (schema.header && c.name.empty()) {
      return error(i, "with a header, every column names its header field (name)");
    }
    if (!c.name.empty()) {
      auto [it, fresh] = names.emplace(c.name, i);
      if (!fresh) {
        const int first = schema.columns[it->second].line;
        return error(i, absl::StrCat("the name \"", c.name, "\" is taken by another column",
                                     first > 0 ? absl::StrCat(" (line ", first, ")") : ""));
      }
    }
    if (c.role == ColumnRole::kMultiHot) {
      if (c.separator == schema.delimiter) {
        return error(i, "the multi-hot separator must differ from the delimiter");
      }
      if (c.max_ids < 1) return error(i, "max_ids must be >= 1");
    }
  }
  if (labels == 0) return error(schema.columns.size(), "no column is the label");
  return absl::OkStatus();
}

absl::StatusOr<LineParser> LineParser::Create(const Schema& schema, absl::string_view header) {
  LineParser p;
  p.delimiter_ = schema.delimiter;
  p.columns_ = schema.columns;
  p.field_of_.resize(schema.columns.size());
  p.index_.resize(schema.columns.size());
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    p.field_of_[i] = static_cast<int>(i);
    const ColumnRole role = schema.columns[i].role;
    if (role == ColumnRole::kDense) p.index_[i] = p.dense_++;
    if (role == ColumnRole::kSparse || role == ColumnRole::kMultiHot) p.index_[i] = p.slots_++;
  }
  p.fields_ = static_cast<int>(schema.columns.size());
  if (!schema.header) return p;
  std::vector<absl::string_view> names;
  std::deque<std::string> unescaped;
  if (!SplitFields(header, schema.delimiter, &names, &unescaped)) {
    return Bad("header",
               "a quoted name is not closed, or its closing quote is not followed by the "
               "delimiter");
  }
  absl::flat_hash_map<std::string, int> field_of;
  absl::flat_hash_map<std::string, int> twice;  // a name the header gives again: its second field
  for (size_t f = 0; f < names.size(); ++f) {
    std::string name(absl::StripAsciiWhitespace(names[f]));
    if (!field_of.try_emplace(name, static_cast<int>(f)).second) {
      twice.try_emplace(std::move(name), static_cast<int>(f));
    }
  }
  for (size_t i = 0; i < schema.columns.size(); ++i) {
    auto it = field_of.find(schema.columns[i].name);
    if (auto again = twice.find(schema.columns[i].name); again != twice.end()) {
      // Which of the two the data section means cannot be known.
      return Bad("header", absl::StrCat("column \"", schema.columns[i].name,
                                        "\" of the data section is named twice in the header "
                                        "(fields ",
                                        it->second + 1, " and ", again->second + 1, ")"));
    }
    if (it == field_of.end()) {
      return Bad("header", absl::StrCat("column \"", schema.columns[i].name,
                                        "\" of the data section is not in the header"));
    }
    p.field_of_[i] = it->second;
  }
  p.fields_ = static_cast<int>(names.size());
  return p;
}

absl::Status LineParser::Parse(absl::string_view line, Example* out) const {
  thread_local std::vector<absl::string_view> fields;
  thread_local std::deque<std::string> unescaped;
  if (!SplitFields(line, delimiter_, &fields, &unescaped)) {
    return Bad("line",
               "a quoted field is not closed, or its closing quote is not followed by the "
               "delimiter (a field cannot hold a line break)");
  }
  if (static_cast<int>(fields.size()) < fields_) {
    return Bad("line", absl::StrCat("has ", fields.size(), " fields, expected ", fields_));
  }
  if (static_cast<int>(fields.size()) > fields_) {
    return Bad("line", absl::StrCat("has more than ", fields_, " fields"));
  }
  out->dense.assign(dense_, 0.0f);
  out->counts.resize(slots_);
  out->keys.clear();
  for (size_t i = 0; i < columns_.size(); ++i) {
    const Column& column = columns_[i];
    const absl::string_view text = fields[field_of_[i]];
    const int index = index_[i];
    switch (column.role) {
      case ColumnRole::kLabel:
        if (absl::Status s = ParseLabel(column, text, &out->label); !s.ok()) return s;
        break;
      case ColumnRole::kDense:
        if (absl::Status s = ParseDense(column, text, &out->dense[index]); !s.ok()) return s;
        break;
      case ColumnRole::kSparse: {
        uint64_t value = kMissing;
        if (!text.empty()) {
          if (absl::Status s = ParseId(column, text, &value); !s.ok()) return s;
          if (column.buckets > 0) value %= column.buckets;
        }
        out->keys.push_back(SlotKey(index, value));
        out->counts[index] = 1;
        break;
      }
      case ColumnRole::kMultiHot: {
        int kept = 0;
        for (size_t at = 0; at < text.size() && kept < column.max_ids;) {
          size_t stop = text.find(column.separator, at);
          if (stop == absl::string_view::npos) stop = text.size();
          const absl::string_view id = text.substr(at, stop - at);
          at = stop + 1;
          if (TrimSpaces(id).empty()) continue;
          uint64_t value = 0;
          if (absl::Status s = ParseId(column, id, &value); !s.ok()) return s;
          if (column.buckets > 0) value %= column.buckets;
          out->keys.push_back(SlotKey(index, value));
          ++kept;
        }
        out->counts[index] = kept;
        break;
      }
      case ColumnRole::kIgnore:
        break;
    }
  }
  return absl::OkStatus();
}

bool LineParser::LooksLikeHeader(absl::string_view line) const {
  std::vector<absl::string_view> fields;
  std::deque<std::string> unescaped;
  if (!SplitFields(line, delimiter_, &fields, &unescaped)) return false;
  for (size_t i = 0; i < columns_.size(); ++i) {
    if (columns_[i].role != ColumnRole::kLabel) continue;
    if (field_of_[i] >= static_cast<int>(fields.size())) return false;
    const absl::string_view text = TrimSpaces(fields[field_of_[i]]);
    double x = 0;
    auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), x);
    return !text.empty() && (ec != std::errc() || ptr != text.data() + text.size());
  }
  return false;
}

absl::Status ParseLine(absl::string_view line, Example* out) {
  static const LineParser* const criteo = new LineParser(*LineParser::Create(CriteoSchema()));
  return criteo->Parse(line, out);
}

void Batch::Clear() {
  size = 0;
  labels.clear();
  dense.clear();
  keys.clear();
  offsets.clear();
}

void Batch::MakeRagged() {
  offsets.resize(static_cast<size_t>(size) * slots + 1);
  for (size_t i = 0; i < offsets.size(); ++i) offsets[i] = static_cast<int32_t>(i);
}

void Batch::Add(const Example& e) {
  if (size == 0) {
    dense_width = static_cast<int>(e.dense.size());
    slots = static_cast<int>(e.counts.size());
  }
  bool one = true;
  for (int32_t c : e.counts) one &= c == 1;
  if (!one && one_hot()) {
    MakeRagged();
  }
  ++size;
  labels.push_back(e.label);
  dense.insert(dense.end(), e.dense.begin(), e.dense.end());
  keys.insert(keys.end(), e.keys.begin(), e.keys.end());
  if (!one_hot()) {
    for (int32_t c : e.counts) offsets.push_back(offsets.back() + c);
  }
}

void Batch::Append(const Batch& other, int64_t r) {
  if (size == 0) {
    dense_width = other.dense_width;
    slots = other.slots;
  }
  const bool one = other.one_hot() || [&] {
    for (int s = 0; s < other.slots; ++s) {
      if (other.KeyEnd(r, s) - other.KeyBegin(r, s) != 1) return false;
    }
    return true;
  }();
  if (!one && one_hot()) {
    MakeRagged();
  }
  ++size;
  labels.push_back(other.labels[r]);
  dense.insert(dense.end(), other.dense.begin() + r * other.dense_width,
               other.dense.begin() + (r + 1) * other.dense_width);
  if (other.slots > 0) {
    keys.insert(keys.end(), other.keys.begin() + other.KeyBegin(r, 0),
                other.keys.begin() + other.KeyEnd(r, other.slots - 1));
  }
  if (!one_hot()) {
    for (int s = 0; s < other.slots; ++s) {
      offsets.push_back(offsets.back() +
                        static_cast<int32_t>(other.KeyEnd(r, s) - other.KeyBegin(r, s)));
    }
  }
}

}  // namespace heterps::data
