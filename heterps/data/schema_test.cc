// Declared layouts: every column type and every quirk of real files against hand-written lines,
// and Criteo's built-in layout against the same layout written out as a model spec's data section.
#include "heterps/data/schema.h"

#include <fstream>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/xxhash.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/reader.h"
#include "heterps/data/synthetic.h"

namespace heterps::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Column Col(std::string name, ColumnRole role) {
  Column c;
  c.name = std::move(name);
  c.role = role;
  return c;
}

// click, price (float, none), visits (integer, log1p), site (hex), user (decimal), city (string),
// tags (multi-hot strings, "|", at most 3), note (ignored); comma separated.
Schema Shop(bool header) {
  Schema s;
  s.delimiter = ',';
  s.header = header;
  s.columns.push_back(Col("click", ColumnRole::kLabel));
  s.columns.push_back(Col("price", ColumnRole::kDense));
  Column visits = Col("visits", ColumnRole::kDense);
  visits.integer = true;
  visits.transform = Transform::kLog1p;
  s.columns.push_back(visits);
  Column site = Col("site", ColumnRole::kSparse);
  site.ids = IdFormat::kHex;
  s.columns.push_back(site);
  Column user = Col("user", ColumnRole::kSparse);
  user.ids = IdFormat::kDecimal;
  s.columns.push_back(user);
  s.columns.push_back(Col("city", ColumnRole::kSparse));
  Column tags = Col("tags", ColumnRole::kMultiHot);
  tags.max_ids = 3;
  s.columns.push_back(tags);
  s.columns.push_back(Col("note", ColumnRole::kIgnore));
  return s;
}

uint64_t StringId(absl::string_view s) { return XXH3_64bits(s.data(), s.size()); }

TEST(SchemaTest, EveryColumnTypeBecomesWhatTheContractSays) {
  const Schema schema = Shop(false);
  ASSERT_TRUE(CheckSchema(schema).ok());
  EXPECT_EQ(schema.dense_features(), 2);
  EXPECT_EQ(schema.slots(), 4);
  EXPECT_TRUE(schema.multi_hot(3));
  EXPECT_FALSE(schema.multi_hot(2));
  auto parser = LineParser::Create(schema);
  ASSERT_TRUE(parser.ok()) << parser.status();
  Example e;
  // Spaces around numbers, an integral float in an integer column, a negative decimal id, a
  // string id with a space kept, four tags of which three are kept, an empty one dropped.
  ASSERT_TRUE(parser->Parse(" 1 , 2.5 , 260.0 ,ff, -7,New York,a||b|c|d,whatever\r", &e).ok());
  EXPECT_EQ(e.label, 1.0f);
  EXPECT_THAT(e.dense, ElementsAre(2.5f, static_cast<float>(std::log1p(260.0))));
  EXPECT_THAT(e.counts, ElementsAre(1, 1, 1, 3));
  EXPECT_THAT(e.keys, ElementsAre(SlotKey(0, 0xff), SlotKey(1, static_cast<uint64_t>(-7)),
                                  SlotKey(2, StringId("New York")), SlotKey(3, StringId("a")),
                                  SlotKey(3, StringId("b")), SlotKey(3, StringId("c"))));
  // Empty fields: dense 0, a sparse field's missing key, a multi-hot field's empty list.
  ASSERT_TRUE(parser->Parse("0,,,,,,,", &e).ok());
  EXPECT_THAT(e.dense, ElementsAre(0.0f, 0.0f));
  EXPECT_THAT(e.counts, ElementsAre(1, 1, 1, 0));
  EXPECT_THAT(e.keys,
              ElementsAre(SlotKey(0, kMissing), SlotKey(1, kMissing), SlotKey(2, kMissing)));
  // log1p of a negative count is 0, as for Criteo.
  ASSERT_TRUE(parser->Parse("0,-3.5,-4,1,2,x,y,", &e).ok());
  EXPECT_THAT(e.dense, ElementsAre(-3.5f, 0.0f));
  // The ids whose value is the empty field's (decimal -1, 16 hex f's) keep a key of their own,
  // and every other id its usual one.
  ASSERT_TRUE(parser->Parse("0,0,0,ffffffffffffffff,-1,x,y,", &e).ok());
  EXPECT_NE(e.keys[0], SlotKey(0, kMissing));
  EXPECT_NE(e.keys[1], SlotKey(1, kMissing));
  EXPECT_EQ(e.keys[0], SlotKey(0, kMissingId));
  EXPECT_EQ(e.keys[1], SlotKey(1, kMissingId));
  ASSERT_TRUE(parser->Parse("0,0,0,fffffffffffffffe,-2,x,y,", &e).ok());
  EXPECT_EQ(e.keys[0], SlotKey(0, 0xfffffffffffffffeull));
  EXPECT_EQ(e.keys[1], SlotKey(1, static_cast<uint64_t>(-2)));
}

