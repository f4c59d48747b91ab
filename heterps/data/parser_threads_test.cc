// The reader with several parser threads against the reader with one: the same batches, the same
// statistics and the same errors, whatever the files, the split and the bad lines.
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/data/example_file.h"
#include "heterps/data/reader.h"
#include "heterps/data/synthetic.h"
#include "heterps/data/testing/reader_testing.h"

namespace heterps::data {
namespace {

using ::testing::HasSubstr;

using testing::ReadAll;
using Read = testing::ReadResult;

class ParserThreadsTest : public testing::DataDirTest {
 protected:
  // `options` read with 1 thread and with 2, 3 and 5: the same in every respect. The read with
  // one thread gives batches, and ends well unless `error`.
  static void ExpectSame(ReaderOptions options, const std::string& what, bool error = false) {
    options.parser_threads = 1;
    const Read expected = ReadAll(options);
    ASSERT_FALSE(expected.batches.empty()) << what << ": " << expected.status;
    ASSERT_EQ(expected.status.ok(), !error) << what << ": " << expected.status;
    for (int threads : {2, 3, 5}) {
      options.parser_threads = threads;
      const Read got = ReadAll(options);
      const std::string where = absl::StrCat(what, ", ", threads, " parser threads");
      EXPECT_EQ(got.status, expected.status) << where;
      EXPECT_EQ(got.stats.examples, expected.stats.examples) << where;
      EXPECT_EQ(got.stats.skipped, expected.stats.skipped) << where;
      EXPECT_EQ(got.stats.first_bad, expected.stats.first_bad) << where;
      ASSERT_EQ(got.batches.size(), expected.batches.size()) << where;
      for (size_t i = 0; i < got.batches.size(); ++i) {
        const Batch &a = got.batches[i], &b = expected.batches[i];
        EXPECT_EQ(a.size, b.size) << where << ", batch " << i;
        EXPECT_EQ(a.labels, b.labels) << where << ", batch " << i;
        EXPECT_EQ(a.dense, b.dense) << where << ", batch " << i;
        EXPECT_EQ(a.keys, b.keys) << where << ", batch " << i;
        EXPECT_EQ(a.offsets, b.offsets) << where << ", batch " << i;
      }
    }
  }

