#include "heterps/data/line_source.h"

#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/base/testing/fault_env.h"
#include "heterps/data/byte_sink.h"
#include "heterps/data/reader.h"

namespace heterps::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Gzip(const std::string& text) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string Zstd(const std::string& text) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const size_t n = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

class LineSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("heterps-line-source-", ::testing::UnitTest::GetInstance()->random_seed(),
                        "-", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(base::WriteFileAtomically(path, bytes).ok());
    return path;
  }

  // Every line of `path`, read with a buffer of `buffer` bytes.
  absl::StatusOr<std::vector<std::string>> Lines(const std::string& path, size_t buffer = 1 << 20) {
    absl::StatusOr<std::unique_ptr<ByteSource>> bytes = ByteSource::Open(path);
    if (!bytes.ok()) return bytes.status();
    LineSource lines(*std::move(bytes), buffer);
    std::vector<std::string> out;
    absl::string_view line;
    while (true) {
      absl::StatusOr<bool> more = lines.Next(&line);
      if (!more.ok()) return more.status();
      if (!*more) return out;
      out.emplace_back(line);
    }
  }

  std::filesystem::path dir_;
};

// Text of `n` lines of random lengths (some longer than a small buffer, some empty, some "\r").
std::string Text(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < n; ++i) {
    const int length = std::uniform_int_distribution<int>(0, 300)(rng);
    for (int k = 0; k < length; ++k) text += static_cast<char>('a' + (i + k) % 26);
    if (i % 17 == 3) text += '\r';
    text += '\n';
  }
  return text;
}

TEST_F(LineSourceTest, PlainGzipAndZstdGiveTheSameLinesWhateverTheBuffer) {
  const std::string text = Text(2000, 7) + "last line without a newline";
  const std::string plain = Write("a.tsv", text);
  const std::string gz = Write("a.tsv.gz", Gzip(text));
  const std::string zst = Write("a.tsv.zst", Zstd(text));
  const std::string misnamed = Write("b.tsv", Gzip(text));  // told by its bytes, not its name

  absl::StatusOr<std::vector<std::string>> want = Lines(plain);
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(want->size(), 2001u);
  EXPECT_EQ(want->back(), "last line without a newline");
  for (const std::string& path : {gz, zst, misnamed}) {
    for (size_t buffer : {size_t{16}, size_t{1000}, size_t{1} << 20}) {
      absl::StatusOr<std::vector<std::string>> got = Lines(path, buffer);
      ASSERT_TRUE(got.ok()) << path << ": " << got.status();
      EXPECT_EQ(*got, *want) << path << " with a buffer of " << buffer;
    }
  }
  EXPECT_EQ((*ByteSource::Open(plain))->compression(), Compression::kNone);
  EXPECT_EQ((*ByteSource::Open(gz))->compression(), Compression::kGzip);
  EXPECT_EQ((*ByteSource::Open(zst))->compression(), Compression::kZstd);
}

TEST_F(LineSourceTest, ConcatenatedMembersAndFramesAreOneStream) {
  const std::string a = Text(100, 1), b = Text(50, 2);
  absl::StatusOr<std::vector<std::string>> want = Lines(Write("ab.tsv", a + b));
  ASSERT_TRUE(want.ok());
  absl::StatusOr<std::vector<std::string>> gz = Lines(Write("ab.gz", Gzip(a) + Gzip(b)));
  ASSERT_TRUE(gz.ok()) << gz.status();
  EXPECT_EQ(*gz, *want);
  absl::StatusOr<std::vector<std::string>> zst = Lines(Write("ab.zst", Zstd(a) + Zstd(b)));
  ASSERT_TRUE(zst.ok()) << zst.status();
  EXPECT_EQ(*zst, *want);
}

TEST_F(LineSourceTest, EmptyFilesHaveNoLines) {
  for (const std::string& bytes : {std::string(), Gzip(""), Zstd("")}) {
    absl::StatusOr<std::vector<std::string>> got = Lines(Write("empty", bytes));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(got->empty());
  }
  absl::StatusOr<std::vector<std::string>> one = Lines(Write("one", Gzip("\n")));
  ASSERT_TRUE(one.ok());
  EXPECT_THAT(*one, ElementsAre(""));
}

