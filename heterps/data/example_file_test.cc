#include "heterps/data/example_file.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/base/xxhash.h"
#include "heterps/data/reader.h"
#include "heterps/data/synthetic.h"
#include "heterps/data/testing/reader_testing.h"

namespace heterps::data {
namespace {

using ::testing::HasSubstr;

// LayoutFingerprint(CriteoSchema()), as the first build that wrote the binary form computed it.
constexpr uint64_t kCriteoFingerprint = 0x8f676f87be0b597aull;

// A layout with every role: a header, a transformed dense column, decimal, hex (bucketed) and
// string ids, a multi-hot column, an ignored one.
Schema MultiHotSchema() {
  Schema schema;
  schema.delimiter = ',';
  schema.header = true;
  auto add = [&](std::string name, ColumnRole role) -> Column& {
    Column c;
    c.name = std::move(name);
    c.role = role;
    schema.columns.push_back(c);
    return schema.columns.back();
  };
  add("clicked", ColumnRole::kLabel);
  add("age", ColumnRole::kDense).transform = Transform::kLog1p;
  add("user", ColumnRole::kSparse).ids = IdFormat::kDecimal;
  Column& genres = add("genres", ColumnRole::kMultiHot);
  genres.separator = '|';
  genres.max_ids = 5;
  add("note", ColumnRole::kIgnore);
  Column& item = add("item", ColumnRole::kSparse);
  item.ids = IdFormat::kHex;
  item.buckets = 1000;
  add("score", ColumnRole::kDense);
  return schema;
}

class ExampleFileTest : public testing::DataDirTest {
 protected:
  std::string Convert(const std::vector<std::string>& files, const Schema& schema,
                      const std::string& name) {
    ConvertOptions options;
    options.files = files;
    options.schema = schema;
    options.out = Path(name);
    absl::StatusOr<ConvertSummary> summary = ConvertToExamples(options);
    EXPECT_TRUE(summary.ok()) << summary.status();
    return options.out;
  }

  // Reads `options` over `text` and over `binary`: the same batches, bit for bit.
  static void ExpectSameBatches(ReaderOptions options, const std::vector<std::string>& text,
                                const std::vector<std::string>& binary, const std::string& what) {
    options.files = text;
    auto [expected, expected_status, expected_stats] = testing::ReadAll(options);
    options.files = binary;
    auto [got, status, stats] = testing::ReadAll(options);
    ASSERT_TRUE(expected_status.ok()) << expected_status;
    ASSERT_TRUE(status.ok()) << what << ": " << status;
    ASSERT_EQ(got.size(), expected.size()) << what;
    ASSERT_FALSE(got.empty()) << what;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].size, expected[i].size) << what << ", batch " << i;
      EXPECT_EQ(got[i].dense_width, expected[i].dense_width) << what;
      EXPECT_EQ(got[i].slots, expected[i].slots) << what;
      EXPECT_EQ(got[i].labels, expected[i].labels) << what << ", batch " << i;
      EXPECT_EQ(got[i].dense, expected[i].dense) << what << ", batch " << i;
      EXPECT_EQ(got[i].keys, expected[i].keys) << what << ", batch " << i;
      EXPECT_EQ(got[i].offsets, expected[i].offsets) << what << ", batch " << i;
    }
  }

  // Every way a reader splits data: ranks, a step's cycle, the held-out split, small batches.
  static void ExpectSameReads(const Schema& schema, const std::vector<std::string>& text,
                              const std::vector<std::string>& binary) {
    ReaderOptions options;
    options.schema = schema;
    options.batch_size = 64;
    ExpectSameBatches(options, text, binary, "everything");
    options.world = 3;
    for (int rank = 0; rank < 3; ++rank) {
      options.rank = rank;
      ExpectSameBatches(options, text, binary, absl::StrCat("rank ", rank, " of 3"));
    }
    options.world = 1;
    options.rank = 0;
    options.cycle = 10;
    options.cycle_begin = 3;
    options.cycle_end = 7;
    ExpectSameBatches(options, text, binary, "positions [3, 7) of every 10");
    options.cycle = 0;
    options.eval_every = 7;
    ExpectSameBatches(options, text, binary, "training part");
    options.part = ReaderOptions::Part::kEval;
    ExpectSameBatches(options, text, binary, "held-out part");
  }
};

