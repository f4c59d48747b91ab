#include "heterps/ps/dense_table.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/ps/deltas.h"
#include "heterps/ps/sparse_table.h"

namespace heterps::ps {

absl::StatusOr<std::unique_ptr<DenseTable>> DenseTable::Create(const DenseTableOptions& options) {
  if (options.init_ranges.size() > options.block_sizes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dense table: ", options.init_ranges.size(),
                                                   " init ranges for ", options.block_sizes.size(),
                                                   " blocks"));
  }
  std::unique_ptr<DenseTable> table(new DenseTable(options));
  for (size_t b = 0; b < options.block_sizes.size(); ++b) {
    const int64_t size = options.block_sizes[b];
    if (size <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("dense table: block ", b, " has size ", size, "; it must be > 0"));
    }
    auto block = std::make_unique<Block>();
    block->size = size;
    absl::MutexLock lock(&block->mu);
    block->value.resize(size);
    const float range =
        b < options.init_ranges.size() ? options.init_ranges[b] : options.init_range;
    const uint64_t base = MixKey(MixKey(options.seed) ^ (b + 1));
    for (int64_t i = 0; i < size; ++i) {
      const double unit = static_cast<double>(MixKey(base + static_cast<uint64_t>(i)) >> 40) /
                          static_cast<double>(1ull << 24);
      block->value[i] = static_cast<float>((2 * unit - 1) * range);
    }
    block->state.resize(StateFloats(options.optimizer.kind) * size);
    InitState(options.optimizer, block->state.data(), static_cast<int>(size));
    table->blocks_.push_back(std::move(block));
  }
  return table;
}

absl::Status DenseTable::CheckBlock(int block, size_t floats) const {
  if (block < 0 || block >= num_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense table: no block ", block, " (there are ", num_blocks(), ")"));
  }
  if (floats != static_cast<size_t>(blocks_[block]->size)) {
    return absl::InvalidArgumentError(absl::StrCat("dense table: block ", block, " has ",
                                                   blocks_[block]->size, " floats, got ", floats));
  }
  return absl::OkStatus();
}

absl::Status DenseTable::Pull(int block, absl::Span<float> out) const {
  if (absl::Status s = CheckBlock(block, out.size()); !s.ok()) return s;
  const Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  std::copy(b.value.begin(), b.value.end(), out.begin());
  return absl::OkStatus();
}

absl::Status DenseTable::Push(int block, absl::Span<const float> grads) {
  if (absl::Status s = CheckBlock(block, grads.size()); !s.ok()) return s;
  Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  RecordBase(b);
  ++b.steps;
  ApplyUpdate(options_.optimizer, b.value.data(), b.state.data(), grads.data(),
              static_cast<int>(b.size), b.steps);
  return absl::OkStatus();
}

absl::StatusOr<DenseTable::BlockData> DenseTable::Read(int block) const {
  if (absl::Status s = CheckBlock(block, block >= 0 && block < num_blocks()
                                             ? static_cast<size_t>(blocks_[block]->size)
                                             : 0);
      !s.ok()) {
    return s;
  }
  const Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  return BlockData{b.value, b.state, b.steps};
}

absl::Status DenseTable::Write(int block, const BlockData& data) {
  if (absl::Status s = CheckBlock(block, data.value.size()); !s.ok()) return s;
  Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  if (data.state.size() != b.state.size()) {
    return absl::InvalidArgumentError(absl::StrCat("dense table: block ", block, " state has ",
                                                   data.state.size(), " floats, expected ",
                                                   b.state.size()));
  }
  b.value = data.value;
  b.state = data.state;
  b.base.clear();
  b.steps = data.steps;
  return absl::OkStatus();
}

