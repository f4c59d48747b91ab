// Single-process training speed and memory against limits this benchmark measures on the same
// machine, in the same run (docs/benchmarks.md, "Training in one process").
//
//   build/benchmarks/train_bench [--model M.yaml] [--rows N] [--batch B] [--threads T]
//                                [--seconds S] [--markdown FILE]
//
// 1. Trains the model (default examples/models/dlrm-small.yaml) for one epoch on N rows of
//    synthetic data (generated once into the temporary directory), batch B, T threads, no
//    held-out part; samples/s, and the peak resident memory the training added to the process
//    against the bytes of the parameters, their optimizer state and one batch's activations per
//    thread. Target: <= 1.5x.
// 2. The machine's limits, T threads: single-precision matrix-product FLOP/s (Eigen) and the raw
//    random-row gather rate (rows of the model's embedding width out of a 10-million-row array).
// 3. The roofline bound on samples/s: the model's FLOPs per sample (forward + backward, 3x the
//    forward, docs/cost_model.md) at the product rate, and its rows per sample (each pulled once
//    and pushed once: two row accesses) at the gather rate; the bound is the lower of the two.
//    Target: measured samples/s >= 50% of the bound.
// 4. Where the time goes: one thread's per-layer forward + backward time on one batch
//    (Model::ProfileStep, median of 5).
//
// Prints a table; with --markdown (default docs/benchmarks.md) also replaces the train-bench
// section.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "benchmarks/bench_cli.h"
#include "benchmarks/machine_limits.h"
#include "benchmarks/markdown_section.h"
#include "heterps/base/host.h"
#include "heterps/cost/layer_cost.h"
#include "heterps/data/reader.h"
#include "heterps/data/synthetic.h"
#include "heterps/worker/model.h"
#include "heterps/worker/profile.h"
#include "heterps/worker/trainer.h"

namespace heterps::benchmarks {
namespace {

struct Flags {
  std::string model = "examples/models/dlrm-small.yaml";
  int64_t rows = 500'000;
  int batch = 2048;
  int threads = 2;
  double seconds = 3;
  std::string markdown = "docs/benchmarks.md";
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  ParseFlagPairs("train_bench", argc, argv, [&f](const std::string& flag, const char* value) {
    if (flag == "--model") {
      f.model = value;
    } else if (flag == "--rows") {
      f.rows = std::atoll(value);
    } else if (flag == "--batch") {
      f.batch = std::atoi(value);
    } else if (flag == "--threads") {
      f.threads = std::atoi(value);
    } else if (flag == "--seconds") {
      f.seconds = std::atof(value);
    } else if (flag == "--markdown") {
      f.markdown = value;
    } else {
      return false;
    }
    return true;
  });
  if (f.rows < 1 || f.batch < 1 || f.threads < 1 || f.seconds <= 0) {
    std::fprintf(stderr, "train_bench: bad flags\n");
    std::exit(2);
  }
  return f;
}

template <typename T>
auto Check(T value, const char* what) {
  if constexpr (std::is_same_v<T, absl::Status>) {
    CheckOk("train_bench", value, what);
  } else {
    return CheckOk("train_bench", std::move(value), what);
  }
}

// Floats of activation per sample that a training step keeps: every layer's output.
int64_t ActivationFloats(const config::ModelSpec& spec) {
  int64_t floats = 0;
  for (const config::LayerSpec& layer : spec.layers) {
    if (layer.kind == config::LayerKind::kInput) {
      floats += layer.dense_features;
    } else if (layer.kind == config::LayerKind::kEmbedding) {
      floats += layer.slots * layer.dim;
    } else {
      floats += layer.dense_width_out;
    }
  }
  return floats;
}

// Median forward + backward seconds of each layer over 5 batches (after one to warm up).
std::vector<std::pair<std::string, double>> LayerTimes(const config::ModelSpec& spec,
                                                       const std::string& data, int batch_size) {
  data::ReaderOptions read;
  read.files = {data};
  read.batch_size = batch_size;
  std::shared_ptr<data::BatchReader> reader = Check(data::BatchReader::Open(read), "reader");
  worker::ProfileOptions options;
  options.warmup = 1;
  options.repeats = 5;
  const worker::HostProfile profile =
      Check(worker::ProfileLayers(
                spec, [reader](data::Batch* batch) { return reader->Next(batch); }, options),
            "profile");
  return profile.medians;
}

}  // namespace
}  // namespace heterps::benchmarks

