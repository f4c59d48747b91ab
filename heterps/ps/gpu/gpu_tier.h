// The GPU tier of the embedding tables: hot rows in a GPU's memory, in front of the parameter
// servers (host memory, then SSD), with the optimizer applied on the device (docs/gpu.md, "Hot
// embeddings in GPU memory"). It wraps the PsClient of a stage replica:
//
//   HETERPS_ASSIGN_OR_RETURN(auto tier, GpuTier::Create(&grpc_client, device, {budget}));
//   HETERPS_RETURN_IF_ERROR(tier->AddTables({{0, table_options, rows}}));   // as the servers made
//   them
//   ... the stage pulls and pushes through *tier ...
//
// The window. Before a step the replica names the keys the step will touch (Prefetch): the tier
// sorts and de-duplicates them on the device, finds which are resident (lower_bound on the sorted
// resident keys), loads the missing rows, hottest first, from the servers (whole rows: value,
// optimizer state, update count; PsClient::ExportRows), and makes room by evicting the rows least
// recently used, writing back those that changed. Rows stay resident across windows while they
// are used.
//
// Ownership. A resident row is the tier's: pulls of it are served from the device, its gradients
// merged per key on the device and applied there by the table's optimizer, exactly as the
// servers would apply them (one update per key, the duplicates summed in position order). Keys
// that are not resident pass through to the servers. Flush writes every changed row back
// (PsClient::ImportRows); the replica flushes at the end of every round of steps (before a
// checkpoint or an evaluation, at a stop or a re-plan, and at the end of the job), so that what the
// servers hold, checkpoint and digest is what they would hold without the tier (bit for bit: the
// same sums in the same order, the same optimizer arithmetic). A tier must be the only writer of
// its rows: one replica of the stage that holds the embedding layers, whose accumulated part of a
// step is the step's only one for those rows, so that the tier applies it at once rather than at
// the commit it does not see.
//
// Looking ahead. After a window's Prefetch, the replica may name the next window's keys
// (Anticipate): the tier finds those of them that are not resident, leaves out the window's own
// misses that found no room (they pass through to the servers during the window), and asks the
// servers for their rows without waiting, so that the round trip runs while the window computes.
// The next Prefetch decides its loads exactly as without it (the same misses, evictions and
// slots) and takes each row it loads from the rows fetched ahead where it can, from the servers
// otherwise. A row fetched ahead is not taken once anything this tier sends the servers could
// have changed it after (or while) it was read: a key whose gradients passed through to the
// servers in the window before the fetch or since, a row written back since; so what is loaded
// is what a fetch at the Prefetch would have brought, bit for bit. That needs the tier to be its
// tables' only writer (see Ownership) and the window before's pushes to be waited for (a
// synchronous step's commit done) before Anticipate, as a replica's steps are. A fetch ahead that
// failed is dropped, and the Prefetch fetches those rows itself. The servers create the rows
// they are asked for, as a pull would: the rows of a window named ahead that never comes exist
// there at their initial values (which is what a pull of them would find).
//
// Thread safety: one thread at a time (a replica's compute thread).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "heterps/gpu/device.h"
#include "heterps/ps/bags.h"
#include "heterps/ps/forwarding_client.h"

namespace heterps::ps {

struct GpuTierOptions {
  // Device memory for resident rows (keys, values, optimizer state, bookkeeping), bytes, shared
  // by the tables (AddTables). Required (> 0).
  int64_t memory_budget_bytes = 0;
};

// A sparse table that gets rows on the device.
struct TierTable {
  int table = 0;
  SparseTableOptions options;  // as the servers created it (its dim and optimizer)
  int64_t rows = 0;            // the rows it can ever hold (a layer's `rows` times its slots), > 0
};

// Bytes a resident row of `options`' table takes on the device.
int64_t TierRowBytes(const SparseTableOptions& options);

// How a budget is split between tables (one place, for the tier and its tests): in proportion to
// the tables' whole sizes (rows x TierRowBytes), so that every table can hold the same share of
// its rows (all of them where the budget holds every table whole). The rows' bytes (capacity x
// TierRowBytes) sum to at most `budget_bytes`, whatever the tables' sizes and order. Capacities
// in the order of `tables`; 0 for a table whose share holds no row.
std::vector<int64_t> SplitTierBudget(int64_t budget_bytes, const std::vector<TierTable>& tables);

struct GpuTierStats {
  int64_t hits = 0, misses = 0;  // keys pulled: served from the device, or passed through
  int64_t loaded_rows = 0;       // rows brought to the device from the servers
  int64_t ahead_rows = 0;        // of those, fetched ahead (Anticipate) while a window ran
  int64_t fetched_ahead_rows = 0;  // rows Anticipate asked the servers for (used or not)
  int64_t written_back_rows = 0;
  int64_t evicted_rows = 0;
  int64_t resident_rows = 0;
  int64_t reserved_bytes = 0;  // device memory the tables' rows take: at most the budget
  int64_t host_to_device_bytes = 0, device_to_host_bytes = 0;  // over PCIe
};

// The per-target engine (tier_engine.inl, built for the host twin and for CUDA).
class TierEngine;

class GpuTier : public ForwardingPsClient {
 public:
  // `target` and `device` must outlive the tier. InvalidArgument without a budget; Unavailable
  // for a device this build cannot run.
  static absl::StatusOr<std::unique_ptr<GpuTier>> Create(PsClient* target, gpu::Device* device,
                                                         const GpuTierOptions& options);
  ~GpuTier() override;