// Quoted fields as RFC 4180 writes them (pandas, spreadsheets): a delimiter inside quotes, a
// doubled quote for a quote; the value is what the quotes hold.
TEST(SchemaTest, QuotedFieldsHoldDelimitersAndQuotes) {
  auto parser = LineParser::Create(Shop(false));
  ASSERT_TRUE(parser.ok()) << parser.status();
  Example e;
  ASSERT_TRUE(
      parser->Parse("1,\"2.5\",260,ff,7,\"New York, NY\",\"a|b\",\"say \"\"hi\"\", then go\"\r", &e)
          .ok());
  EXPECT_THAT(e.dense, ElementsAre(2.5f, static_cast<float>(std::log1p(260.0))));
  EXPECT_THAT(e.keys,
              ElementsAre(SlotKey(0, 0xff), SlotKey(1, 7), SlotKey(2, StringId("New York, NY")),
                          SlotKey(3, StringId("a")), SlotKey(3, StringId("b"))));
  ASSERT_TRUE(parser->Parse("1,2,3,ff,7,\"say \"\"hi\"\"\",,\"\"", &e).ok());
  EXPECT_EQ(e.keys[2], SlotKey(2, StringId("say \"hi\"")));
  // Not closed, or something after the closing quote: the line is bad, and says why.
  for (const char* bad : {"1,2,3,ff,7,\"New York,x,y", "1,2,3,ff,7,\"New\" York,x,y"}) {
    const absl::Status s = parser->Parse(bad, &e);
    EXPECT_THAT(s.message(), HasSubstr("a quoted field is not closed")) << bad;
  }
  // A quote inside an unquoted field is a character like any other.
  ASSERT_TRUE(parser->Parse("1,2,3,ff,7,5\" screen,x,y", &e).ok());
  EXPECT_EQ(e.keys[2], SlotKey(2, StringId("5\" screen")));
}

// A label derived from a number by a threshold: a rating of 4 or more is a positive.
TEST(SchemaTest, AThresholdMakesALabelOfANumber) {
  Schema schema = Shop(false);
  schema.columns[0].threshold = 4;
  auto parser = LineParser::Create(schema);
  ASSERT_TRUE(parser.ok()) << parser.status();
  Example e;
  for (const auto& [rating, label] : std::vector<std::pair<std::string, float>>{
           {"4", 1}, {"4.5", 1}, {" 5 ", 1}, {"3.99", 0}, {"0", 0}, {"-2", 0}}) {
    ASSERT_TRUE(parser->Parse(rating + ",1,2,ff,7,x,y,z", &e).ok()) << rating;
    EXPECT_EQ(e.label, label) << rating;
  }
  const absl::Status bad = parser->Parse("five,1,2,ff,7,x,y,z", &e);
  EXPECT_THAT(bad.message(),
              HasSubstr("click: \"five\" is not a number (the label is 1 from 4 up)"));
}

TEST(SchemaTest, BucketsFoldIdsIntoTheSlotsVocabulary) {
  Schema schema = Shop(false);
  schema.columns[4].buckets = 10;  // user (decimal)
  schema.columns[5].buckets = 7;   // city (string)
  schema.columns[6].buckets = 3;   // tags (multi-hot strings)
  auto parser = LineParser::Create(schema);
  ASSERT_TRUE(parser.ok()) << parser.status();
  Example e;
  ASSERT_TRUE(parser->Parse("1,0,0,ff,13,Paris,a|b,", &e).ok());
  EXPECT_THAT(e.keys,
              ElementsAre(SlotKey(0, 0xff), SlotKey(1, 3), SlotKey(2, StringId("Paris") % 7),
                          SlotKey(3, StringId("a") % 3), SlotKey(3, StringId("b") % 3)));
  // The empty id keeps its own key, outside the buckets.
  ASSERT_TRUE(parser->Parse("1,0,0,ff,,,,", &e).ok());
  EXPECT_EQ(e.keys[1], SlotKey(1, kMissing));
  // However many cities, at most 7 keys.
  std::set<uint64_t> cities;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(parser->Parse(absl::StrCat("0,0,0,1,1,city", i, ",,"), &e).ok());
    cities.insert(e.keys[2]);
  }
  EXPECT_EQ(cities.size(), 7u);
}

