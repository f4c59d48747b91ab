// A sparse parameter table: 64-bit keys to rows of `dim` floats plus their optimizer state, held
// in memory up to a budget and, beyond it, in a cold store on disk (the SSD tier).
//
// Rows are created on first pull (or push) by an initializer that depends only on the table's
// seed and the key, so that every run and every shard layout starts from the same values. A push
// applies the server-side optimizer (optimizer.h) to the row; each row counts its own updates
// (Adam's step). Each row also records when it was last touched and how often.
//
// Memory: `lock_shards` shards, one mutex each, keys spread by a mixing hash. A shard keeps its
// rows in arena blocks of fixed-size slots, each a 20-byte record (key, last access, update and
// access counts) followed by [value | state] floats (blocks of 512 slots, then each twice the
// last, then whole huge pages of at least 16384 slots), and an open-addressing index of 4-byte
// entries (8 hash bits and a 24-bit slot number; so at most 2^24 - 1 resident rows per shard),
// all on huge pages where the kernel allows it. A batch is served shard by shard, prefetching
// ahead (docs/ps.md). When a shard's resident rows exceed its share of `memory_budget_bytes`, its
// least recently used rows (by a logical clock of accesses) move to the cold store until the
// shard is at 90% of its share; touching a cold row brings it back (a batch's cold rows of one lock
// shard together, in one read of the cold store). A row brought back keeps its copy in the store,
// stale from its next update on and never read while the row is resident (the index wins); its
// next spill overwrites it. So a miss costs the store one read and a spill one write, and nothing
// is deleted (the store holds at most every row of the table). The table answers exactly as if
// every row were in memory (tested against a reference model).
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "heterps/base/mix_key.h"
#include "heterps/ps/cold_store.h"
#include "heterps/ps/optimizer.h"
#include "heterps/ps/table_types.h"

namespace heterps::ps {

// A row as stored: its value, its optimizer state, and its statistics.
struct RowData {
  std::vector<float> value;  // dim floats
  std::vector<float> state;  // StateFloats(optimizer) * dim floats
  int64_t steps = 0;         // updates applied
  int64_t accesses = 0;      // pulls and pushes that touched the row
};

struct SparseTableStats {
  int64_t memory_rows = 0;
  int64_t memory_bytes = 0;  // bytes of resident row slots (value, state, statistics)
  int64_t cold_rows = 0;     // rows in the cold store alone (not counting resident rows' copies)
  int64_t created = 0;  // rows created by the initializer
  int64_t hits = 0;     // accesses served from memory
  int64_t misses = 0;   // accesses that brought a row back from the cold store
  int64_t spills = 0;   // rows moved memory -> cold store
  // The most rows one lock shard has held at once: its share of the budget in rows, plus the one
  // a touch creates before the spill it causes.
  int64_t shard_rows_peak = 0;
};

class SparseTable {
 public:
  // `cold` is required when a memory budget is set. InvalidArgument for bad
  // options.
  static absl::StatusOr<std::unique_ptr<SparseTable>> Create(const SparseTableOptions& options,
                                                             std::unique_ptr<ColdStore> cold);
  ~SparseTable();

  int dim() const { return options_.dim; }
  const SparseTableOptions& options() const { return options_; }

  // values: keys.size() * dim floats, row i's value at values[i * dim]. Creates
  // missing rows.
  absl::Status Pull(absl::Span<const uint64_t> keys, absl::Span<float> values);
  // grads: keys.size() * dim floats. Applies them in order (a key given twice
  // is updated twice).
  absl::Status Push(absl::Span<const uint64_t> keys, absl::Span<const float> grads);

  // The row of `key` in either tier, or nullopt if it does not exist. Creates
  // nothing and does not count as an access.
  absl::StatusOr<std::optional<RowData>> Lookup(uint64_t key);
  // The whole rows of `keys` (created as a pull creates them when missing; every key counts as an
  // access), in the order of `keys`.
  absl::Status Export(absl::Span<const uint64_t> keys, RowBatch* out);
  // Replaces the rows of `keys` with `rows` (shaped as Export's); their access counts stay.
  absl::Status Import(absl::Span<const uint64_t> keys, const RowBatch& rows);
  // Removes every row from both tiers (cumulative counters stay); the store first, so that where
  // it fails the table is unchanged.
  absl::Status Clear();
  // Writes a row (replacing any), e.g. when a checkpoint is loaded.
  absl::Status Insert(uint64_t key, const RowData& row);
  // Visits every row once, from the tier that holds it (memory rows in no particular order, then
  // cold rows in key order). The table must not change meanwhile: a row brought back between the
  // two passes would be visited in neither.
  absl::Status ForEachRow(const std::function<absl::Status(uint64_t, const RowData&)>& visit);

