// The data line parsers (data/schema.h): Criteo's layout on every line, and a declared CSV layout
// with a header (the first line) and a multi-hot column on the rest, each parsed line added to a
// Batch.
#include "fuzz/fuzz_target.h"
#include "heterps/data/schema.h"

namespace {

heterps::data::Schema Csv() {
  using heterps::data::Column;
  using heterps::data::ColumnRole;
  heterps::data::Schema s;
  s.delimiter = ',';
  s.header = true;
  auto add = [&](const char* name, ColumnRole role) {
    Column c;
    c.name = name;
    c.role = role;
    s.columns.push_back(c);
    return &s.columns.back();
  };
  add("click", ColumnRole::kLabel);
  add("price", ColumnRole::kDense);
  Column* visits = add("visits", ColumnRole::kDense);
  visits->integer = true;
  visits->transform = heterps::data::Transform::kLog1p;
  add("site", ColumnRole::kSparse)->ids = heterps::data::IdFormat::kHex;
  add("user", ColumnRole::kSparse)->ids = heterps::data::IdFormat::kDecimal;
  Column* tags = add("tags", ColumnRole::kMultiHot);
  tags->max_ids = 5;
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text = heterps::fuzz::Text(data, size);
  static const heterps::data::Schema csv = Csv();
  heterps::data::Example e;
  heterps::data::Batch criteo, declared;
  absl::StatusOr<heterps::data::LineParser> parser = absl::InvalidArgumentError("no header yet");
  size_t start = 0;
  for (int line = 0; start <= text.size(); ++line) {
    size_t end = text.find('\n', start);
    if (end == absl::string_view::npos) end = text.size();
    const absl::string_view one = text.substr(start, end - start);
    start = end + 1;
    if (heterps::data::ParseLine(one, &e).ok()) criteo.Add(e);
    if (line == 0) {
      parser = heterps::data::LineParser::Create(csv, one);
      continue;
    }
    if (!parser.ok()) break;
    if (parser->Parse(one, &e).ok()) {
      declared.Add(e);
    } else {
      (void)parser->LooksLikeHeader(one);
    }
  }
  // Every sample of the batches can be copied out again.
  heterps::data::Batch copy;
  for (int r = 0; r < declared.size; ++r) copy.Append(declared, r);
  return 0;
}