TEST(SchemaTest, BadFieldsNameTheColumn) {
  auto parser = LineParser::Create(Shop(false));
  ASSERT_TRUE(parser.ok());
  Example e;
  auto message = [&](const std::string& line) {
    return std::string(parser->Parse(line, &e).message());
  };
  EXPECT_THAT(message("2,1,1,1,1,x,y,z"), HasSubstr("click: \"2\" is not 0 or 1"));
  EXPECT_THAT(message("1,abc,1,1,1,x,y,z"), HasSubstr("price: \"abc\" is not a finite number"));
  EXPECT_THAT(message("1,nan,1,1,1,x,y,z"), HasSubstr("price: \"nan\" is not a finite number"));
  EXPECT_THAT(message("1,1,2.5,1,1,x,y,z"), HasSubstr("visits: \"2.5\" is not an integer"));
  EXPECT_THAT(message("1,1e39,1,1,1,x,y,z"),
              HasSubstr("price: \"1e39\" is beyond a float's range"));
  EXPECT_THAT(message("1,1,1,xyz,1,x,y,z"), HasSubstr("site: \"xyz\" is not hexadecimal"));
  EXPECT_THAT(message("1,1,1,1,1e3,x,y,z"), HasSubstr("user: \"1e3\" is not a decimal id"));
  // Fields missing from the end of a line stay an error, as do extra ones.
  EXPECT_THAT(message("1,1,1,1,1,x"), HasSubstr("line: has 6 fields, expected 8"));
  EXPECT_THAT(message("1,1,1,1,1,x,y,z,extra"), HasSubstr("line: has more than 8 fields"));
}

TEST(SchemaTest, CheckSchemaRefusesWhatCannotWork) {
  Schema s = Shop(true);
  s.columns[5].name = "";
  EXPECT_THAT(CheckSchema(s).message(), HasSubstr("every column names its header field"));
  s = Shop(false);
  s.columns[6].separator = ',';
  EXPECT_THAT(CheckSchema(s).message(), HasSubstr("separator must differ from the delimiter"));
  s = Shop(false);
  s.columns[1].name = "click";
  EXPECT_THAT(CheckSchema(s).message(),
              HasSubstr("data.columns (click): the name \"click\" is taken by another column"));
  s = Shop(false);
  s.columns[0].role = ColumnRole::kIgnore;
  EXPECT_THAT(CheckSchema(s).message(), HasSubstr("no column is the label"));
}

class SchemaReaderTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = ::testing::TempDir() + "/schema_test_" + name;
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::pair<std::vector<Batch>, absl::Status> ReadAll(const ReaderOptions& options) {
    std::vector<Batch> batches;
    auto reader = BatchReader::Open(options);
    if (!reader.ok()) return {batches, reader.status()};
    for (;;) {
      Batch b;
      absl::StatusOr<bool> more = (*reader)->Next(&b);
      if (!more.ok()) return {batches, more.status()};
      if (!*more) return {batches, absl::OkStatus()};
      batches.push_back(std::move(b));
    }
  }
};

