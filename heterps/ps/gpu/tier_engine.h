// The GPU tier's engine, per target (tier_engine.inl built for the host twin and for CUDA). Not
// part of the public API: gpu_tier.h is.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "heterps/gpu/device.h"
#include "heterps/ps/gpu/gpu_tier.h"
#include "heterps/ps/ps_client.h"

namespace heterps::ps {

class TierEngine {
 public:
  virtual ~TierEngine() = default;
  // Room for `capacity` rows of `table` on the device.
  virtual absl::Status AddTable(int table, const SparseTableOptions& options, int64_t capacity) = 0;
  virtual bool Has(int table) const = 0;
  virtual absl::Status Prefetch(int table, absl::Span<const uint64_t> keys, PsClient* target) = 0;
  // GpuTier::Anticipate. `target` must outlive the engine (a fetch in flight is waited for by
  // the next Prefetch, or by the destructor).
  virtual absl::Status Anticipate(int table, absl::Span<const uint64_t> keys,
                                  PsClient* target) = 0;
  virtual absl::Status Pull(int table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                            PsClient* target) = 0;
  // accumulate: the pass-through keys go to the servers as part `part`.
  virtual absl::Status Push(int table, absl::Span<const uint64_t> keys,
                            absl::Span<const float> grads, bool accumulate, int part,
                            PsClient* target) = 0;
  // GpuTier::LookupBags and PushBags (accumulate: AccumulateBags), on checked arguments.
  virtual absl::Status LookupBags(int table, const Bags& bags, float* out, int64_t stride,
                                  int64_t column, PsClient* target) = 0;
  virtual absl::Status PushBags(int table, const Bags& bags, const float* grads, int64_t stride,
                                int64_t column, bool accumulate, int part, PsClient* target) = 0;
  virtual absl::Status Flush(PsClient* target) = 0;
  // The table's row width, floats (a table it Has).
  virtual int64_t dim(int table) const = 0;
  virtual GpuTierStats stats() const = 0;
};

// The baseline a tier's lookups are measured against (gpu_bench): `n` random rows of `dim` floats
// gathered out of a `rows`-row table in the device's memory, `repeats` times; rows per second.
absl::StatusOr<double> RawGatherRowsPerSecond(gpu::Device* device, int64_t rows, int64_t dim,
                                              int64_t n, int repeats);

namespace twin {
std::unique_ptr<TierEngine> NewTierEngine(gpu::Device* device);
absl::StatusOr<double> RawGather(gpu::Device* device, int64_t rows, int64_t dim, int64_t n,
                                 int repeats);
}  // namespace twin
namespace cuda {
// Unavailable in a build without CUDA.
absl::StatusOr<std::unique_ptr<TierEngine>> NewCudaTierEngine(gpu::Device* device);
absl::StatusOr<double> RawGather(gpu::Device* device, int64_t rows, int64_t dim, int64_t n,
                                 int repeats);
}  // namespace cuda

}  // namespace heterps::ps
