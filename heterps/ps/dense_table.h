// A dense parameter table: contiguous blocks of floats (one per parameter tensor of a model,
// typically), each with its optimizer state and its own update count.
//
// Thread safety: every method may be called concurrently; a block is updated under its own lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "heterps/ps/optimizer.h"
#include "heterps/ps/table_types.h"

namespace heterps::ps {

class DenseTable {
 public:
  static absl::StatusOr<std::unique_ptr<DenseTable>> Create(const DenseTableOptions& options);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  int64_t block_size(int block) const { return blocks_[block]->size; }

  // Copies block `block` into `out` (block_size floats).
  absl::Status Pull(int block, absl::Span<float> out) const;
  // One optimizer update of the whole block with `grads` (block_size floats).
  absl::Status Push(int block, absl::Span<const float> grads);

  // The block's value, state and update count (for checkpoints and tests), and their restore.
  struct BlockData {
    std::vector<float> value, state;
    int64_t steps = 0;
  };
  absl::StatusOr<BlockData> Read(int block) const;
  absl::Status Write(int block, const BlockData& data);

  // Floats [offset, offset + count) of block `block` with their state (DenseSlice), and their
  // replacement; Write sets the block's update count to the slice's. InvalidArgument for a range
  // outside the block or a slice of the wrong size.
  absl::Status ReadSlice(int block, int64_t offset, int64_t count, DenseSlice* out) const;
  absl::Status WriteSlice(int block, int64_t offset, const DenseSlice& slice);

  // Deltas between regions, as SparseTable's (sparse_table.h), a block being a row: after
  // TrackDeltas, a block that a push or a slice's write changes keeps its value from before (its
  // base) until ExportDeltas sends the change; Write (a checkpoint's restore) forgets it.
  // ExportDeltas: the block's delta in `delta` where it is tracked and passes `threshold` (its
  // base moved on, deltas.h), else `delta` empty; FailedPrecondition before TrackDeltas.
  // AddDeltas: `delta` (the block's size) added to the value, and to the base where tracked; the
  // state and the update count untouched.
  void TrackDeltas();
  absl::Status ExportDeltas(int block, float threshold, std::vector<float>* delta);
  absl::Status AddDeltas(int block, absl::Span<const float> delta);
  // A GEO window, as SparseTable's ExportWindow and ApplyWindow: the block's delta with its base
  // left where it is; the window's merge `merged` with `own` what this table sent of the block
  // (both the block's size; own all zeros where it sent nothing).
  absl::Status ExportWindow(int block, float threshold, std::vector<float>* delta);
  absl::Status ApplyWindow(int block, absl::Span<const float> merged, absl::Span<const float> own);
  bool tracking_deltas() const { return tracking_.load(std::memory_order_acquire); }
  // The bases in a checkpoint (checkpoint.h), as SparseTable's: block `block`'s base (empty
  // where the block is not tracked), and its restore after the block's Write, tracking on (an
  // empty `base`: untracked). InvalidArgument for a bad block or size.
  absl::StatusOr<std::vector<float>> BaseOf(int block) const;
  absl::Status SetBase(int block, absl::Span<const float> base);

 private:
  struct Block {
    int64_t size = 0;
    mutable absl::Mutex mu;
    std::vector<float> value ABSL_GUARDED_BY(mu);
    std::vector<float> state ABSL_GUARDED_BY(mu);
    int64_t steps ABSL_GUARDED_BY(mu) = 0;
    std::vector<float> base ABSL_GUARDED_BY(mu);  // TrackDeltas: empty while unchanged
  };
  explicit DenseTable(const DenseTableOptions& options) : options_(options) {}
  absl::Status CheckBlock(int block, size_t floats) const;
  absl::Status CheckRange(int block, int64_t offset, int64_t count) const;

  // Keeps the block's value as its base unless it has one, while tracking; with b.mu held.
  void RecordBase(Block& b);
  // ExportDeltas (move_bases) and ExportWindow (not).
  absl::Status ExportChanges(int block, float threshold, std::vector<float>* delta,
                             bool move_bases);

  DenseTableOptions options_;
  std::vector<std::unique_ptr<Block>> blocks_;
  std::atomic<bool> tracking_{false};
};

}  // namespace heterps::ps