  SparseTableStats Stats() const;

  // Deltas between regions (docs/regions.md, GEO). After TrackDeltas, every row that a push or an
  // import changes keeps its value from before the change (its base) until ExportDeltas sends the
  // change; a row no change has touched since it was sent is not tracked (its delta is zero).
  // Tracking stays on; Clear forgets every base (a loaded checkpoint is where every region is).
  void TrackDeltas();
  bool tracking_deltas() const { return tracking_.load(std::memory_order_acquire); }
  // The tracked rows whose change `delta = value - base` passes `threshold`, in key order: each
  // row's key and delta (dim floats), appended to `keys` and `deltas`. A row passes where
  // threshold is 0 (every tracked row), or where its largest |delta| exceeds threshold times its
  // base's largest |value| (Gaia's significance; any change of a zero base). A sent row's base
  // moves on by its delta (base + delta, in float: where that is not the value, the rounding stays
  // tracked as its residual, so that nothing is lost); a row that does not pass keeps its base,
  // its whole change the residual. The deltas are worked out before any base moves: on an error
  // nothing is sent and nothing moved. FailedPrecondition before TrackDeltas; ResourceExhausted
  // where more than `max_rows` (> 0) rows pass (one answer's worth); the cold store's errors. One
  // export at a time per table (pushes and adds may run meanwhile).
  absl::Status ExportDeltas(float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas, int64_t max_rows = 0);
  // Adds `deltas` (keys.size() * dim floats) to the rows of `keys` (created as a pull creates
  // them when missing), and to their bases where they are tracked, so that a row's own change
  // stays what it was (to float rounding: both sums are rounded). The optimizer's state and the
  // update counts are untouched. A key given twice gets both.
  absl::Status AddDeltas(absl::Span<const uint64_t> keys, absl::Span<const float> deltas);
  // A GEO window (docs/regions.md), whose merge makes every region's bases the same to the bit.
  // ExportWindow: ExportDeltas with every base left where it is. ApplyWindow: the window's merge
  // `merged` (what every region adds to the base it shares) for the rows of `keys` (sorted,
  // distinct; created as a pull creates them when missing), with `own` (as many floats) what this
  // table sent of each in the window's export (zeros for a row it did not send): each row's base
  // becomes base + merged, and its value that base plus what the table has not sent yet (its
  // changes since the export, a row below the threshold's whole change), deltas.h's
  // ApplyMerged; a row left with nothing to send is tracked no more. The optimizer's state and
  // the update counts are untouched. Between the two, pushes may go on (their changes are the
  // next window's); another export before the apply would send the window's changes again.
  absl::Status ExportWindow(float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas, int64_t max_rows = 0);
  absl::Status ApplyWindow(absl::Span<const uint64_t> keys, absl::Span<const float> merged,
                           absl::Span<const float> own);
  // Rows tracked now.
  int64_t tracked_rows() const;
  // The bases in a checkpoint (checkpoint.h), so that a region's job restarted from it sends
  // what it would have sent: every tracked row's key and base (dim floats), once each, in no
  // particular order (the table must not change meanwhile; the visit's error ends the walk).
  // RestoreBases: every base forgotten and tracking on; SetBase then tracks `key` at `base` (dim
  // floats), its row being wherever the checkpoint put it.
  absl::Status ForEachBase(
      const std::function<absl::Status(uint64_t key, absl::Span<const float> base)>& visit) const;
  void RestoreBases();
  void SetBase(uint64_t key, absl::Span<const float> base);

  // The lock shard of `key`, in [0, lock_shards()). Calls whose keys lie in disjoint sets of lock
  // shards never wait for each other (PendingUpdates::Apply splits a commit by it).
  int LockShardOf(uint64_t key) const;
  int lock_shards() const;

