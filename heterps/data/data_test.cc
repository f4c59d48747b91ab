#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/data/auc.h"
#include "heterps/data/criteo.h"
#include "heterps/data/reader.h"
#include "heterps/data/synthetic.h"
#include "nlohmann/json.hpp"

namespace heterps::data {
namespace {

using ::testing::HasSubstr;

// A valid line: label, 13 integers (some empty, one negative), 26 hex values (some empty).
std::string Line(int label, int seed) {
  std::vector<std::string> fields = {std::to_string(label)};
  for (int j = 0; j < kDenseFeatures; ++j) {
    fields.push_back(j == 2 ? "" : j == 1 ? "-1" : std::to_string(seed * 7 + j));
  }
  for (int s = 0; s < kSparseSlots; ++s) {
    fields.push_back(s == 5 ? "" : absl::StrCat(absl::Hex(seed * 1000003u + s * 7919u)));
  }
  return absl::StrJoin(fields, "\t");
}

TEST(CriteoTest, ParsesFieldsTransformsAndHashesBySlot) {
  Example e;
  ASSERT_TRUE(ParseLine(Line(1, 3) + "\r", &e).ok());
  EXPECT_EQ(e.label, 1.0f);
  EXPECT_FLOAT_EQ(e.dense[0], std::log1p(21.0f));
  EXPECT_EQ(e.dense[1], 0.0f);  // negative: clamped
  EXPECT_EQ(e.dense[2], 0.0f);  // empty
  EXPECT_EQ(e.keys[0], SlotKey(0, 3 * 1000003u));
  EXPECT_EQ(e.keys[5], SlotKey(5, kMissing));
  // Slot-aware: the same value in two slots is two keys; and the hash is pinned, so that tables
  // and checkpoints stay valid across versions (values from the formula in docs/data.md,
  // computed outside heterps).
  EXPECT_NE(SlotKey(0, 0x68fd1e64), SlotKey(1, 0x68fd1e64));
  EXPECT_EQ(SlotKey(0, 0x68fd1e64), 0x7132bda5bf5ef2bdull);
  EXPECT_EQ(SlotKey(25, kMissing), 0xcd37fb3b5befa3e2ull);
}

TEST(CriteoTest, BadLinesNameTheField) {
  Example e;
  std::string line = Line(0, 1);
  auto with = [&](int field, const std::string& text) {
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    fields[field] = text;
    return absl::StrJoin(fields, "\t");
  };
  EXPECT_THAT(ParseLine(with(0, "2"), &e).message(), HasSubstr("label: \"2\" is not 0 or 1"));
  EXPECT_THAT(ParseLine(with(3, "1.5"), &e).message(), HasSubstr("I3: \"1.5\" is not an integer"));
  EXPECT_THAT(ParseLine(with(14 + 16, "xyz"), &e).message(), HasSubstr("C17: \"xyz\" is not hex"));
  EXPECT_THAT(ParseLine(with(14, "12345678901234567"), &e).message(),
              HasSubstr("C1: \"12345678901234567\" has more than 16 hex digits"));
  EXPECT_THAT(ParseLine("1\t2\t3", &e).message(), HasSubstr("line: has 3 fields, expected 40"));
  EXPECT_THAT(ParseLine(line + "\t5", &e).message(), HasSubstr("more than 40 fields"));
}

class ReaderTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::vector<std::string>& lines) {
    const std::string path = ::testing::TempDir() + "/reader_test_" + name;
    std::ofstream out(path);
    for (const std::string& l : lines) out << l << "\n";
    return path;
  }
  // Every batch of a reader, and its final status.
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

TEST_F(ReaderTest, RanksReadDisjointPartsThatCoverEverything) {
  std::vector<std::string> a, b;
  for (int i = 0; i < 250; ++i) a.push_back(Line(i % 2, i));
  for (int i = 250; i < 400; ++i) b.push_back(Line(i % 2, i));
  ReaderOptions options;
  options.files = {Write("a", a), Write("b", b)};
  options.batch_size = 32;
  options.world = 3;
  std::multiset<uint64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    options.rank = rank;
    auto [batches, status] = ReadAll(options);
    ASSERT_TRUE(status.ok()) << status;
    int total = 0;
    for (size_t i = 0; i < batches.size(); ++i) {
      if (i + 1 < batches.size()) {
        EXPECT_EQ(batches[i].size, 32);
      }
      total += batches[i].size;
      for (int r = 0; r < batches[i].size; ++r) seen.insert(batches[i].keys[r * kSparseSlots]);
    }
    EXPECT_EQ(total, (400 - rank + 2) / 3) << "rank " << rank;
  }
  // Slot 0's key identifies the line: each of the 400 exactly once.
  EXPECT_EQ(seen.size(), 400u);
  EXPECT_EQ(std::set<uint64_t>(seen.begin(), seen.end()).size(), 400u);
}

