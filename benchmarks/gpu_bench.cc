// What a GPU does for heterps, as ratios to limits this benchmark measures on the same device in
// the same run (docs/benchmarks.md, "GPU"; scripts/gpu-bench.sh runs it):
//
//   build/benchmarks/gpu_bench [--device cuda:0|twin:0] [--batch 8192] [--rows 10000000]
//                              [--seconds 2] [--out results.json]
//
// 1. The GEMM ceiling: FP32 n x n x n products through gpu::Blas (cuBLASLt; Eigen on the twin).
// 2. The fc layers: dlrm-small's MLPs (13-64-16 and 367-256-128-1), forward and backward, as
//    DenseChains at the batch size: their FLOP rate as a share of the ceiling (target 0.5). The
//    chains take and give host matrices (their inputs, outputs and gradients cross PCIe), so
//    the same layers' products are also timed on device-resident data: the forward (bias and
//    ReLU fused) and the input and weight gradients, through gpu::Blas as the chains call it.
// 3. The GPU tier: its hit rate against its budget (1%, 10% and 50% of the rows) on Zipf(1.05) and
//    uniform keys, a window a step of batch x 26 keys; its lookups' rows/s with every key resident,
//    against a raw gather of as many random rows out of the same table on the same device
//    (target 0.5).
//
// Prints a table and writes the figures as JSON.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "benchmarks/bench_cli.h"
#include "heterps/base/file.h"
#include "heterps/dense/gpu/device_backend.h"
#include "heterps/gpu/blas.h"
#include "heterps/gpu/device.h"
#include "heterps/ps/gpu/gpu_tier.h"
#include "heterps/ps/gpu/tier_engine.h"
#include "heterps/ps/in_process_client.h"
#include "nlohmann/json.hpp"

namespace heterps::benchmarks {
namespace {

constexpr char kProgram[] = "gpu_bench";

template <typename T>
T Check(absl::StatusOr<T> value, const char* what) {
  return CheckOk(kProgram, std::move(value), what);
}
void Check(const absl::Status& status, const char* what) { CheckOk(kProgram, status, what); }

struct Flags {
  std::string device = "cuda:0";
  int64_t batch = 8192;
  int64_t rows = 10000000;
  double seconds = 2;
  std::string out;
};

// Repeats `f` (device work) for about `seconds`; calls per second.
template <typename F>
double PerSecond(gpu::Device* device, double seconds, F f) {
  f();
  Check(device->Synchronize(), "warm-up");
  int64_t calls = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds)) {
    f();
    ++calls;
    if (calls % 4 == 0) Check(device->Synchronize(), "sync");
  }
  Check(device->Synchronize(), "sync");
  return calls / absl::ToDoubleSeconds(absl::Now() - start);
}

// The device's products: cuBLASLt (FP32) on a GPU, Eigen on the twin.
std::unique_ptr<gpu::Blas> NewBlas(gpu::Device* device) {
  return device->info().emulated ? gpu::NewTwinBlas(device)
                                 : Check(gpu::NewCudaBlas(device, false), "cuBLASLt");
}

// dlrm-small's MLPs, their first and last layers: what the fc figures time.
constexpr std::pair<const char*, const char*> kMlps[] = {{"bottom.0", "bottom.1"},
                                                         {"top.0", "top.2"}};

double GemmCeiling(gpu::Device* device, double seconds) {
  const int64_t n = device->info().emulated ? 512 : 4096;
  auto blas = NewBlas(device);
  auto a = Check(gpu::DeviceArray<float>::Make(device, n * n), "a");
  auto b = Check(gpu::DeviceArray<float>::Make(device, n * n), "b");
  auto c = Check(gpu::DeviceArray<float>::Make(device, n * n), "c");
  Check(device->Fill(a.data(), 0x3c, n * n * 4), "fill");  // about 0.012: no denormals, no zeros
  Check(device->Fill(b.data(), 0x3c, n * n * 4), "fill");
  const double calls = PerSecond(device, seconds, [&] {
    Check(blas->Gemm(false, false, n, n, n, 1, a.data(), n, b.data(), n, 0, c.data(), n), "gemm");
  });
  return calls * 2.0 * n * n * n;
}

