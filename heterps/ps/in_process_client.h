// The parameter servers in this process: InProcessPsClient holds every server's shard of the
// tables itself (unit tests, the single process, profiling), with the semantics of ps_client.h.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/dense_table.h"
#include "heterps/ps/pending.h"
#include "heterps/ps/ps_client.h"
#include "heterps/ps/shard.h"
#include "heterps/ps/sparse_table.h"

namespace heterps::ps {

// Tables in this process, split over `num_servers` shards exactly as remote servers would hold
// them. Calls complete before they return; Wait reports their status. A table is created before
// any call names it (a call racing its table's creation may find it on some servers only).
class InProcessPsClient : public PsClient {
 public:
  explicit InProcessPsClient(int num_servers);

  // Adds sparse table `table` (one SparseTable per server; cold stores from `make_cold`, which
  // may return null when there is no memory budget) or dense table `table`.
  absl::Status CreateSparseTable(
      int table, const SparseTableOptions& options,
      const std::function<std::unique_ptr<ColdStore>(int server)>& make_cold);
  absl::Status CreateSparseTable(int table, const SparseTableOptions& options) override {
    return CreateSparseTable(table, options, nullptr);
  }
  absl::Status CreateDenseTable(int table, const DenseTableOptions& options) override;
  SparseTable* sparse(int table, int server);
  DenseTable* dense(int table);

  int num_servers() const override { return num_servers_; }
  Ticket PullSparse(int table, absl::Span<const uint64_t> keys, absl::Span<float> values) override;
  Ticket PushSparse(int table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads) override;
  Ticket PullDense(int table, int block, absl::Span<float> values) override;
  Ticket PushDense(int table, int block, absl::Span<const float> grads) override;
  Ticket AccumulateSparse(int table, absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                          int part) override;
  Ticket AccumulateDense(int table, int block, absl::Span<const double> grads, int part) override;
  absl::Status Commit() override;
  Ticket ExportRows(int table, absl::Span<const uint64_t> keys, RowBatch* out) override;
  Ticket ImportRows(int table, absl::Span<const uint64_t> keys, const RowBatch& rows) override;
  Ticket ExportDense(int table, int block, int64_t offset, int64_t count, DenseSlice* out) override;
  Ticket ImportDense(int table, int block, int64_t offset, const DenseSlice& slice) override;
  absl::Status Wait(Ticket ticket) override;
  absl::Status TrackDeltas() override;
  absl::Status ExportDeltas(int table, float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas) override;
  absl::Status AddDeltas(int table, absl::Span<const uint64_t> keys,
                         absl::Span<const float> deltas) override;
  absl::Status ExportDenseDeltas(int table, int block, float threshold,
                                 std::vector<float>* delta) override;
  absl::Status AddDenseDeltas(int table, int block, absl::Span<const float> delta) override;
  absl::Status ExportPending(PendingParts* out) override;
  absl::Status ExportWindow(int table, float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas) override;
  absl::Status ApplyWindow(int table, absl::Span<const uint64_t> keys,
                           absl::Span<const float> merged, absl::Span<const float> own) override;
  absl::Status ExportDenseWindow(int table, int block, float threshold,
                                 std::vector<float>* delta) override;
  absl::Status ApplyDenseWindow(int table, int block, absl::Span<const float> merged,
                                absl::Span<const float> own) override;

  // Every table of server `server`, for checkpoints.
  CheckpointTables Tables(int server);

 private:
  Ticket Done(absl::Status status);
  absl::StatusOr<std::vector<SparseTable*>> Sparse(int table);
  // Sums the gradients of each distinct key per server and hands them to `deliver`.
  absl::Status SumByServer(int table, absl::Span<const uint64_t> keys,
                           absl::Span<const float> grads,
                           const std::function<absl::Status(
                               int server, SparseTable* shard, const std::vector<uint64_t>& keys,
                               const std::vector<float>& sums)>& deliver);

  const int num_servers_;
  // Each server's tables and pending updates, as a PsServer holds its own.
  std::vector<std::unique_ptr<Shard>> shards_;
  absl::Mutex mu_;
  absl::flat_hash_map<Ticket, absl::Status> done_ ABSL_GUARDED_BY(mu_);
  Ticket next_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace heterps::ps