TEST_F(LineSourceTest, TruncatedAndCorruptStreamsAreDataLossNamingTheFile) {
  const std::string text = Text(3000, 3);
  const std::string gz = Gzip(text), zst = Zstd(text);
  for (const auto& [name, bytes] :
       std::vector<std::pair<std::string, std::string>>{{"cut.gz", gz.substr(0, gz.size() / 2)},
                                                        {"cut.zst", zst.substr(0, zst.size() / 2)},
                                                        {"tail.gz", gz.substr(0, gz.size() - 4)}}) {
    const std::string path = Write(name, bytes);
    absl::StatusOr<std::vector<std::string>> got = Lines(path);
    ASSERT_FALSE(got.ok()) << name;
    EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss) << got.status();
    EXPECT_THAT(got.status().message(), HasSubstr(path));
  }
  std::string flipped = gz;
  flipped[flipped.size() / 2] ^= 0x55;
  flipped[flipped.size() / 2 + 1] ^= 0x55;
  absl::StatusOr<std::vector<std::string>> got = Lines(Write("flipped.gz", flipped));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("gzip"));
  std::string bad_zst = zst;
  bad_zst[6] ^= 0x7f;
  bad_zst[bad_zst.size() / 2] ^= 0x7f;
  got = Lines(Write("flipped.zst", bad_zst));
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("zstd"));
}

TEST_F(LineSourceTest, OpenNamesWhatIsWrong) {
  absl::StatusOr<std::unique_ptr<ByteSource>> missing = ByteSource::Open((dir_ / "nope").string());
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("nope: cannot open"));
  absl::StatusOr<std::unique_ptr<ByteSource>> directory = ByteSource::Open(dir_.string());
  EXPECT_THAT(directory.status().message(), HasSubstr("is a directory"));
}

TEST_F(LineSourceTest, GlobsExpandSortedAndSayWhenNothingMatches) {
  const std::string d2 = Write("day_2.gz", Gzip("x\n")), d0 = Write("day_0.gz", Gzip("x\n"));
  const std::string d1 = Write("day_1.gz", Gzip("x\n")), other = Write("other.tsv", "x\n");
  std::filesystem::create_directories(dir_ / "day_dir.gz");  // a directory is never a data file
  absl::StatusOr<std::vector<std::string>> files =
      ExpandDataPaths({(dir_ / "day_*.gz").string(), other});
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, ElementsAre(d0, d1, d2, other));

  absl::StatusOr<std::vector<std::string>> none = ExpandDataPaths({(dir_ / "week_*").string()});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("no file matches"));
  absl::StatusOr<std::vector<std::string>> directory = ExpandDataPaths({dir_.string()});
  EXPECT_THAT(directory.status().message(), HasSubstr("/*.gz"));
  EXPECT_FALSE(ExpandDataPaths({}).ok());
}

