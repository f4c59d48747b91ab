// The data reader against what bounds it: a raw scan of the same file for line ends (the least any
// reader must do), and the single-process training rate on the same data (what the reader feeds).
// Criteo-shaped data (the built-in layout) and the MovieLens-shaped multi-hot CSV, each written by
// the synthetic generator.
//
//   build/benchmarks/reader_bench [--rows N] [--batch B]
//
// Prints, per layout: the file's size, the raw scan's MB/s, the reader's lines/s and MB/s (one
// parsing thread, its consumer taking batches) and its ratio to the scan, and training samples/s
// (1 thread) with the reader's headroom over it; the reader with 2 and 4 parser threads against
// one (ReaderOptions::parser_threads). Then the same file gzip- and zstd-compressed
// (level 6 and 3, the tools' defaults): the reader's lines/s on each against the plain file's, and
// training samples/s on the gzip file against the plain file's. Then the binary form of the same
// lines (`heterps convert`, plain and zstd): the conversion's lines/s, the reader's lines/s on it
// against its own raw scan and the text reader's, and training on it.
#include <sys/stat.h>
#include <zlib.h>
#include <zstd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "benchmarks/bench_cli.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/example_file.h"
#include "heterps/data/reader.h"
#include "heterps/data/synthetic.h"
#include "heterps/worker/trainer.h"