// Forward and backward of the MLPs of dlrm-small at `batch`: FLOP/s.
double FcRate(const std::string& device_name, int64_t batch, double seconds) {
  auto spec = Check(config::LoadModelSpec("examples/models/dlrm-small.yaml"), "spec");
  auto backend = Check(dense::NewGpuBackend(device_name, {}), "backend");
  double flops = 0;
  std::vector<std::unique_ptr<dense::DenseChain>> chains;
  std::vector<dense::Matrix<float>> inputs, grads;
  std::vector<std::vector<std::vector<float>>> params, param_grads;
  for (const auto& [first, last] : kMlps) {
    const int f = spec.FindLayer(first), l = spec.FindLayer(last);
    chains.push_back(Check(backend->NewChain(spec, f, l), "chain"));
    for (int i = f; i <= l; ++i) flops += 6.0 * spec.layers[i].in * spec.layers[i].out * batch;
    inputs.push_back(dense::Matrix<float>::Random(batch, spec.layers[f].in));
    grads.push_back(dense::Matrix<float>::Random(batch, spec.layers[l].out));
    params.emplace_back();
    param_grads.emplace_back();
    for (int64_t size : chains.back()->block_sizes()) {
      params.back().emplace_back(size, 0.01f);
      param_grads.back().emplace_back(size, 0.0f);
    }
  }
  for (size_t s = 0; s < chains.size(); ++s) {
    std::vector<const float*> blocks;
    for (const auto& p : params[s]) blocks.push_back(p.data());
    Check(chains[s]->SetParameters(blocks), "parameters");
  }
  dense::Matrix<float> none(batch, 0), d_out;
  const auto step = [&] {
    for (size_t s = 0; s < chains.size(); ++s) {
      Check(chains[s]->Forward(0, inputs[s], none, true).status(), "forward");
      d_out = grads[s];
      std::vector<float*> blocks;
      for (auto& g : param_grads[s]) blocks.push_back(g.data());
      Check(chains[s]->Backward(0, &d_out, true, absl::MakeSpan(blocks)).status(), "backward");
    }
  };
  step();
  int64_t calls = 0;
  const absl::Time start = absl::Now();
  while (absl::Now() - start < absl::Seconds(seconds)) {
    step();
    ++calls;
  }
  return calls * flops / absl::ToDoubleSeconds(absl::Now() - start);
}

// The fc layers' products alone, on device memory: per layer y = x W^T + b (ReLU fused),
// dx = dy W and dW = dy^T x. FLOP/s.
double FcDeviceRate(gpu::Device* device, int64_t batch, double seconds) {
  auto spec = Check(config::LoadModelSpec("examples/models/dlrm-small.yaml"), "spec");
  std::vector<std::pair<int64_t, int64_t>> layers;  // (in, out)
  for (const auto& [first, last] : kMlps) {
    for (int i = spec.FindLayer(first); i <= spec.FindLayer(last); ++i) {
      layers.push_back({spec.layers[i].in, spec.layers[i].out});
    }
  }
  auto blas = NewBlas(device);
  struct Arrays {
    gpu::DeviceArray<float> x, w, b, y, dy, dx, dw;
  };
  std::vector<Arrays> arrays;
  double flops = 0;
  for (const auto& [in, out] : layers) {
    Arrays a;
    for (auto [array, n] : {std::pair{&a.x, batch * in},
                            {&a.w, out * in},
                            {&a.b, out},
                            {&a.y, batch * out},
                            {&a.dy, batch * out},
                            {&a.dx, batch * in},
                            {&a.dw, out * in}}) {
      *array = Check(gpu::DeviceArray<float>::Make(device, n), "fc arrays");
      Check(device->Fill(array->data(), 0x3c, n * sizeof(float)), "fill");
    }
    arrays.push_back(std::move(a));
    flops += 6.0 * in * out * batch;
  }
  const double calls = PerSecond(device, seconds, [&] {
    for (size_t i = 0; i < layers.size(); ++i) {
      const auto [in, out] = layers[i];
      Arrays& a = arrays[i];
      Check(blas->Linear(batch, out, in, a.x.data(), a.w.data(), a.b.data(), true, a.y.data()),
            "forward");
      Check(blas->Gemm(false, false, batch, in, out, 1, a.dy.data(), out, a.w.data(), in, 0,
                       a.dx.data(), in),
            "input gradient");
      Check(blas->Gemm(true, false, out, in, batch, 1, a.dy.data(), out, a.x.data(), in, 0,
                       a.dw.data(), in),
            "weight gradient");
    }
  });
  return calls * flops;
}