  // The value a fresh row of `key` starts with (dim floats), for tests and
  // reference models.
  std::vector<float> InitialValue(uint64_t key) const;

 private:
  struct Shard;
  SparseTable(const SparseTableOptions& options, std::unique_ptr<ColdStore> cold);
  uint32_t ShardIndex(uint64_t key) const;
  Shard& ShardOf(uint64_t key);
  // Touches every key, lock shard by lock shard, and calls serve(shard, position, slot) for each
  // with the shard's lock held. `row_floats`: the floats of each slot serve reads or writes (from
  // the first), fetched ahead with the row's record.
  template <typename Serve>
  absl::Status ForEachKey(absl::Span<const uint64_t> keys, int row_floats, Serve serve);
  int stride() const { return options_.dim * (1 + StateFloats(options_.optimizer.kind)); }
  // Export's and Import's path for a row in memory, each taking the key's shard.mu: one lock and
  // one search, no copy in between (Lookup and Insert are the path for the others). False where
  // `key` has no row in memory.
  bool ReadResident(uint64_t key, float* value, float* state, int64_t* steps);
  // Whether `key` has a row in memory (taking its shard.mu).
  bool Resident(uint64_t key);
  absl::StatusOr<bool> OverwriteResident(uint64_t key, const float* value, const float* state,
                                         int64_t steps);
  // The rest run with shard.mu held.
  // What BringBack learnt of a group's keys: true, brought back (its first touch is the miss that
  // brought it); false, in neither tier (its first touch creates the row without asking the
  // store).
  using ColdMarks = absl::flat_hash_map<uint64_t, bool>;
  // Brings the cold rows among keys[group[0..size)] back into memory together (one GetMany; at
  // most the rows the shard keeps after a spill, room made for them first), seen at `now`, and
  // marks the keys; on an error, leaves every row where it was.
  absl::Status BringBack(Shard& shard, absl::Span<const uint64_t> keys, const uint32_t* group,
                         size_t size, uint64_t now, ColdMarks* marks);
  // The slot of `key`: resident, brought back from the cold store, or created; its last access
  // becomes `now`. Takes the key's mark, if any.
  absl::StatusOr<uint32_t> Touch(Shard& shard, uint64_t key, uint64_t now, ColdMarks* marks);
  // Writes a row's floats (dim of `value`, then its state) and update count into `slot`, which
  // becomes seen now.
  void WriteSlot(Shard& shard, uint32_t slot, const float* value, const float* state,
                 int64_t steps);
  // A free slot for a new resident row.
  // ResourceExhausted when the shard already holds SlotIndex's most rows (2^24 - 1).
  absl::StatusOr<uint32_t> Allocate(Shard& shard);
  // Moves least recently used rows to the cold store while the shard, with `incoming` rows more,
  // would exceed its budget share.
  absl::Status EnforceBudget(Shard& shard, size_t incoming = 0);
  // A lock shard's share of the memory budget, bytes; the rows a shard keeps after a spill (90%
  // of its share, so that spills come in batches rather than one row per access).
  int64_t ShareBytes() const;
  int64_t RowsAfterSpill() const;
  int64_t SlotBytes() const;
  void FillInitialValue(uint64_t key, float* value) const;
  // Keeps `value` (dim floats) as the base of `key` unless it has one, while tracking; with
  // shard.mu held.
  void RecordBase(Shard& shard, uint64_t key, const float* value);
  // The value of `key`'s row (resident, or read from the cold store into `floats`, stride floats);
  // with shard.mu held. Internal where the row is in neither tier.
  absl::StatusOr<const float*> ValueOf(Shard& shard, uint64_t key, float* floats);
  // ExportDeltas (move_bases) and ExportWindow (not).
  absl::Status ExportChanges(float threshold, std::vector<uint64_t>* keys,
                             std::vector<float>* deltas, int64_t max_rows, bool move_bases);

  const SparseTableOptions options_;
  std::unique_ptr<ColdStore> cold_;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::atomic<uint64_t> clock_{0};
  std::atomic<bool> tracking_{false};  // TrackDeltas
};

// The mixing hash that spreads keys over lock shards and, in the client, over servers.
using base::MixKey;

}  // namespace heterps::ps
