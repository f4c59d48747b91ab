#include "benchmarks/machine_limits.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "Eigen/Core"
#include "absl/time/clock.h"

namespace heterps::benchmarks {

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rate(int threads, double seconds, const std::function<uint64_t(uint64_t&)>& draw,
            const std::function<void(int, const std::vector<uint64_t>&)>& batch) {
  std::atomic<int64_t> keys{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  const absl::Time start = absl::Now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      uint64_t state = 1234567 + 7919 * t;
      std::vector<uint64_t> batch_keys(kRateBatch);
      while (!stop.load(std::memory_order_relaxed)) {
        for (uint64_t& k : batch_keys) k = draw(state);
        batch(t, batch_keys);
        keys += kRateBatch;
      }
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (std::thread& w : workers) w.join();
  return static_cast<double>(keys.load()) / absl::ToDoubleSeconds(absl::Now() - start);
}

double GatherRowsPerSecond(int64_t rows, int dim, int threads, double seconds) {
  std::vector<float> array(static_cast<size_t>(rows) * dim, 1.0f);
  std::vector<std::vector<float>> out(threads, std::vector<float>(kRateBatch * dim));
  const auto uniform = [rows](uint64_t& s) { return SplitMix(s) % static_cast<uint64_t>(rows); };
  return Rate(threads, seconds, uniform, [&](int t, const std::vector<uint64_t>& keys) {
    float* o = out[t].data();
    for (uint64_t k : keys) {
      std::copy_n(array.data() + k * dim, dim, o);
      o += dim;
    }
  });
}

double GemmFlopsPerSecond(int threads, double seconds) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  constexpr int kM = 2048, kK = 512, kN = 512;
  std::atomic<int64_t> products{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  const absl::Time start = absl::Now();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      const Matrix a = Matrix::Random(kM, kK), b = Matrix::Random(kK, kN);
      Matrix c(kM, kN);
      while (!stop.load(std::memory_order_relaxed)) {
        c.noalias() = a * b;
        ++products;
      }
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (std::thread& w : workers) w.join();
  return 2.0 * kM * kK * kN * static_cast<double>(products.load()) /
         absl::ToDoubleSeconds(absl::Now() - start);
}

int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

int64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace heterps::benchmarks