  // Every split a job makes, at batch sizes that do and do not divide the files.
  static void ExpectSameSplits(ReaderOptions options, const std::string& what) {
    for (int batch : {7, 64, 1000}) {
      options.batch_size = batch;
      const std::string at = absl::StrCat(what, ", batches of ", batch);
      ExpectSame(options, at);
      ReaderOptions ranks = options;
      ranks.world = 3;
      ranks.rank = 2;
      ExpectSame(ranks, at + ", rank 2 of 3");
      ReaderOptions cycle = options;
      cycle.cycle = 10;
      cycle.cycle_begin = 3;
      cycle.cycle_end = 7;
      ExpectSame(cycle, at + ", positions [3, 7) of 10");
      ReaderOptions eval = options;
      eval.eval_every = 7;
      ExpectSame(eval, at + ", training part");
      eval.part = ReaderOptions::Part::kEval;
      ExpectSame(eval, at + ", held-out part");
    }
  }
};

TEST_F(ParserThreadsTest, TheSameBatchesWhateverTheFilesAndTheSplit) {
  ReaderOptions options;
  options.files = {Synthetic("a.tsv", CriteoSchema(), 1500, 1), Path("empty.tsv"),
                   Synthetic("b.tsv", CriteoSchema(), 777, 2)};
  ASSERT_TRUE(base::WriteFileAtomically(options.files[1], "").ok());
  ExpectSameSplits(options, "Criteo");
  // A binary file between text files.
  ConvertOptions convert;
  convert.files = {Synthetic("c.tsv", CriteoSchema(), 900, 3)};
  convert.out = Path("c.hpx");
  ASSERT_TRUE(ConvertToExamples(convert).ok());
  options.files.insert(options.files.begin() + 1, convert.out);
  ExpectSameSplits(options, "Criteo with a binary file");
}

TEST_F(ParserThreadsTest, TheSameBatchesOfAMultiHotLayoutWithHeaders) {
  Schema schema;
  schema.delimiter = ',';
  schema.header = true;
  for (auto [name, role] : {std::pair<const char*, ColumnRole>{"y", ColumnRole::kLabel},
                            {"x", ColumnRole::kDense},
                            {"u", ColumnRole::kSparse},
                            {"g", ColumnRole::kMultiHot}}) {
    Column c;
    c.name = name;
    c.role = role;
    schema.columns.push_back(c);
  }
  ReaderOptions options;
  options.schema = schema;
  options.files = {Synthetic("m1.csv", schema, 1200, 4), Synthetic("m2.csv", schema, 500, 5)};
  ExpectSameSplits(options, "multi-hot");
  const Read read = ReadAll(options);
  ASSERT_TRUE(read.status.ok());
  EXPECT_FALSE(read.batches[0].one_hot());  // ragged keys
  // A later file whose header lacks a column: the same error after the same batches.
  const std::string bad = Path("m3.csv");
  ASSERT_TRUE(base::WriteFileAtomically(bad, "y,x,u\n1,2,3\n").ok());
  options.files.push_back(bad);
  options.batch_size = 64;
  ExpectSame(options, "a header without a column", /*error=*/true);
  EXPECT_THAT(ReadAll(options).status.message(), HasSubstr(bad + ":1: "));
}

TEST_F(ParserThreadsTest, TheSameErrorsAndSkippedLines) {
  const std::string text = Synthetic("bad.tsv", CriteoSchema(), 3000, 6);
  std::string content = *base::ReadTextFile(text);
  // Bad lines at 5, in the middle of a later batch, and at the very end.
  std::vector<std::string> lines;
  for (size_t at = 0, nl; (nl = content.find('\n', at)) != std::string::npos; at = nl + 1) {
    lines.push_back(content.substr(at, nl - at));
  }
  lines.insert(lines.begin() + 4, "1\tbroken");
  lines.insert(lines.begin() + 1700, "7" + lines[1700].substr(1));
  lines.push_back("x");
  std::string joined;
  for (const std::string& l : lines) joined += l + "\n";
  ASSERT_TRUE(base::WriteFileAtomically(text, joined).ok());
  ReaderOptions options;
  options.files = {text};
  for (int batch : {7, 64, 1000}) {
    options.batch_size = batch;
    options.bad_lines = BadLinePolicy::kStop;
    ExpectSame(options, absl::StrCat("stop, batches of ", batch), /*error=*/true);
    options.bad_lines = BadLinePolicy::kSkip;
    ExpectSame(options, absl::StrCat("skip, batches of ", batch));
  }
  options.parser_threads = 3;
  const Read skipped = ReadAll(options);
  EXPECT_EQ(skipped.stats.skipped, 3);
  EXPECT_THAT(skipped.stats.first_bad[0], HasSubstr(":5: line: has 2 fields"));
  // A truncated compressed file: the same DataLoss after the same batches.
  const std::string gz = Path("cut.tsv.gz");
  SyntheticOptions synthetic;
  synthetic.rows = 3000;
  ASSERT_TRUE(WriteSynthetic(synthetic, gz).ok());
  const std::string zipped = *base::ReadTextFile(gz);
  ASSERT_TRUE(base::WriteFileAtomically(gz, zipped.substr(0, zipped.size() / 2)).ok());
  options.files = {gz};
  options.batch_size = 100;
  ExpectSame(options, "truncated gzip", /*error=*/true);
  EXPECT_EQ(ReadAll(options).status.code(), absl::StatusCode::kDataLoss);
  // Under kStop, a bad line in a later file, with a batch begun in the file before it and the
  // chunks out of step with the batches.
  options.files = {Synthetic("first.tsv", CriteoSchema(), 1500, 8), text};
  options.bad_lines = BadLinePolicy::kStop;
  for (int batch : {7, 64, 1000}) {
    options.batch_size = batch;
    ExpectSame(options, absl::StrCat("stop in a later file, batches of ", batch), true);
  }
  // A corrupt binary file after text.
  ConvertOptions convert;
  convert.files = {Synthetic("z.tsv", CriteoSchema(), 2000, 9)};
  convert.out = Path("z.hpx");
  ASSERT_TRUE(ConvertToExamples(convert).ok());
  std::string binary = *base::ReadTextFile(convert.out);
  binary[binary.size() / 2] ^= 1;
  ASSERT_TRUE(base::WriteFileAtomically(convert.out, binary).ok());
  options.files = {options.files[0], convert.out};
  options.batch_size = 100;
  ExpectSame(options, "a corrupt binary file", true);
  EXPECT_THAT(ReadAll(options).status.message(), HasSubstr("checksum does not match"));
}

TEST_F(ParserThreadsTest, AReaderDestroyedMidwayStopsItsThreads) {
  ReaderOptions options;
  options.files = {Synthetic("long.tsv", CriteoSchema(), 20000, 7)};
  options.batch_size = 100;
  options.queue_batches = 1;
  options.parser_threads = 4;
  for (int taken : {0, 1, 5}) {
    auto reader = BatchReader::Open(options);
    ASSERT_TRUE(reader.ok());
    Batch b;
    for (int i = 0; i < taken; ++i) ASSERT_TRUE(*(*reader)->Next(&b));
  }  // each destroyed with its threads blocked on a full queue
  options.parser_threads = 0;
  EXPECT_EQ(BatchReader::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace heterps::data