  // `tables` get rows on the device, the budget split between them (SplitTierBudget). Call once,
  // before the first pull; tables not added pass through. InvalidArgument for a second call, a
  // table without rows or named twice, and a table whose share holds no row.
  absl::Status AddTables(const std::vector<TierTable>& tables);

  Ticket PullSparse(int table, absl::Span<const uint64_t> keys, absl::Span<float> values) override;
  Ticket PushSparse(int table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads) override;
  Ticket AccumulateSparse(int table, absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                          int part) override;
  absl::Status Prefetch(int table, absl::Span<const uint64_t> keys) override;
  // The next window's keys (see "Looking ahead"); after Prefetch. A call for a table the tier
  // does not hold goes to the target. Errors: the device's; a failed fetch shows at the next
  // Prefetch only as rows fetched again.
  absl::Status Anticipate(int table, absl::Span<const uint64_t> keys) override;
  absl::Status Flush() override;
  absl::Status Wait(Ticket ticket) override;
  // Between regions: a table's deltas are exported after the tier's rows are written back (Flush
  // first). Adding deltas to a table the tier holds, and exporting pending parts while it holds
  // any (the step's rows merged on the device are not the servers'), are FailedPrecondition: its
  // rows would go stale, or the parts would be short.
  absl::Status ExportDeltas(int table, float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas) override;
  absl::Status AddDeltas(int table, absl::Span<const uint64_t> keys,
                         absl::Span<const float> deltas) override;
  absl::Status ExportPending(PendingParts* out) override;
  // A GEO window, as ExportDeltas and AddDeltas: exported after a write-back; a merge for a
  // table the tier holds is FailedPrecondition.
  absl::Status ExportWindow(int table, float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas) override;
  absl::Status ApplyWindow(int table, absl::Span<const uint64_t> keys,
                           absl::Span<const float> merged, absl::Span<const float> own) override;

  // The device path (docs/gpu.md, "The tier feeds the stage"): the lookup and its backward with
  // the bags' vectors and their gradients in the tier's device memory, where a dense stage on the
  // same device reads and writes them, so that no row comes to the host and goes up again.
  //
  // LookupBags writes the bags' vectors (ps/bags.h: PoolBags' arithmetic and layout) into `out`
  // (device memory: row r at out + r * stride, the bags from `column`). The resident keys' rows
  // are read on the device; the others come from the servers and go up (as a pull's would). The
  // stream orders the writes before later work on the device; the call returns without waiting
  // for them where every key is resident.
  //
  // PushBags and AccumulateBags are LookupBags' backward: each key gets its bag's gradient, read
  // from `grads` (device memory, laid out as LookupBags' `out`; SpreadBagGrads' arithmetic), and
  // the keys' gradients are pushed as PushSparse and AccumulateSparse push host gradients (merged
  // per key in the order the keys come, applied on the device to resident rows, the rest to the
  // servers).
  //
  // InvalidArgument for bags that disagree with themselves (CheckBags), for a column past the
  // stride, and for `out` or `grads` not in the tier's device memory; FailedPrecondition for a
  // table the tier does not hold (AddTables); the servers' errors for the keys that pass through.
  absl::Status LookupBags(int table, const Bags& bags, float* out, int64_t stride, int64_t column);
  absl::Status PushBags(int table, const Bags& bags, const float* grads, int64_t stride,
                        int64_t column);
  absl::Status AccumulateBags(int table, const Bags& bags, const float* grads, int64_t stride,
                              int64_t column, int part);

  GpuTierStats stats() const;
  const gpu::Device& device() const { return *device_; }
  // Whether `table` gets rows on the device (AddTables).
  bool Holds(int table) const;

 private:
  GpuTier(PsClient* target, gpu::Device* device, const GpuTierOptions& options,
          std::unique_ptr<TierEngine> engine);
  // A ticket for a call the tier completed itself (negative: apart from the target's).
  Ticket Done(absl::Status status);
  // FailedPrecondition where the tier holds `table`: other regions' deltas would leave its rows
  // stale.
  absl::Status RefuseStale(int table) const;
  // The device path's checks: the table is the tier's, the bags agree with themselves, and the
  // floats their vectors take from `data` lie in the device's memory.
  absl::Status CheckBagRows(const char* what, int table, const Bags& bags, const float* data,
                            int64_t stride, int64_t column) const;

  gpu::Device* const device_;
  const GpuTierOptions options_;
  std::unique_ptr<TierEngine> engine_;
  bool added_ = false;
  int64_t reserved_bytes_ = 0;
  absl::Mutex mu_;
  std::map<Ticket, absl::Status> done_ ABSL_GUARDED_BY(mu_);
  Ticket next_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace heterps::ps