TEST_F(SchemaReaderTest, HeaderColumnsByNameEmptyLinesAndALastLineWithoutNewline) {
  // The header orders the fields differently from the schema and has a field no column names.
  const std::string text =
      "note,tags,city,user,site,visits,price,extra,click\r\n"
      "n,a|b,x,1,a,3,1.5,?,1\r\n"
      "\r\n"
      "n,,y,2,b,4,2.5,?,0\n"
      "\n"
      "\r\r\n"
      "n,c,z,3,c,5,3.5,?,1";  // no newline at the end
  ReaderOptions options;
  options.schema = Shop(true);
  options.files = {Write("header.csv", text)};
  options.batch_size = 10;
  EXPECT_EQ(*CountLines(options.files, true), 3);
  EXPECT_EQ(*CountLines(options.files, false), 4);
  auto [batches, status] = ReadAll(options);
  ASSERT_TRUE(status.ok()) << status;
  ASSERT_EQ(batches.size(), 1u);
  const Batch& b = batches[0];
  EXPECT_EQ(b.size, 3);
  EXPECT_EQ(b.dense_width, 2);
  EXPECT_EQ(b.slots, 4);
  EXPECT_THAT(b.labels, ElementsAre(1, 0, 1));
  EXPECT_FLOAT_EQ(b.dense[2], 2.5f);
  ASSERT_FALSE(b.one_hot());
  // Sample 1's tags are empty, sample 0's hold two, sample 2's one.
  EXPECT_EQ(b.KeyEnd(0, 3) - b.KeyBegin(0, 3), 2);
  EXPECT_EQ(b.KeyEnd(1, 3) - b.KeyBegin(1, 3), 0);
  EXPECT_EQ(b.KeyEnd(2, 3) - b.KeyBegin(2, 3), 1);
  EXPECT_EQ(b.keys[b.KeyBegin(2, 3)], SlotKey(3, StringId("c")));
  EXPECT_EQ(b.keys[b.KeyBegin(1, 1)], SlotKey(1, 2));
  EXPECT_EQ(static_cast<size_t>(b.offsets.back()), b.keys.size());

  // A declared header that is not there.
  options.files = {Write("emptyheader.csv", "\nclick,price\n")};
  EXPECT_THAT(ReadAll(options).second.message(),
              HasSubstr("emptyheader.csv:1: header: the line is empty"));
  // A named column missing from the header names the file.
  options.files = {Write("noheader.csv", "click,price\n1,2\n")};
  status = ReadAll(options).second;
  EXPECT_THAT(status.message(), HasSubstr("noheader.csv:1: header: column \"visits\""));
  // A column the data section names, named twice by the header: which one is meant is unknown.
  options.files = {Write("twice.csv",
                         "note,tags,city,user,site,visits,price,price,click\n"
                         "n,a,x,1,a,3,1.5,9,1\n")};
  status = ReadAll(options).second;
  EXPECT_THAT(status.message(), HasSubstr("twice.csv:1: header: column \"price\" of the data "
                                          "section is named twice in the header (fields 7 and 8)"));
  // A name the data section does not use may repeat.
  options.files = {Write("extra.csv",
                         "note,tags,city,user,site,visits,price,extra,click,extra\n"
                         "n,a,x,1,a,3,1.5,?,1,?\n")};
  EXPECT_TRUE(ReadAll(options).second.ok());
  // A UTF-8 byte-order mark before the header (spreadsheet exports write one) is not data.
  options.files = {Write("bom.csv", "\xEF\xBB\xBF" + text)};
  auto [with_bom, bom_status] = ReadAll(options);
  ASSERT_TRUE(bom_status.ok()) << bom_status;
  ASSERT_EQ(with_bom.size(), 1u);
  EXPECT_EQ(with_bom[0].labels, b.labels);
  EXPECT_EQ(with_bom[0].keys, b.keys);
}

TEST_F(SchemaReaderTest, AHeaderNobodyDeclaredIsNamedAsSuch) {
  ReaderOptions options;
  options.schema = Shop(false);
  options.files = {
      Write("undeclared.csv", "click,price,visits,site,user,city,tags,note\n1,1,1,1,1,x,y,z\n")};
  const absl::Status status = ReadAll(options).second;
  EXPECT_THAT(status.message(), HasSubstr("undeclared.csv:1: click: \"click\" is not 0 or 1"));
  EXPECT_THAT(status.message(), HasSubstr("looks like a header: declare `header: true`"));
  // Without a header, a byte-order mark does not stand in front of the first label.
  options.files = {Write("bom.csv",
                         "\xEF\xBB\xBF"
                         "1,1.5,3,a,1,x,y,z\n0,2,4,b,2,y,z,w\n")};
  auto [batches, bom] = ReadAll(options);
  ASSERT_TRUE(bom.ok()) << bom;
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_THAT(batches[0].labels, ElementsAre(1, 0));
}