absl::Status DenseTable::CheckRange(int block, int64_t offset, int64_t count) const {
  if (block < 0 || block >= num_blocks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense table: no block ", block, " (it has ", num_blocks(), ")"));
  }
  const int64_t size = blocks_[block]->size;
  if (offset < 0 || count < 0 || offset > size || count > size - offset) {
    return absl::InvalidArgumentError(absl::StrCat("dense table: block ", block, " has ", size,
                                                   " floats, not [", offset, ", ", offset + count,
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::Status DenseTable::ReadSlice(int block, int64_t offset, int64_t count,
                                   DenseSlice* out) const {
  HETERPS_RETURN_IF_ERROR(CheckRange(block, offset, count));
  const Block& b = *blocks_[block];
  const int k = StateFloats(options_.optimizer.kind);
  absl::MutexLock lock(&b.mu);
  out->value.assign(b.value.begin() + offset, b.value.begin() + offset + count);
  out->state.resize(static_cast<size_t>(k * count));
  for (int j = 0; j < k; ++j) {
    std::copy_n(b.state.begin() + j * b.size + offset, count, out->state.begin() + j * count);
  }
  out->steps = b.steps;
  return absl::OkStatus();
}

absl::Status DenseTable::WriteSlice(int block, int64_t offset, const DenseSlice& slice) {
  const int64_t count = static_cast<int64_t>(slice.value.size());
  HETERPS_RETURN_IF_ERROR(CheckRange(block, offset, count));
  const int k = StateFloats(options_.optimizer.kind);
  if (slice.state.size() != static_cast<size_t>(k * count)) {
    return absl::InvalidArgumentError(absl::StrCat("dense table: block ", block, ": a slice of ",
                                                   count, " floats with ", slice.state.size(),
                                                   " of state, expected ", k * count));
  }
  Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  RecordBase(b);
  std::copy(slice.value.begin(), slice.value.end(), b.value.begin() + offset);
  for (int j = 0; j < k; ++j) {
    std::copy_n(slice.state.begin() + j * count, count, b.state.begin() + j * b.size + offset);
  }
  b.steps = slice.steps;
  return absl::OkStatus();
}

void DenseTable::RecordBase(Block& b) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (tracking_.load(std::memory_order_acquire) && b.base.empty()) b.base = b.value;
}

void DenseTable::TrackDeltas() { tracking_.store(true, std::memory_order_release); }

absl::StatusOr<std::vector<float>> DenseTable::BaseOf(int block) const {
  if (block < 0 || block >= num_blocks()) return CheckBlock(block, 0);
  const Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  return b.base;
}

absl::Status DenseTable::SetBase(int block, absl::Span<const float> base) {
  if (block < 0 || block >= num_blocks() || !base.empty()) {
    HETERPS_RETURN_IF_ERROR(CheckBlock(block, base.size()));
  }
  TrackDeltas();
  Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  b.base.assign(base.begin(), base.end());
  return absl::OkStatus();
}

absl::Status DenseTable::ExportDeltas(int block, float threshold, std::vector<float>* delta) {
  return ExportChanges(block, threshold, delta, /*move_bases=*/true);
}

absl::Status DenseTable::ExportWindow(int block, float threshold, std::vector<float>* delta) {
  return ExportChanges(block, threshold, delta, /*move_bases=*/false);
}

absl::Status DenseTable::ExportChanges(int block, float threshold, std::vector<float>* delta,
                                       bool move_bases) {
  if (!tracking_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError("export of deltas from a table that does not track them");
  }
  HETERPS_RETURN_IF_ERROR(CheckRange(block, 0, 0));
  Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  delta->clear();
  if (b.base.empty()) return absl::OkStatus();
  delta->resize(b.size);
  bool caught_up = false;
  const bool passes =
      move_bases
          ? TakeDelta(b.value.data(), b.base.data(), b.size, threshold, delta->data(), &caught_up)
          : PassingDelta(b.value.data(), b.base.data(), b.size, threshold, delta->data());
  if (!passes) {
    delta->clear();  // the residual stays
  } else if (caught_up) {
    b.base.clear();
  }
  return absl::OkStatus();
}

absl::Status DenseTable::ApplyWindow(int block, absl::Span<const float> merged,
                                     absl::Span<const float> own) {
  HETERPS_RETURN_IF_ERROR(CheckBlock(block, merged.size()));
  HETERPS_RETURN_IF_ERROR(CheckBlock(block, own.size()));
  if (!tracking_.load(std::memory_order_acquire)) {
    return absl::FailedPreconditionError("a window applied to a table that does not track deltas");
  }
  Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  if (b.base.empty()) b.base = b.value;
  if (ApplyMerged(b.value.data(), b.base.data(), merged.data(), own.data(), b.size)) b.base.clear();
  return absl::OkStatus();
}

absl::Status DenseTable::AddDeltas(int block, absl::Span<const float> delta) {
  HETERPS_RETURN_IF_ERROR(CheckBlock(block, delta.size()));
  Block& b = *blocks_[block];
  absl::MutexLock lock(&b.mu);
  for (int64_t i = 0; i < b.size; ++i) b.value[i] += delta[i];
  for (size_t i = 0; i < b.base.size(); ++i) b.base[i] += delta[i];
  return absl::OkStatus();
}

}  // namespace heterps::ps