// Keys of one step: batch x 26, Zipf(1.05) over `rows` or uniform.
std::vector<uint64_t> Keys(int64_t n, int64_t rows, bool zipf, std::mt19937_64& rng) {
  std::vector<uint64_t> keys(n);
  std::uniform_real_distribution<double> unit(0, 1);
  for (uint64_t& k : keys) {
    if (zipf) {
      // Inverse of the continuous Zipf(s = 1.05) CDF over [1, rows].
      const double s = 1.05, h = (std::pow(rows, 1 - s) - 1) / (1 - s);
      k = static_cast<uint64_t>(std::pow(1 + (1 - s) * unit(rng) * h, 1 / (1 - s))) - 1;
    } else {
      k = rng() % rows;
    }
  }
  return keys;
}

nlohmann::json Tier(gpu::Device* device, int64_t batch, int64_t rows, double seconds) {
  nlohmann::json out = nlohmann::json::array();
  ps::SparseTableOptions table;
  table.dim = 16;
  table.seed = 3;
  const int64_t n = batch * 26;
  for (bool zipf : {true, false}) {
    for (double share : {0.01, 0.1, 0.5}) {
      ps::InProcessPsClient servers(1);
      Check(servers.CreateSparseTable(0, table), "table");
      const int64_t budget = static_cast<int64_t>(share * rows) * ps::TierRowBytes(table);
      auto tier = Check(ps::GpuTier::Create(&servers, device, {budget}), "tier");
      Check(tier->AddTables({{0, table, rows}}), "tier table");
      std::mt19937_64 rng(1);
      std::vector<float> values(n * table.dim);
      int64_t hits = 0, total = 0, loaded = 0;
      const int steps = 12, warm = 4;
      for (int step = 0; step < steps; ++step) {
        const std::vector<uint64_t> keys = Keys(n, rows, zipf, rng);
        const int64_t loaded_before = tier->stats().loaded_rows;
        Check(tier->Prefetch(0, keys), "prefetch");
        const ps::GpuTierStats before = tier->stats();
        Check(tier->Wait(tier->PullSparse(0, keys, absl::MakeSpan(values))), "pull");
        const ps::GpuTierStats after = tier->stats();
        if (step >= warm) {
          loaded += after.loaded_rows - loaded_before;
          hits += after.hits - before.hits;
          total += (after.hits + after.misses) - (before.hits + before.misses);
        }
      }
      out.push_back({{"keys", zipf ? "zipf" : "uniform"},
                     {"budget_share_of_rows", share},
                     {"hit_rate", total > 0 ? static_cast<double>(hits) / total : 0.0},
                     // Rows brought from the servers per key looked up: the traffic left.
                     {"loaded_per_key", total > 0 ? static_cast<double>(loaded) / total : 0.0}});
    }
  }
  return out;
}

struct TierRates {
  double pull = 0;    // pulls into host memory, rows/s
  double bags = 0;    // LookupBags (one-hot, 26 slots) into device rows, rows/s
  double gather = 0;  // the raw device gather, rows/s
};

// The tier's lookups with every key resident, rows/s, against the raw gather: pulled into host
// memory, and pooled into a dense input on the device (the device path).
TierRates TierRate(gpu::Device* device, int64_t batch, int64_t rows, double seconds) {
  ps::SparseTableOptions table;
  table.dim = 16;
  table.optimizer.kind = ps::OptimizerKind::kSgd;
  const int64_t n = batch * 26;
  const int64_t resident = std::min<int64_t>(rows, 4 * n);
  ps::InProcessPsClient servers(1);
  Check(servers.CreateSparseTable(0, table), "table");
  auto tier = Check(
      ps::GpuTier::Create(&servers, device, {(resident + 1) * ps::TierRowBytes(table)}), "tier");
  Check(tier->AddTables({{0, table, rows}}), "tier table");
  std::mt19937_64 rng(2);
  std::vector<uint64_t> all(resident);
  for (int64_t i = 0; i < resident; ++i) all[i] = static_cast<uint64_t>(i);
  Check(tier->Prefetch(0, all), "load");
  std::vector<uint64_t> keys(n);
  for (uint64_t& k : keys) k = rng() % resident;
  std::vector<float> values(n * table.dim);
  const double pulls = PerSecond(device, seconds, [&] {
    Check(tier->Wait(tier->PullSparse(0, keys, absl::MakeSpan(values))), "pull");
  });
  auto input = Check(gpu::DeviceArray<float>::Make(device, n * table.dim), "input");
  const ps::Bags bags{keys, {}, batch, 26, false};
  const double lookups = PerSecond(device, seconds, [&] {
    Check(tier->LookupBags(0, bags, input.data(), 26 * table.dim, 0), "lookup");
  });
  const double gather =
      Check(ps::RawGatherRowsPerSecond(device, resident, table.dim, n, 20), "raw gather");
  return {pulls * n, lookups * n, gather};
}

}  // namespace
}  // namespace heterps::benchmarks