int main(int argc, char** argv) {
  using namespace heterps;
  using namespace heterps::benchmarks;
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const Flags f = ParseFlags(argc, argv);
  const config::ModelSpec spec = Check(config::LoadModelSpec(f.model), "model spec");

  // The data, made once.
  const std::string data = (std::filesystem::temp_directory_path() /
                            absl::StrCat("heterps-train-bench-rows", f.rows, ".tsv"))
                               .string();
  if (!std::filesystem::exists(data + ".teacher.json")) {
    data::SyntheticOptions options;
    options.rows = f.rows;
    Check(data::WriteSynthetic(options, data), "synthetic data");
  }

  // 1. Training.
  worker::TrainOptions train;
  train.files = {data};
  train.batch_size = f.batch;
  train.threads = f.threads;
  train.eval_fraction = 0;
  const int64_t rss_before = RssBytes();
  const worker::TrainResult result = Check(worker::Train(spec, train), "train");
  const double added = static_cast<double>(result.peak_rss_bytes - rss_before);
  const double activations =
      4.0 * static_cast<double>(ActivationFloats(spec)) * f.batch * f.threads;
  const double needed = static_cast<double>(result.parameter_bytes) + activations;
  std::fprintf(stderr, "train: %.0f samples/s, %.1f MB added, %.1f MB needed\n",
               result.samples_per_second, added / 1e6, needed / 1e6);

  // 2. Limits.
  double row_dim = 16, flops = 0, rows = 0;
  for (const cost::LayerCost& c : cost::DeriveLayerCosts(spec, f.batch)) {
    flops += 3 * c.fwd_flops;
    rows += c.rows;
    if (c.row_bytes > 0) row_dim = c.row_bytes / 4;
  }
  const double gemm = GemmFlopsPerSecond(f.threads, f.seconds);
  const double gather =
      GatherRowsPerSecond(10'000'000, static_cast<int>(row_dim), f.threads, f.seconds);
  std::fprintf(stderr, "limits: %.3g FLOP/s, %.3g rows/s\n", gemm, gather);

  // 3. Roofline.
  const double compute_bound = gemm / flops, lookup_bound = gather / (2 * rows);
  const double bound = std::min(compute_bound, lookup_bound);

  // 4. Layers.
  const auto layers = LayerTimes(spec, data, f.batch);
  double total = 0;
  for (const auto& [name, seconds] : layers) total += seconds;

  std::string table = absl::StrFormat(
      "| measure | figure | against | ratio | target |\n"
      "|---|---|---|---|---|\n"
      "| matrix product, %d threads | %.3g FLOP/s | | | |\n"
      "| random-row gather, %d threads | %.3g rows/s | | | |\n"
      "| compute bound: %.3g FLOP per sample | %.3g samples/s | | | |\n"
      "| lookup bound: %.0f row accesses per sample | %.3g samples/s | | | |\n"
      "| training, %d threads | %.3g samples/s | roofline, %.3g samples/s | %.2f | >= 0.50 |\n"
      "| peak memory added by training | %.1f MB | parameters with optimizer state %.1f MB + "
      "activations %.1f MB | %.2f | <= 1.50 |\n",
      f.threads, gemm, f.threads, gather, flops, compute_bound, 2 * rows, lookup_bound, f.threads,
      result.samples_per_second, bound, result.samples_per_second / bound, added / 1e6,
      result.parameter_bytes / 1e6, activations / 1e6, added / needed);
  std::string layer_table = "| layer | ms per batch (1 thread) | share |\n|---|---:|---:|\n";
  for (const auto& [name, seconds] : layers) {
    absl::StrAppendFormat(&layer_table, "| %s | %.2f | %.0f%% |\n", name, 1e3 * seconds,
                          100 * seconds / total);
  }
  absl::StrAppendFormat(&layer_table, "| total | %.2f | |\n", 1e3 * total);
  const std::string section = absl::StrFormat(
      "```\nbuild/benchmarks/train_bench --rows %d --batch %d --threads %d --seconds %g\n```\n\n"
      "On %s: %s, one epoch of %d synthetic rows (%d embedding rows held at the end), batch %d, "
      "%d threads:\n\n%s\nWhere one thread's step goes (median of 5 batches):\n\n%s",
      f.rows, f.batch, f.threads, f.seconds, base::HostDescription(), spec.name, f.rows,
      result.sparse_rows, f.batch, f.threads, table, layer_table);
  std::printf("%s", section.c_str());
  if (!f.markdown.empty()) {
    const absl::Status written = ReplaceSection(f.markdown, "train-bench", section);
    if (!written.ok()) {
      std::fprintf(stderr, "train_bench: %s\n", std::string(written.message()).c_str());
      return 1;
    }
  }
  return 0;
}
