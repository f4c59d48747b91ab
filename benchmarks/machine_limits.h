// What this machine can do at best, measured in the benchmark's own run, so that a benchmark can
// report its figures as fractions of limits taken on the same machine at the same time.
//
// Thread safety: each function runs its own threads and returns when they are done.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace heterps::benchmarks {

// Keys handed to each batch of Rate.
inline constexpr int kRateBatch = 4096;

// SplitMix64 step: a fast, seedable stream of well-mixed 64-bit values.
uint64_t SplitMix(uint64_t& state);

// Runs `batch(thread, keys)` on `threads` threads for `seconds`, each thread filling batches of
// kRateBatch keys from `draw` (its own state, seeded per thread); returns keys per second over all
// threads.
double Rate(int threads, double seconds, const std::function<uint64_t(uint64_t&)>& draw,
            const std::function<void(int, const std::vector<uint64_t>&)>& batch);

// The raw random-row gather rate, rows/s: `threads` threads copying uniformly random rows of
// `dim` floats out of a plain `rows` x `dim` float array, kRateBatch rows per batch.
double GatherRowsPerSecond(int64_t rows, int dim, int threads, double seconds);

// Single-precision matrix-product rate, FLOP/s: `threads` threads each multiplying its own
// (2048 x 512) by (512 x 512) matrices with Eigen, one thread per product.
double GemmFlopsPerSecond(int threads, double seconds);

// Resident set size of this process now, bytes.
int64_t RssBytes();
// The largest resident set size this process has had, bytes.
int64_t PeakRssBytes();

}  // namespace heterps::benchmarks