int main(int argc, char** argv) {
  using namespace heterps;
  using namespace heterps::benchmarks;
  Flags flags;
  ParseFlagPairs(kProgram, argc, argv, [&](const std::string& name, const char* value) {
    if (name == "--device")
      flags.device = value;
    else if (name == "--batch")
      flags.batch = std::atoll(value);
    else if (name == "--rows")
      flags.rows = std::atoll(value);
    else if (name == "--seconds")
      flags.seconds = std::atof(value);
    else if (name == "--out")
      flags.out = value;
    else
      return false;
    return true;
  });
  auto device = Check(gpu::OpenDevice(flags.device, {}), "device");
  const gpu::DeviceInfo& info = device->info();
  std::fprintf(stderr, "gpu_bench on %s (%s)\n", info.name.c_str(), info.model.c_str());
  const double ceiling = GemmCeiling(device.get(), flags.seconds);
  const double fc = FcRate(flags.device, flags.batch, flags.seconds);
  const double fc_device = FcDeviceRate(device.get(), flags.batch, flags.seconds);
  const nlohmann::json hits = Tier(device.get(), flags.batch, flags.rows, flags.seconds);
  const TierRates rates = TierRate(device.get(), flags.batch, flags.rows, flags.seconds);
  const double tier_rows = rates.pull, bag_rows = rates.bags, gather_rows = rates.gather;
  nlohmann::json result = {{"device", info.name},
                           {"model", info.model},
                           {"emulated", info.emulated},
                           {"batch", flags.batch},
                           {"rows", flags.rows},
                           {"gemm_flops_per_second", ceiling},
                           {"fc_flops_per_second", fc},
                           {"fc_share_of_gemm", fc / ceiling},
                           {"fc_device_resident_flops_per_second", fc_device},
                           {"fc_device_resident_share_of_gemm", fc_device / ceiling},
                           {"tier_hit_rates", hits},
                           {"tier_rows_per_second", tier_rows},
                           {"raw_gather_rows_per_second", gather_rows},
                           {"tier_share_of_gather", tier_rows / gather_rows},
                           {"tier_bags_rows_per_second", bag_rows},
                           {"tier_bags_share_of_gather", bag_rows / gather_rows}};
  std::printf("| figure | value |\n|---|---:|\n");
  std::printf("| GEMM ceiling (FP32) | %.3g FLOP/s |\n", ceiling);
  std::printf(
      "| fc layers, batch %lld, as chains (host data in and out) | %.3g FLOP/s = %.2f of "
      "the ceiling |\n",
      static_cast<long long>(flags.batch), fc, fc / ceiling);
  std::printf(
      "| fc layers' products, batch %lld, device-resident data | %.3g FLOP/s = %.2f of the "
      "ceiling |\n",
      static_cast<long long>(flags.batch), fc_device, fc_device / ceiling);
  std::printf("| tier lookups, all resident | %.3g rows/s = %.2f of a raw gather (%.3g rows/s) |\n",
              tier_rows, tier_rows / gather_rows, gather_rows);
  std::printf(
      "| tier lookups into a dense input on the device, all resident | %.3g rows/s = %.2f of "
      "the raw gather |\n",
      bag_rows, bag_rows / gather_rows);
  for (const auto& h : hits) {
    std::printf(
        "| tier, %s keys, budget %.0f%% of %lld rows | hit rate %.3f, %.3f rows loaded per key |\n",
        h["keys"].get<std::string>().c_str(), 100 * h["budget_share_of_rows"].get<double>(),
        static_cast<long long>(flags.rows), h["hit_rate"].get<double>(),
        h["loaded_per_key"].get<double>());
  }
  if (!flags.out.empty()) {
    Check(base::WriteFileAtomically(flags.out, result.dump(1) + "\n"), "write");
  }
  return 0;
}
