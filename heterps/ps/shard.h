// One parameter server's part of the tables: its shard of every sparse table (the keys whose
// base::ServerOf is this server), the dense tables it holds (table % num_servers), and the
// gradients pending for them until a commit (synchronous training: pending.h). A PsServer holds
// one; an InProcessPsClient one per server it plays, so that both keep, check point and commit
// their tables the same way.
//
//   Shard shard;
//   HETERPS_RETURN_IF_ERROR(shard.AddSparse(0, std::move(table)));
//   shard.pending().AddSparse(0, part, keys, grads);
//   HETERPS_RETURN_IF_ERROR(shard.Commit(PendingUpdates::DefaultThreads()));
//
// Thread safety: every method may be called concurrently; the tables it hands out are the
// tables' own (thread-safe), and live as long as the shard.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/dense_table.h"
#include "heterps/ps/pending.h"
#include "heterps/ps/sparse_table.h"

namespace heterps::ps {

class Shard {
 public:
  // Adds table `id`; AlreadyExists (naming the table) when the shard holds a table `id` of that
  // kind (a sparse and a dense table may share an id).
  absl::Status AddSparse(int id, std::unique_ptr<SparseTable> table);
  absl::Status AddDense(int id, std::unique_ptr<DenseTable> table);

  // Table `id`, or null when the shard has none of that kind.
  SparseTable* sparse(int id) const;
  DenseTable* dense(int id) const;
  // The ids of its tables, in increasing order.
  std::vector<int> sparse_ids() const;
  std::vector<int> dense_ids() const;
  int num_tables() const;
  // Its resident sparse rows' bytes now (SparseTable::Stats; locks every table's shards).
  int64_t sparse_memory_bytes() const;

  // Every table, for checkpoints, digests and commits.
  CheckpointTables Tables() const;

  // The gradients held until Commit.
  PendingUpdates& pending() { return pending_; }
  // Applies the pending gradients with `threads` threads (PendingUpdates::Apply).
  absl::Status Commit(int threads);

  // Every table, and every table added later, tracks its changed rows' bases from now on
  // (SparseTable::TrackDeltas, DenseTable::TrackDeltas: training across regions).
  void TrackDeltas();

 private:
  mutable absl::Mutex mu_;
  std::map<int, std::unique_ptr<SparseTable>> sparse_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::unique_ptr<DenseTable>> dense_ ABSL_GUARDED_BY(mu_);
  PendingUpdates pending_;
  bool tracking_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace heterps::ps