namespace {

using heterps::benchmarks::CheckOk;

double Seconds(absl::Time start) { return absl::ToDoubleSeconds(absl::Now() - start); }

// Line ends in the file, read in 1 MiB blocks: the floor of any line reader.
double ScanSeconds(const std::string& path, int64_t* lines) {
  const absl::Time start = absl::Now();
  std::FILE* f = std::fopen(path.c_str(), "rb");
  std::vector<char> buffer(1 << 20);
  *lines = 0;
  size_t n = 0;
  while (f != nullptr && (n = std::fread(buffer.data(), 1, buffer.size(), f)) > 0) {
    for (const char* p = buffer.data();
         (p = static_cast<const char*>(std::memchr(p, '\n', buffer.data() + n - p))) != nullptr;
         ++p) {
      ++*lines;
    }
  }
  if (f != nullptr) std::fclose(f);
  return Seconds(start);
}

// Seconds the reader takes over `path`, and the samples it read.
double ReadSeconds(const std::string& path, const heterps::data::Schema& schema, int batch,
                   int64_t* samples, int parser_threads = 1) {
  heterps::data::ReaderOptions read;
  read.files = {path};
  read.schema = schema;
  read.batch_size = batch;
  read.parser_threads = parser_threads;
  const absl::Time start = absl::Now();
  auto reader = CheckOk("reader_bench", heterps::data::BatchReader::Open(read), "open");
  heterps::data::Batch b;
  *samples = 0;
  while (CheckOk("reader_bench", reader->Next(&b), "read")) *samples += b.size;
  return Seconds(start);
}

// Lines per second of the reader over `path`.
double ReaderRate(const std::string& path, const heterps::data::Schema& schema, int batch,
                  int parser_threads = 1) {
  int64_t samples = 0;
  const double seconds = ReadSeconds(path, schema, batch, &samples, parser_threads);
  return samples / seconds;
}

double FileMb(const std::string& path) {
  struct stat st {};
  stat(path.c_str(), &st);
  return static_cast<double>(st.st_size) / 1e6;
}

// `path` compressed into `path`.gz and `path`.zst.
void Compress(const std::string& path) {
  std::FILE* in = std::fopen(path.c_str(), "rb");
  gzFile gz = gzopen((path + ".gz").c_str(), "wb6");
  std::FILE* zst = std::fopen((path + ".zst").c_str(), "wb");
  ZSTD_CCtx* z = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(z, ZSTD_c_compressionLevel, 3);
  std::vector<char> buffer(1 << 20), out(ZSTD_CStreamOutSize());
  size_t n = 0;
  bool last = false;
  while (!last) {
    n = std::fread(buffer.data(), 1, buffer.size(), in);
    last = n < buffer.size();
    gzwrite(gz, buffer.data(), static_cast<unsigned>(n));
    ZSTD_inBuffer input{buffer.data(), n, 0};
    bool done = false;
    while (!done) {
      ZSTD_outBuffer output{out.data(), out.size(), 0};
      const size_t left =
          ZSTD_compressStream2(z, &output, &input, last ? ZSTD_e_end : ZSTD_e_continue);
      std::fwrite(out.data(), 1, output.pos, zst);
      done = last ? left == 0 : input.pos == input.size;
    }
  }
  ZSTD_freeCCtx(z);
  std::fclose(zst);
  gzclose(gz);
  std::fclose(in);
}

void Measure(const char* name, const std::string& model_path, int64_t rows, int batch) {
  auto spec = CheckOk("reader_bench", heterps::config::LoadModelSpec(model_path), "model");
  const std::string path = std::string("/tmp/reader_bench_") + name;
  heterps::data::SyntheticOptions synthetic;
  synthetic.rows = rows;
  synthetic.schema = spec.data;
  CheckOk("reader_bench", heterps::data::WriteSynthetic(synthetic, path).status(), "gen-data");
  const double mb = FileMb(path);

  int64_t lines = 0;
  ScanSeconds(path, &lines);  // warm the page cache
  const double scan = ScanSeconds(path, &lines);

  int64_t samples = 0;
  const double parse = ReadSeconds(path, spec.data, batch, &samples);
  const double plain_rate = samples / parse;

  heterps::worker::TrainOptions train;
  train.files = {path};
  train.batch_size = batch;
  train.eval_fraction = 0;
  auto result = CheckOk("reader_bench", heterps::worker::Train(spec, train), "train");

  std::printf(
      "%-18s %7.1f MB  scan %7.0f MB/s  reader %9.0f lines/s %6.0f MB/s (%.2f of the "
      "scan)  training %8.0f samples/s: reader %.1fx ahead\n",
      name, mb, mb / scan, samples / parse, mb / parse, scan / parse, result.samples_per_second,
      samples / parse / result.samples_per_second);

  std::printf("%-18s parser threads:", name);
  for (int threads : {2, 4}) {
    const double rate = ReaderRate(path, spec.data, batch, threads);
    std::printf(" %d: %9.0f lines/s (%.2fx one's)", threads, rate, rate / plain_rate);
  }
  std::printf(" on %u hardware threads\n", std::thread::hardware_concurrency());

  Compress(path);
  const double gz_rate = ReaderRate(path + ".gz", spec.data, batch);
  const double zst_rate = ReaderRate(path + ".zst", spec.data, batch);
  train.files = {path + ".gz"};
  auto gz_result = CheckOk("reader_bench", heterps::worker::Train(spec, train), "train gzip");
  std::printf(
      "%-18s gzip %.1f MB: reader %9.0f lines/s (%.2f of plain's %.0f); zstd %.1f MB: reader "
      "%9.0f lines/s (%.2f of plain's); training on the gzip file %8.0f samples/s (%.2f of "
      "plain's %.0f)\n",
      name, FileMb(path + ".gz"), gz_rate, gz_rate / plain_rate, plain_rate, FileMb(path + ".zst"),
      zst_rate, zst_rate / plain_rate, gz_result.samples_per_second,
      gz_result.samples_per_second / result.samples_per_second, result.samples_per_second);

  // The binary form (`heterps convert`): written once, then read with nothing to parse.
  heterps::data::ConvertOptions convert;
  convert.files = {path};
  convert.schema = spec.data;
  convert.out = path + ".hpx";
  absl::Time start = absl::Now();
  CheckOk("reader_bench", heterps::data::ConvertToExamples(convert).status(), "convert");
  const double convert_seconds = Seconds(start);
  ScanSeconds(convert.out, &lines);  // warm the page cache
  const double binary_scan = ScanSeconds(convert.out, &lines);
  const double binary_rate = ReaderRate(convert.out, spec.data, batch);
  convert.out = path + ".hpx.zst";
  CheckOk("reader_bench", heterps::data::ConvertToExamples(convert).status(), "convert zstd");
  const double binary_zst_rate = ReaderRate(convert.out, spec.data, batch);
  train.files = {path + ".hpx"};
  auto binary_result = CheckOk("reader_bench", heterps::worker::Train(spec, train), "train hpx");
  std::printf(
      "%-18s binary %.1f MB (converted at %.0f lines/s): reader %9.0f lines/s, %.0f MB/s (%.2f "
      "of the scan, %.1fx plain text's), zstd %.1f MB: %9.0f lines/s (%.1fx); training on it "
      "%8.0f samples/s (%.2f of plain's): reader %.1fx ahead\n",
      name, FileMb(path + ".hpx"), samples / convert_seconds, binary_rate,
      binary_rate * FileMb(path + ".hpx") / samples, binary_scan * binary_rate / samples,
      binary_rate / plain_rate, FileMb(path + ".hpx.zst"), binary_zst_rate,
      binary_zst_rate / plain_rate, binary_result.samples_per_second,
      binary_result.samples_per_second / result.samples_per_second,
      binary_rate / binary_result.samples_per_second);
  for (const char* suffix : {"", ".gz", ".zst", ".teacher.json", ".hpx", ".hpx.zst"}) {
    std::remove((path + suffix).c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 1000000;
  int batch = 2048;
  heterps::benchmarks::ParseFlagPairs("reader_bench", argc, argv,
                                      [&](const std::string& flag, const char* value) {
                                        if (flag == "--rows") {
                                          rows = std::atoll(value);
                                        } else if (flag == "--batch") {
                                          batch = std::atoi(value);
                                        } else {
                                          return false;
                                        }
                                        return true;
                                      });
  std::printf("reader_bench: %lld rows per layout, batches of %d, one parsing thread\n",
              static_cast<long long>(rows), batch);
  Measure("criteo.tsv", "examples/models/dlrm-small.yaml", rows, batch);
  Measure("movielens.csv", "examples/models/movielens-genres.yaml", rows, batch);
  return 0;
}