TEST_F(ExampleFileTest, AConvertedFileReadsAsItsLinesWhateverTheSplit) {
  const Schema criteo = CriteoSchema();
  const std::vector<std::string> text = {Synthetic("a.tsv", criteo, 1500, 1),
                                         Synthetic("b.tsv", criteo, 1100, 2)};
  const std::string one = Convert(text, criteo, "ab.hpx");
  ExpectSameReads(criteo, text, {one});
  // One binary file per text file, and a list that mixes both forms.
  const std::string a = Convert({text[0]}, criteo, "a.hpx");
  const std::string b = Convert({text[1]}, criteo, "b.hpx");
  ExpectSameReads(criteo, text, {a, b});
  ExpectSameReads(criteo, text, {a, text[1]});
  ExpectSameReads(criteo, text, {text[0], b});
  // Compressed by its name, read as the plain one.
  const std::string zst = Convert(text, criteo, "ab.hpx.zst");
  ExpectSameReads(criteo, text, {zst});
  EXPECT_EQ(*IsExampleFile(zst), true);
  EXPECT_EQ(*IsExampleFile(text[0]), false);
  // Counted as the lines were.
  EXPECT_EQ(*CountLines({one}), 2600);
  EXPECT_EQ(*CountLines({a, text[1], zst}), 1500 + 1100 + 2600);
}

TEST_F(ExampleFileTest, MultiHotLayoutsKeepTheirRaggedKeys) {
  const Schema schema = MultiHotSchema();
  ASSERT_TRUE(CheckSchema(schema).ok()) << CheckSchema(schema);
  const std::vector<std::string> text = {Synthetic("m.csv", schema, 2000, 3)};
  const std::string binary = Convert(text, schema, "m.hpx");
  ExpectSameReads(schema, text, {binary});
  EXPECT_EQ(*CountLines({binary}, /*header=*/true), 2000);
  EXPECT_EQ(*CountLines(text, /*header=*/true), 2000);
  // Some samples of the text hold several ids in a slot, some none.
  auto [batches, status, stats] = testing::ReadAll([&] {
    ReaderOptions o;
    o.files = {binary};
    o.schema = schema;
    return o;
  }());
  ASSERT_TRUE(status.ok());
  int64_t none = 0, several = 0;
  for (const Batch& b : batches) {
    ASSERT_FALSE(b.one_hot());
    for (int r = 0; r < b.size; ++r) {
      const int64_t n = b.KeyEnd(r, 1) - b.KeyBegin(r, 1);
      none += n == 0;
      several += n > 1;
    }
  }
  EXPECT_GT(none, 0);
  EXPECT_GT(several, 0);
}