// The reader over compressed files: the same batches, line numbers and counts as over plain ones.
TEST_F(LineSourceTest, ReaderAndCountLinesReadCompressedFilesAsPlainOnes) {
  std::string good;
  for (int i = 0; i < 500; ++i) {
    good += absl::StrCat(i % 2, "\t", i, "\t", i * 3, "\n");
    if (i % 50 == 7) good += "\r\n";
  }
  Schema schema;
  schema.columns = {
      {"label", ColumnRole::kLabel}, {"x", ColumnRole::kDense}, {"c", ColumnRole::kSparse}};
  schema.columns[2].ids = IdFormat::kDecimal;
  const std::string bad = "1\t2\t3\n0\tfour\t5\n";
  ReaderOptions options;
  options.schema = schema;
  options.batch_size = 64;
  auto read = [&](std::vector<std::string> files) -> absl::StatusOr<std::vector<float>> {
    options.files = std::move(files);
    absl::StatusOr<std::unique_ptr<BatchReader>> reader = BatchReader::Open(options);
    if (!reader.ok()) return reader.status();
    std::vector<float> values;
    Batch batch;
    while (true) {
      absl::StatusOr<bool> more = (*reader)->Next(&batch);
      if (!more.ok()) return more.status();
      if (!*more) return values;
      for (int r = 0; r < batch.size; ++r) {
        values.push_back(batch.labels[r]);
        values.push_back(batch.dense[r]);
        values.push_back(static_cast<float>(batch.keys[r] % 1000));
      }
    }
  };
  const std::string plain = Write("g.tsv", good), gz = Write("g.gz", Gzip(good));
  const std::string zst = Write("g.zst", Zstd(good));
  absl::StatusOr<std::vector<float>> want = read({plain, plain});
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(want->size(), 1000u * 3);
  absl::StatusOr<std::vector<float>> got = read({gz, zst});
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, *want);
  EXPECT_EQ(*CountLines({gz, zst}), 1000);

  // A bad line in a compressed file is named by the file and its line, as in a plain one.
  const std::string bad_gz = Write("bad.gz", Gzip(bad));
  got = read({bad_gz});
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr(bad_gz + ":2: x:"));
  // A truncated file stops the reader with the file and the last line read.
  const std::string big = Gzip(good);
  const std::string cut = Write("cut.gz", big.substr(0, big.size() * 2 / 3));
  got = read({cut});
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(got.status().message(), HasSubstr("truncated"));
  EXPECT_THAT(got.status().message(), HasSubstr("(after line "));
  // Counting the lines (what a job does first) says the same, with the same line.
  const absl::StatusOr<int64_t> counted = CountLines({cut});
  ASSERT_FALSE(counted.ok());
  EXPECT_EQ(counted.status().message(), got.status().message());
}

// A file written by its name's compression reads back byte for byte: by ByteSource, and a gzip
// one by zlib's own gzread (what zcat uses) too.
TEST_F(LineSourceTest, SinksWriteWhatTheirNamesSay) {
  std::mt19937 rng(3);
  std::string text;
  while (text.size() < (3 << 20))
    absl::StrAppend(&text, rng() % 2, "\t", rng(), "\tab", rng() % 97, "\n");
  const std::vector<std::pair<std::string, Compression>> names = {{"w.tsv", Compression::kNone},
                                                                  {"w.tsv.gz", Compression::kGzip},
                                                                  {"w.tsv.zst", Compression::kZstd},
                                                                  {"w.zstd", Compression::kZstd}};
  for (const auto& [name, compression] : names) {
    const std::string path = (dir_ / name).string();
    absl::StatusOr<std::unique_ptr<ByteSink>> sink = ByteSink::Create(path);
    ASSERT_TRUE(sink.ok()) << sink.status();
    EXPECT_EQ((*sink)->compression(), compression);
    ASSERT_TRUE((*sink)->Append("").ok());
    for (size_t at = 0; at < text.size();) {  // pieces of every size
      const size_t n = std::min<size_t>(text.size() - at, rng() % 200000);
      ASSERT_TRUE((*sink)->Append(absl::string_view(text).substr(at, n)).ok());
      at += n;
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << "visible before Close: " << name;
    ASSERT_TRUE((*sink)->Close().ok()) << name;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      EXPECT_EQ(entry.path().string().find(".tmp-"), std::string::npos) << entry.path();
    }
    absl::StatusOr<std::unique_ptr<ByteSource>> source = ByteSource::Open(path);
    ASSERT_TRUE(source.ok()) << source.status();
    EXPECT_EQ((*source)->compression(), compression) << name;
    std::string back(text.size() + 1, '\0');
    size_t got = 0;
    while (true) {
      absl::StatusOr<size_t> n = (*source)->Read(back.data() + got, back.size() - got);
      ASSERT_TRUE(n.ok()) << n.status();
      if (*n == 0) break;
      got += *n;
    }
    back.resize(got);
    EXPECT_TRUE(back == text) << name;
    if (compression == Compression::kNone) {
      EXPECT_EQ(std::filesystem::file_size(path), text.size());
    } else {
      EXPECT_LT(std::filesystem::file_size(path), text.size() / 2) << name << " is not compressed";
    }
    if (compression == Compression::kGzip) {
      gzFile gz = gzopen(path.c_str(), "rb");
      ASSERT_NE(gz, nullptr);
      std::string zlib(text.size() + 1, '\0');
      const int n = gzread(gz, zlib.data(), static_cast<unsigned>(zlib.size()));
      gzclose(gz);
      ASSERT_EQ(n, static_cast<int>(text.size()));
      zlib.resize(n);
      EXPECT_TRUE(zlib == text);
    }
    std::filesystem::remove(path);
  }
  EXPECT_EQ(UncompressedName("a/train.tsv.gz"), "a/train.tsv");
  EXPECT_EQ(UncompressedName("train.tsv.zst"), "train.tsv");
  EXPECT_EQ(UncompressedName("train.tsv"), "train.tsv");
  EXPECT_EQ(UncompressedName(".gz"), ".gz");
}