TEST_F(ReaderTest, BadLinesStopWithFileAndLineOrAreSkippedAndCounted) {
  std::vector<std::string> lines;
  for (int i = 0; i < 100; ++i) lines.push_back(Line(1, i));
  lines[41] = "1\tbroken";
  lines[77][0] = '7';
  ReaderOptions options;
  options.files = {Write("bad", lines)};
  options.batch_size = 10;
  auto [batches, status] = ReadAll(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), options.files[0] + ":42: line: has 2 fields, expected 40");
  int before = 0;
  for (const Batch& b : batches) before += b.size;
  EXPECT_EQ(before, 41);  // everything before the bad line was delivered

  options.bad_lines = BadLinePolicy::kSkip;
  auto reader = BatchReader::Open(options);
  ASSERT_TRUE(reader.ok());
  int total = 0;
  Batch b;
  while (*(*reader)->Next(&b)) total += b.size;
  EXPECT_EQ(total, 98);
  ReaderStats stats = (*reader)->stats();
  EXPECT_EQ(stats.examples, 98);
  EXPECT_EQ(stats.skipped, 2);
  ASSERT_EQ(stats.first_bad.size(), 2u);
  EXPECT_THAT(stats.first_bad[1], HasSubstr(":78: label: \"7\" is not 0 or 1"));

  options.files.push_back("/nonexistent/day_1.tsv");
  EXPECT_EQ(BatchReader::Open(options).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ReaderTest, HeldOutLinesAreReadOnlyByTheEvalPart) {
  std::vector<std::string> lines;
  for (int i = 0; i < 100; ++i) lines.push_back(Line(i % 2, i));
  ReaderOptions options;
  options.files = {Write("split", lines)};
  options.eval_every = 10;
  std::set<uint64_t> train, eval;
  for (auto part : {ReaderOptions::Part::kTrain, ReaderOptions::Part::kEval}) {
    options.part = part;
    auto [batches, status] = ReadAll(options);
    ASSERT_TRUE(status.ok());
    for (const Batch& b : batches) {
      for (int r = 0; r < b.size; ++r) {
        (part == ReaderOptions::Part::kEval ? eval : train).insert(b.keys[r * kSparseSlots]);
      }
    }
  }
  EXPECT_EQ(train.size(), 90u);
  EXPECT_EQ(eval.size(), 10u);
  Example e;
  ASSERT_TRUE(ParseLine(lines[9], &e).ok());  // line 9 is the first held out
  EXPECT_TRUE(eval.count(e.keys[0]));
}

TEST(AucTest, MatchesThePairwiseDefinition) {
  EXPECT_DOUBLE_EQ(*ExactAuc({0.1f, 0.9f}, {0, 1}), 1.0);
  EXPECT_DOUBLE_EQ(*ExactAuc({0.9f, 0.1f}, {0, 1}), 0.0);
  EXPECT_DOUBLE_EQ(*ExactAuc({0.5f, 0.5f}, {0, 1}), 0.5);
  EXPECT_FALSE(ExactAuc({0.5f}, {1}).ok());
  std::mt19937 rng(5);
  std::vector<float> scores(700), labels(700);
  for (size_t i = 0; i < scores.size(); ++i) {
    scores[i] = static_cast<float>(rng() % 50);  // many ties
    labels[i] = static_cast<float>(rng() % 3 == 0);
  }
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[i] == 1 && labels[j] == 0) {
        ++pairs;
        wins += scores[i] > scores[j] ? 1 : scores[i] == scores[j] ? 0.5 : 0;
      }
    }
  }
  EXPECT_NEAR(*ExactAuc(scores, labels), wins / pairs, 1e-12);
}

TEST(SyntheticTest, WritesParseableDataAndTheTeachersAuc) {
  const std::string path = ::testing::TempDir() + "/synthetic_test.tsv";
  SyntheticOptions options;
  options.rows = 20000;
  options.seed = 7;
  auto summary = WriteSynthetic(options, path);
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_GT(summary->positive_rate, 0.1);
  EXPECT_LT(summary->positive_rate, 0.5);
  EXPECT_GT(summary->teacher_auc, 0.7);
  EXPECT_LT(summary->teacher_auc, 0.95);
  auto sidecar = nlohmann::json::parse(*base::ReadTextFile(path + ".teacher.json"));
  EXPECT_DOUBLE_EQ(sidecar["teacher_auc"].get<double>(), summary->teacher_auc);
  EXPECT_EQ(sidecar["rows"].get<int64_t>(), 20000);

  ReaderOptions read;
  read.files = {path};
  auto reader = BatchReader::Open(read);
  ASSERT_TRUE(reader.ok());
  Batch b;
  int64_t rows = 0;
  double clicks = 0;
  std::set<uint64_t> slot0;
  for (;;) {
    absl::StatusOr<bool> more = (*reader)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    rows += b.size;
    for (int r = 0; r < b.size; ++r) {
      clicks += b.labels[r];
      slot0.insert(b.keys[r * kSparseSlots]);
    }
  }
  EXPECT_EQ(rows, 20000);
  EXPECT_DOUBLE_EQ(clicks / rows, summary->positive_rate);
  // Zipf: far fewer distinct ids than rows, but more than a handful.
  EXPECT_GT(slot0.size(), 500u);
  EXPECT_LT(slot0.size(), 15000u);

  // The same seed writes the same file.
  const std::string again = path + ".again";
  ASSERT_TRUE(WriteSynthetic(options, again).ok());
  EXPECT_EQ(*base::ReadTextFile(path), *base::ReadTextFile(again));
}

}  // namespace
}  // namespace heterps::data