TEST_F(ExampleFileTest, AnotherLayoutIsRefusedNamingTheFile) {
  const Schema criteo = CriteoSchema();
  const std::string binary = Convert({Synthetic("c.tsv", criteo, 300, 4)}, criteo, "c.hpx");
  ReaderOptions options;
  options.files = {binary};
  options.schema = MultiHotSchema();
  absl::Status status = testing::ReadAll(options).status;
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(binary + ": converted with a layout of 13 dense "
                                                   "features and 26 slots, where the model's"));
  // The same widths, another transform: what the file holds is not what this layout makes.
  options.schema = criteo;
  options.schema.columns[1].transform = Transform::kNone;
  EXPECT_NE(LayoutFingerprint(options.schema), LayoutFingerprint(criteo));
  status = testing::ReadAll(options).status;
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(binary + ": converted with another layout"));
  // What changes how a line is split, and not what it becomes, is the same layout; without a
  // header, names are only for messages.
  Schema renamed = criteo;
  renamed.delimiter = ',';
  renamed.columns[3].name = "renamed";
  EXPECT_EQ(LayoutFingerprint(renamed), LayoutFingerprint(criteo));
  // Pinned: files converted by earlier builds stay readable.
  EXPECT_EQ(LayoutFingerprint(criteo), kCriteoFingerprint);
  // Everything else that decides what a line becomes changes it.
  const Schema multi_hot = MultiHotSchema();
  const uint64_t base = LayoutFingerprint(multi_hot);
  std::vector<std::pair<std::string, std::function<void(Schema&)>>> changes = {
      {"a threshold", [](Schema& s) { s.columns[0].threshold = 4.0; }},
      {"integer", [](Schema& s) { s.columns[1].integer = true; }},
      {"the transform", [](Schema& s) { s.columns[1].transform = Transform::kNone; }},
      {"the id format", [](Schema& s) { s.columns[2].ids = IdFormat::kHex; }},
      {"the separator", [](Schema& s) { s.columns[3].separator = ';'; }},
      {"max_ids", [](Schema& s) { s.columns[3].max_ids = 6; }},
      {"buckets", [](Schema& s) { s.columns[5].buckets = 999; }},
      {"a role", [](Schema& s) { s.columns[4].role = ColumnRole::kDense; }},
      {"the field a name reads",
       [](Schema& s) { std::swap(s.columns[1].name, s.columns[6].name); }},
      {"an ignored column's place without a header",
       [](Schema& s) {
         s.header = false;
         std::swap(s.columns[4], s.columns[5]);
       }},
  };
  Schema positional = multi_hot;
  positional.header = false;
  const uint64_t positional_base = LayoutFingerprint(positional);
  for (auto& [what, change] : changes) {
    Schema changed = multi_hot;
    change(changed);
    EXPECT_NE(LayoutFingerprint(changed), changed.header ? base : positional_base) << what;
  }
  // A text file is not one of the binary form.
  EXPECT_EQ(ExampleSource::Open(*ByteSource::Open(Path("c.tsv")), criteo).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The chunk header's and the header's checksums written again after a change, so that the checks
// behind them are reached.
void Rehash(std::string* bytes, size_t chunk) {
  const uint64_t header = XXH3_64bits(bytes->data(), 32);
  std::memcpy(bytes->data() + 32, &header, 8);
  if (chunk == 0) return;
  uint32_t size;
  std::memcpy(&size, bytes->data() + chunk + 4, 4);
  const uint64_t hash = XXH3_64bits(bytes->data() + chunk + 16, size);
  std::memcpy(bytes->data() + chunk + 8, &hash, 8);
}

TEST_F(ExampleFileTest, TruncatedOrCorruptFilesAreDataLossNamingTheFile) {
  const Schema criteo = CriteoSchema();
  // Enough records for several chunks of 1 MiB (264 bytes a record).
  const std::string good = Convert({Synthetic("big.tsv", criteo, 9000, 5)}, criteo, "big.hpx");
  const std::string bytes = *base::ReadTextFile(good);
  ASSERT_GT(bytes.size(), size_t{2} << 20);
  auto expect_loss = [&](const std::string& content, const std::string& what,
                         const std::string& why) {
    const std::string path = Path("bad.hpx");
    ASSERT_TRUE(base::WriteFileAtomically(path, content).ok());
    ReaderOptions options;
    options.files = {path};
    absl::Status status = testing::ReadAll(options).status;
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << what << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(path + ": ")) << what;
    EXPECT_THAT(status.message(), HasSubstr(why)) << what;
    absl::StatusOr<int64_t> count = CountLines({path});
    EXPECT_EQ(count.status().code(), absl::StatusCode::kDataLoss) << what << ": " << count.status();
  };
  expect_loss(bytes.substr(0, 20), "inside the header", "ends inside the header at byte 20");
  expect_loss(bytes.substr(0, 40), "inside a chunk's header", "ends inside a chunk's header");
  expect_loss(bytes.substr(0, 1 << 20), "inside a chunk", "ends inside a chunk");
  expect_loss(bytes.substr(0, bytes.size() - 24), "without its end",
              "ends inside a chunk's header");
  std::string flipped = bytes;
  flipped[(1 << 20) + 100] ^= 0x10;
  expect_loss(flipped, "a flipped bit", "is corrupt (its checksum does not match)");
  expect_loss(bytes + "x", "bytes after the end", "has bytes after its end");
  std::string header = bytes;
  header[12] ^= 1;  // the dense features
  expect_loss(header, "a flipped bit in the header", "the header is corrupt");
  // A chunk that claims 4 GiB: refused before anything is allocated.
  std::string huge = bytes;
  const uint32_t claimed = 0xfffffff0u;
  std::memcpy(huge.data() + 40 + 4, &claimed, 4);
  expect_loss(huge, "a chunk's size", "the chunk at byte 40 is corrupt (");
  // The end's count, with its checksum made to match.
  std::string end = bytes;
  end[end.size() - 8] ^= 1;
  Rehash(&end, end.size() - 24);
  expect_loss(end, "the end's count", "its end counts 9001 records, where its chunks hold 9000");
  // Another version: a build that reads it is needed, not the data again.
  std::string version = bytes;
  version[8] = 2;
  Rehash(&version, 0);
  const std::string path = Path("v2.hpx");
  ASSERT_TRUE(base::WriteFileAtomically(path, version).ok());
  absl::StatusOr<std::unique_ptr<ByteSource>> source = ByteSource::Open(path);
  ASSERT_TRUE(source.ok());
  absl::Status status = ExampleSource::Open(*std::move(source), criteo).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr(path + ": binary form version 2"));
}

