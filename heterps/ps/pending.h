// Gradients held on a server until a commit: how synchronous training applies a mini-batch's
// updates once, whatever the number of replicas that computed them.
//
//   PendingUpdates pending;
//   pending.AddSparse(0, /*part=*/1, keys, grads);   // from replica 1
//   pending.AddSparse(0, /*part=*/0, keys, grads);   // from replica 0
//   HETERPS_RETURN_IF_ERROR(pending.Apply(tables)); // one update per key and per dense block
//
// Each contribution belongs to a `part`: a node of the step's block tree (block_tree.h), which a
// holder of some of the step's blocks sends. Apply merges a key's (or a block element's)
// contributions up that tree, whatever order they arrived in, and then applies one optimizer
// update with the sum: the result does not depend on timing or on who computed which blocks, so a
// run is reproducible, a run restarted from a checkpoint ends where an uninterrupted one does, and
// a job equals the single process to the bit. Within one part, a sparse contribution's keys should
// be distinct (clients sum repeats first); a part that contributes twice to a table has the second
// added after the first.
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/table_types.h"

namespace heterps::ps {

class PendingUpdates {
 public:
  // grads: keys.size() * dim floats of sparse table `table`.
  void AddSparse(int table, int part, absl::Span<const uint64_t> keys,
                 absl::Span<const float> grads);
  // grads: the whole of block `block` of dense table `table`, in double: the parts are merged in
  // double and rounded to float once. InvalidArgument if an earlier contribution to the block had
  // another size.
  absl::Status AddDense(int table, int block, int part, absl::Span<const double> grads);

  // Applies every pending gradient to `tables` and forgets them all, even on error. Errors: a
  // table that `tables` lacks (NotFound), a table's own. A sparse table's keys are split by lock
  // shard into up to `threads` groups (one when there are few rows), each summed and applied on
  // its own thread at once; every key's sum and update are the same for any number of threads.
  absl::Status Apply(const CheckpointTables& tables, int threads = 1);

  // A copy of every contribution held now (they stay). Added to another server's PendingUpdates
  // with the same parts (AddSparse, AddDense), they make its commit what it would be here, to the
  // bit (how regions in lockstep share a step: docs/regions.md).
  PendingParts Export() const;

  bool empty() const;
  // The threads a commit on this host takes by default: its hardware threads, at most 8.
  static int DefaultThreads();
  // Bytes the pending gradients hold (keys and floats), for a server's memory limit.
  int64_t bytes() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  struct Rows {
    std::vector<uint64_t> keys;
    std::vector<float> grads;
  };
  mutable absl::Mutex mu_;
  std::atomic<int64_t> bytes_{0};
  std::map<int, std::map<int, Rows>> sparse_ ABSL_GUARDED_BY(mu_);  // table -> part -> rows
  std::map<std::pair<int, int>, std::map<int, std::vector<double>>> dense_
      ABSL_GUARDED_BY(mu_);  // (table, block) -> part -> gradient
};

}  // namespace heterps::ps