// Criteo lines as the synthetic generator writes them, read with the built-in layout and with the
// same layout written out in a model spec: the same batches, bit for bit.
TEST_F(SchemaReaderTest, CriteoWrittenOutIsTheBuiltInLayout) {
  const std::string path = ::testing::TempDir() + "/schema_test_criteo.tsv";
  SyntheticOptions synthetic;
  synthetic.rows = 3000;
  ASSERT_TRUE(WriteSynthetic(synthetic, path).ok());
  auto spec = config::ParseModelSpec(R"(
name: criteo-explicit
batch_size: 64
layers:
  - {name: input, kind: input, dense: 13, sparse: 26}
  - {name: emb, kind: embedding, rows: 1000, dim: 4}
  - {name: interact, kind: interaction, op: concat}
  - {name: top, kind: fc, in: 117, out: 1}
  - {name: loss, kind: logloss}
data:
  delimiter: tab
  header: false
  columns:
    - {name: label, role: label}
    - {name: I, count: 13, role: dense, type: integer, transform: log1p}
    - {name: C, count: 26, role: sparse, ids: hex}
)",
                                     "criteo-explicit.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(spec->data_declared);
  ReaderOptions builtin;
  builtin.files = {path};
  builtin.batch_size = 100;
  ReaderOptions declared = builtin;
  declared.schema = spec->data;
  auto [a, a_status] = ReadAll(builtin);
  auto [b, b_status] = ReadAll(declared);
  ASSERT_TRUE(a_status.ok() && b_status.ok());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(a[i].one_hot() && b[i].one_hot());
    EXPECT_EQ(a[i].labels, b[i].labels);
    EXPECT_EQ(a[i].dense, b[i].dense);
    EXPECT_EQ(a[i].keys, b[i].keys);
  }
}

// What the planner uses for multi-hot slots: the ids the data holds, per slot, averaged.
TEST_F(SchemaReaderTest, IdsPerSlotAreMeasuredOnTheData) {
  // Tags: 3, 0, 2 and 5 ids (the cap is 3: 3, 0, 2, 3), then a bad line, skipped.
  const std::string path = Write("measure.csv",
                                 "1,1,1,1,1,x,a|b|c,n\n"
                                 "0,1,1,1,1,x,,n\n"
                                 "1,1,1,1,1,x,a|b,n\n"
                                 "1,1,1,1,1,x,a|b|c|d|e,n\n"
                                 "7,1,1,1,1,x,a,n\n");
  auto ids = MeasureIdsPerSlot({path}, Shop(false), 100);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(1.0, 1.0, 1.0, 2.0));
  // The first two lines only.
  EXPECT_THAT(*MeasureIdsPerSlot({path}, Shop(false), 2), ElementsAre(1.0, 1.0, 1.0, 1.5));

  auto spec = config::ParseModelSpec(R"(
name: shop
batch_size: 8
layers:
  - {name: input, kind: input, dense: 2, sparse: 4}
  - {name: ids, kind: embedding, rows: 100, dim: 4, slots: 3}
  - {name: all, kind: embedding, rows: 100, dim: 4, ids_per_slot: 3}
  - {name: cat, kind: interaction, op: concat}
  - {name: top, kind: fc, in: 30, out: 1}
  - {name: loss, kind: logloss}
)",
                                     "shop.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_TRUE(config::UseMeasuredIds(*ids, &*spec).ok());
  EXPECT_EQ(spec->layers[1].ids_per_slot, 1.0);
  EXPECT_EQ(spec->layers[2].ids_per_slot, 5.0 / 4);
  EXPECT_FALSE(config::UseMeasuredIds({1.0}, &*spec).ok());
  // Data of another layout fails fast, with the reason.
  const std::string tsv = Write("other.tsv", "1\t2\t3\n0\t2\t3\n");
  EXPECT_THAT(MeasureIdsPerSlot({tsv}, Shop(false), 100).status().message(),
              HasSubstr("other.tsv:1: line: has 1 fields, expected 8"));
}

TEST(BatchTest, AppendKeepsRaggedKeysAndOneHotBatchesStayCompact) {
  Example one, many;
  one.dense = {1};
  one.keys = {10, 20};
  one.counts = {1, 1};
  many.dense = {2};
  many.keys = {30, 31, 32};
  many.counts = {0, 3};
  Batch batch;
  batch.Add(one);
  batch.Add(one);
  EXPECT_TRUE(batch.one_hot());
  batch.Add(many);
  ASSERT_FALSE(batch.one_hot());
  EXPECT_THAT(batch.offsets, ElementsAre(0, 1, 2, 3, 4, 4, 7));
  Batch copy;
  for (int r = 0; r < batch.size; ++r) copy.Append(batch, r);
  EXPECT_EQ(copy.keys, batch.keys);
  EXPECT_EQ(copy.offsets, batch.offsets);
  EXPECT_EQ(copy.dense, batch.dense);
  Batch first;
  first.Append(batch, 0);
  EXPECT_TRUE(first.one_hot());
  EXPECT_THAT(first.keys, ElementsAre(10, 20));
}

}  // namespace
}  // namespace heterps::data