TEST_F(ExampleFileTest, ARecordThatOverrunsItsChunkIsDataLoss) {
  const Schema schema = MultiHotSchema();
  const std::string good = Convert({Synthetic("o.csv", schema, 500, 9)}, schema, "o.hpx");
  std::string bytes = *base::ReadTextFile(good);
  // Record 1's first count (after its label and 2 dense features) one more: every record after it
  // shifts by 8 bytes, and the chunk's records no longer add up to its payload.
  uint32_t count;
  const size_t at = 40 + 16 + 4 + 8;
  std::memcpy(&count, bytes.data() + at, 4);
  ++count;
  std::memcpy(bytes.data() + at, &count, 4);
  Rehash(&bytes, 40);
  const std::string path = Path("overrun.hpx");
  ASSERT_TRUE(base::WriteFileAtomically(path, bytes).ok());
  ReaderOptions options;
  options.files = {path};
  options.schema = schema;
  absl::Status status = testing::ReadAll(options).status;
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr(path + ": "));
  EXPECT_THAT(status.message(), HasSubstr("the chunk at byte 40"));
}

TEST_F(ExampleFileTest, BadLinesStopTheConversionOrAreLeftOut) {
  const Schema criteo = CriteoSchema();
  const std::string text = Synthetic("l.tsv", criteo, 100, 6);
  std::string content = *base::ReadTextFile(text);
  const size_t third = [&] {  // the start of line 3
    size_t at = 0;
    for (int i = 0; i < 2; ++i) at = content.find('\n', at) + 1;
    return at;
  }();
  content.insert(third, "1\tbroken\n");
  ASSERT_TRUE(base::WriteFileAtomically(text, content).ok());
  ConvertOptions options;
  options.files = {text};
  options.out = Path("l.hpx");
  absl::StatusOr<ConvertSummary> summary = ConvertToExamples(options);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(summary.status().message(), text + ":3: line: has 2 fields, expected 40");
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {  // nothing half written
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(::testing::StartsWith("l.hpx")));
  }
  options.bad_lines = BadLinePolicy::kSkip;
  int64_t progress = 0;
  options.progress = [&](int64_t lines) { progress = lines; };
  summary = ConvertToExamples(options);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->records, 100);
  EXPECT_EQ(summary->read.skipped, 1);
  EXPECT_EQ(progress, 101);
  EXPECT_EQ(*CountLines({options.out}), 100);
}

}  // namespace
}  // namespace heterps::data