// A sink given up without Close leaves nothing behind, and the old file as it was.
TEST_F(LineSourceTest, AnUnclosedSinkLeavesTheOldFile) {
  const std::string path = Write("old.tsv.gz", Gzip("1\t2\n"));
  {
    absl::StatusOr<std::unique_ptr<ByteSink>> sink = ByteSink::Create(path);
    ASSERT_TRUE(sink.ok());
    ASSERT_TRUE((*sink)->Append("0\t9\n").ok());
  }
  EXPECT_THAT(*Lines(path), ElementsAre("1\t2"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                          std::filesystem::directory_iterator()),
            1);
  absl::StatusOr<std::unique_ptr<ByteSink>> nowhere = ByteSink::Create("/nonexistent/dir/x.gz");
  ASSERT_FALSE(nowhere.ok());
  EXPECT_THAT(nowhere.status().message(), HasSubstr("/nonexistent/dir/x.gz: cannot create"));
}

// Files are written through the caller's Env: whichever change to the disk fails (the temporary
// file's creation, an append, the sync, the close, the rename), the old file stays as it was, no
// temporary file is left and the error names the file.
TEST_F(LineSourceTest, ASinkThatFailsAtAnyStepLeavesTheOldFile) {
  std::string text;
  for (int i = 0; text.size() < (3 << 20); ++i) text += absl::StrCat(i % 2, "\t", i, "\n");
  for (const bool gzip : {false, true}) {
    const std::string name = gzip ? "old.tsv.gz" : "old.tsv";
    bool fired = true;
    for (int n = 0; fired; ++n) {
      SCOPED_TRACE(absl::StrCat(name, " operation ", n));
      const std::string path = Write(name, gzip ? Gzip("1\t2\n") : "1\t2\n");
      base::testing::FaultEnv env(base::DefaultEnv());
      env.OnlyPaths(dir_);
      env.FailOperation(n, base::testing::FaultEnv::Fault::kDiskFull);
      absl::Status status;
      {
        absl::StatusOr<std::unique_ptr<ByteSink>> sink = ByteSink::Create(path, &env);
        status = sink.status();
        if (status.ok()) status = (*sink)->Append(text);
        if (status.ok()) status = (*sink)->Close();
      }
      fired = env.fired();
      EXPECT_EQ(status.ok(), !fired) << status;
      if (fired) {
        EXPECT_TRUE(absl::StartsWith(status.message(), path + ": ")) << status;
        // The temporary file is named only by the rename that failed to put it in place.
        if (!absl::StrContains(status.message(), "cannot rename")) {
          EXPECT_THAT(status.message(), Not(HasSubstr(".tmp-")));
        }
        EXPECT_THAT(*Lines(path), ElementsAre("1\t2"));
      } else {
        EXPECT_EQ(Lines(path)->size(),
                  static_cast<size_t>(std::count(text.begin(), text.end(), '\n')));
      }
      EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_),
                              std::filesystem::directory_iterator()),
                1);
      std::filesystem::remove(path);
      ASSERT_LT(n, 100);
    }
  }
}

// Every file a reader takes is opened through its Env.
TEST_F(LineSourceTest, ReadersOpenTheirFilesThroughTheEnv) {
  class CountingEnv : public base::EnvWrapper {
   public:
    using EnvWrapper::EnvWrapper;
    absl::StatusOr<std::unique_ptr<base::SequentialFile>> NewSequentialFile(
        const std::string& path) override {
      ++opened;
      return EnvWrapper::NewSequentialFile(path);
    }
    int opened = 0;
  };
  const std::string path = Write("count.tsv.gz", Gzip("1\t2\t3\n0\t4\t5\n"));
  CountingEnv env(base::DefaultEnv());
  absl::StatusOr<std::unique_ptr<ByteSource>> bytes = ByteSource::Open(path, &env);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  LineSource lines(*std::move(bytes));
  absl::string_view line;
  ASSERT_TRUE(*lines.Next(&line));
  EXPECT_EQ(line, "1\t2\t3");
  EXPECT_EQ(env.opened, 1);
  EXPECT_EQ(*CountLines({path}, false, &env), 2);
  EXPECT_EQ(env.opened, 3);  // IsExampleFile's look, then the count
  ReaderOptions options;
  options.files = {path};
  options.schema.columns = {
      {"label", ColumnRole::kLabel}, {"x", ColumnRole::kDense}, {"c", ColumnRole::kSparse}};
  options.schema.columns[2].ids = IdFormat::kDecimal;
  options.env = &env;
  absl::StatusOr<std::unique_ptr<BatchReader>> reader = BatchReader::Open(options);
  ASSERT_TRUE(reader.ok()) << reader.status();
  int samples = 0;
  Batch batch;
  while (*(*reader)->Next(&batch)) samples += batch.size;
  EXPECT_EQ(samples, 2);
  EXPECT_GT(env.opened, 3);
}

// A file whose bytes cannot be read (a failing disk) is DataLoss naming it, at the first bytes
// (which tell the compression) or later: not Unavailable, which a job restarts on.
TEST_F(LineSourceTest, AReadErrorIsTheDataLossOfTheFile) {
  class FailingEnv : public base::EnvWrapper {
   public:
    FailingEnv(base::Env* target, size_t good) : EnvWrapper(target), good_(good) {}
    absl::StatusOr<std::unique_ptr<base::SequentialFile>> NewSequentialFile(
        const std::string& path) override {
      class Failing : public base::SequentialFile {
       public:
        Failing(std::string path, size_t good) : path_(std::move(path)), good_(good) {}
        absl::StatusOr<size_t> Read(size_t n, char* scratch) override {
          if (good_ == 0) {
            return absl::UnavailableError(path_ + ": read failed: Input/output error");
          }
          n = std::min(n, good_);
          std::memset(scratch, 'x', n);
          good_ -= n;
          return n;
        }

       private:
        std::string path_;
        size_t good_;
      };
      return std::make_unique<Failing>(path, good_);
    }

   private:
    size_t good_;
  };
  const std::string path = Write("eio.tsv", "1\t2\n");
  for (const size_t good : {size_t{0}, size_t{2}, size_t{100}}) {
    SCOPED_TRACE(good);
    FailingEnv env(base::DefaultEnv(), good);
    absl::StatusOr<std::unique_ptr<ByteSource>> bytes = ByteSource::Open(path, &env);
    absl::Status status = bytes.status();
    if (status.ok()) {
      std::vector<char> buffer(1 << 10);
      while (status.ok()) {
        absl::StatusOr<size_t> n = (*bytes)->Read(buffer.data(), buffer.size());
        status = n.status();
        ASSERT_TRUE(!n.ok() || *n > 0) << "the end of a file that failed";
      }
    }
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), HasSubstr(path));
  }
}

}  // namespace
}  // namespace heterps::data
