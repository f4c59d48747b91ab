// One class, SparseTable, whose parts share private state and invariants: the open-addressing
// index, the slot arenas and records, the SSD tier's spills and fetches, and the batched,
// prefetched pull and push paths over them. Kept in one file (over 500 lines) so that the
// invariants are read in one place.
#include "heterps/ps/sparse_table.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "heterps/base/huge_pages.h"
#include "heterps/base/status_macros.h"
#include "heterps/ps/deltas.h"

namespace heterps::ps {
namespace {

// Arena blocks: the first holds kFirstBlockRows slots and each next one twice as many, up to
// 8192; every later block is a whole number of huge pages holding at least kBlockRows slots
// (LargeBlockRows). A shard of a small table wastes at most half its last block (a table has 16
// lock shards, and a model dozens of tables); a large one grows without 2x overshoot, and its
// blocks end within one slot of a huge page's end.
constexpr uint32_t kFirstBlockRows = 512;
constexpr uint32_t kBlockRows = 16384;
constexpr uint32_t kGrowingBlocks = 5;  // 512, 1024, ..., 8192 slots
constexpr uint32_t kGrowingRows = kFirstBlockRows * ((1u << kGrowingBlocks) - 1);
static_assert(kFirstBlockRows << kGrowingBlocks == kBlockRows);

// The slots of every block after the growing ones: as many as whole huge pages hold, the fewest
// pages that hold kBlockRows.
uint32_t LargeBlockRows(size_t slot_bytes) {
  const size_t pages = (slot_bytes * kBlockRows + base::kHugePageBytes - 1) / base::kHugePageBytes;
  return static_cast<uint32_t>(pages * base::kHugePageBytes / slot_bytes);
}

// Where a slot lives: its block, its place in the block, and the block's slots.
struct BlockPlace {
  uint32_t block, offset, rows;
};
inline BlockPlace PlaceOf(uint32_t slot, uint32_t large_rows) {
  if (slot < kGrowingRows) {
    const uint32_t block = 31 - static_cast<uint32_t>(__builtin_clz(slot / kFirstBlockRows + 1));
    return {block, slot - kFirstBlockRows * ((1u << block) - 1), kFirstBlockRows << block};
  }
  const uint32_t rest = slot - kGrowingRows;
  return {kGrowingBlocks + rest / large_rows, rest % large_rows, large_rows};
}

// A resident row's bookkeeping, at the start of its slot, before its floats: 20 bytes, 4-aligned.
// The counts saturate (a row would need 4 billion updates to notice). The last access is the
// table's logical clock (one tick per key accessed) in units of 256 ticks, modulo 2^32: ages, taken
// modulo 2^32 too, stay right for rows younger than 2^40 accesses, and an older one has long been
// spilled when there is a budget.
struct Meta {
  uint32_t key_low = 0, key_high = 0;
  uint32_t last_seen = 0;
  uint32_t steps = 0;
  uint32_t accesses = 0;

  uint64_t key() const { return (static_cast<uint64_t>(key_high) << 32) | key_low; }
  void set_key(uint64_t key) {
    key_low = static_cast<uint32_t>(key);
    key_high = static_cast<uint32_t>(key >> 32);
  }
};
static_assert(sizeof(Meta) == 20);

uint32_t Tick(uint64_t clock) { return static_cast<uint32_t>(clock >> 8); }

uint32_t Saturate(int64_t count) {
  return static_cast<uint32_t>(std::clamp<int64_t>(count, 0, UINT32_MAX));
}
void Increment(uint32_t& count) { count += count != UINT32_MAX; }

// A row in the cold store: int64 steps, int64 accesses, then its stride floats.
std::string Encode(const float* slot, int stride, const Meta& meta) {
  std::string out(16 + sizeof(float) * stride, '\0');
  const int64_t steps = meta.steps, accesses = meta.accesses;
  std::memcpy(out.data(), &steps, 8);
  std::memcpy(out.data() + 8, &accesses, 8);
  std::memcpy(out.data() + 16, slot, sizeof(float) * stride);
  return out;
}

absl::Status Decode(absl::string_view bytes, int stride, float* slot, Meta* meta) {
  if (bytes.size() != 16 + sizeof(float) * stride) {
    return absl::DataLossError(absl::StrCat("cold store: a row of ", bytes.size(),
                                            " bytes, expected ", 16 + sizeof(float) * stride));
  }
  int64_t steps, accesses;
  std::memcpy(&steps, bytes.data(), 8);
  std::memcpy(&accesses, bytes.data() + 8, 8);
  meta->steps = Saturate(steps);
  meta->accesses = Saturate(accesses);
  std::memcpy(slot, bytes.data() + 16, sizeof(float) * stride);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckRowFloats(absl::string_view op, size_t floats, size_t keys, int dim) {
  if (floats == keys * static_cast<size_t>(dim)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(op, ": ", floats, " floats for ", keys, " keys of dim ", dim));
}

// A shard's index from keys to slots: open addressing with linear probing over 4-byte entries,
// each the top 8 bits of the key's hash (MixKey) over a 24-bit slot number. A key's home is its
// hash modulo the power-of-two capacity; a lookup compares the key (in the slot's Meta) only where
// the 8 hash bits match, and growing or erasing recomputes the hashes of the entries it moves from
// their keys (`hash_of(slot)`). Kept at most 80% full. It exists, rather than an absl map, so
// that a batch can prefetch the entries of the keys it looks up next, and so that an entry is 4
// bytes.
template <typename HashOf>
class SlotIndex {
 public:
  static constexpr uint32_t kMaxSlots = (1u << 24) - 1;  // slots 0 .. kMaxSlots - 1

  explicit SlotIndex(HashOf hash_of) : hash_of_(hash_of) { Reset(16); }

  size_t size() const { return size_; }

  void Prefetch(uint64_t hash) const { __builtin_prefetch(&entries_[hash & mask_]); }

  // The slot of the first entry whose hash bits match: a guess, for prefetching its row.
  std::optional<uint32_t> Candidate(uint64_t hash) const {
    for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
      const uint32_t e = entries_[i];
      if (e == kEmpty) return std::nullopt;
      if (TagOf(e) == Tag(hash)) return SlotOf(e);
    }
  }

  // The slot of `key` (hash: MixKey(key)); key_of(slot) gives a slot's key.
  template <typename KeyOf>
  std::optional<uint32_t> Find(uint64_t key, uint64_t hash, const KeyOf& key_of) const {
    for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
      const uint32_t e = entries_[i];
      if (e == kEmpty) return std::nullopt;
      if (TagOf(e) == Tag(hash) && key_of(SlotOf(e)) == key) return SlotOf(e);
    }
  }

  // Adds `slot` (< kMaxSlots) for a key (hash: MixKey(key)) that is not in the index.
  void Insert(uint64_t hash, uint32_t slot) {
    if ((size_ + 1) * 5 > entries_.size() * 4) Grow();
    Place(Entry(hash, slot), hash);
    ++size_;
  }

  // Removes `slot` (its key's hash: `hash`), shifting later entries of its run back.
  void Erase(uint64_t hash, uint32_t slot) {
    const uint32_t entry = Entry(hash, slot);
    uint64_t i = hash & mask_;
    while (entries_[i] != entry) i = (i + 1) & mask_;
    for (uint64_t j = (i + 1) & mask_;; j = (j + 1) & mask_) {
      const uint32_t e = entries_[j];
      if (e == kEmpty) break;
      const uint64_t home = hash_of_(SlotOf(e)) & mask_;
      // e may move into the hole at i unless its home lies cyclically in (i, j].
      if (((j - home) & mask_) >= ((j - i) & mask_)) {
        entries_[i] = e;
        i = j;
      }
    }
    entries_[i] = kEmpty;
    --size_;
  }

  template <typename Visit>
  void ForEach(const Visit& visit) const {
    for (uint32_t e : entries_) {
      if (e != kEmpty) visit(SlotOf(e));
    }
  }

  void Clear() { Reset(16); }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};  // slot kMaxSlots: never a real slot

  static uint32_t Tag(uint64_t hash) { return static_cast<uint32_t>(hash >> 56); }
  static uint32_t TagOf(uint32_t entry) { return entry >> 24; }
  static uint32_t SlotOf(uint32_t entry) { return entry & kMaxSlots; }
  static uint32_t Entry(uint64_t hash, uint32_t slot) { return (Tag(hash) << 24) | slot; }

  void Reset(size_t capacity) {
    Entries fresh(capacity, kEmpty);
    entries_.swap(fresh);
    mask_ = capacity - 1;
    size_ = 0;
  }
  void Place(uint32_t entry, uint64_t hash) {
    uint64_t i = hash & mask_;
    while (entries_[i] != kEmpty) i = (i + 1) & mask_;
    entries_[i] = entry;
  }
  void Grow() {
    Entries old(entries_.size() * 2, kEmpty);
    old.swap(entries_);
    mask_ = entries_.size() - 1;
    for (uint32_t e : old) {
      if (e != kEmpty) Place(e, hash_of_(SlotOf(e)));
    }
  }

  using Entries = std::vector<uint32_t, base::HugePageAllocator<uint32_t>>;
  HashOf hash_of_;
  Entries entries_;
  uint64_t mask_ = 0;
  size_t size_ = 0;
};

struct SparseTable::Shard {
  // The hash of a resident slot's key.
  struct SlotHash {
    const Shard* shard;
    uint64_t operator()(uint32_t slot) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return MixKey(shard->MetaOf(slot).key());
    }
  };

  // A slot: its Meta, then `stride` floats of value and optimizer state.
  explicit Shard(int stride)
      : slot_bytes(sizeof(Meta) + sizeof(float) * static_cast<size_t>(stride)),
        large_rows(LargeBlockRows(slot_bytes)),
        index(SlotHash{this}) {}

  const size_t slot_bytes;
  const uint32_t large_rows;  // slots of each block after the growing ones
  absl::Mutex mu;
  SlotIndex<SlotHash> index ABSL_GUARDED_BY(mu);  // resident slots
  // Slot arenas (PlaceOf), the large ones on huge pages: blocks that never move or grow, so that
  // a table's memory is what its rows use, with no reallocation leaving copies behind. A row's
  // record shares its slot, so that a lookup touches the index entry and then one run of cache
  // lines on one page. Slots are written when handed out (Touch, Insert), so a block starts raw:
  // its slack is never touched, and never made resident.
  std::vector<std::unique_ptr<char[], base::HugeDeleter>> blocks ABSL_GUARDED_BY(mu);
  uint32_t slots ABSL_GUARDED_BY(mu) = 0;  // slots handed out (resident, or free for reuse)
  std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
  SparseTableStats stats ABSL_GUARDED_BY(mu);  // memory_* are derived when read
  // TrackDeltas: the base of every row changed since it was last sent (ExportDeltas).
  absl::flat_hash_map<uint64_t, std::vector<float>> bases ABSL_GUARDED_BY(mu);

  char* SlotStart(uint32_t slot) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const BlockPlace place = PlaceOf(slot, large_rows);
    return blocks[place.block].get() + static_cast<size_t>(place.offset) * slot_bytes;
  }
  // The slot's floats: value, then optimizer state.
  float* Slot(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return reinterpret_cast<float*>(SlotStart(slot) + sizeof(Meta));
  }
  Meta& MetaOf(uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return *reinterpret_cast<Meta*>(SlotStart(slot));
  }
  const Meta& MetaOf(uint32_t slot) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return *reinterpret_cast<const Meta*>(SlotStart(slot));
  }
  // The resident slot of `key`, if any.
  std::optional<uint32_t> Find(uint64_t key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return index.Find(key, MixKey(key), [this](uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return MetaOf(slot).key();
    });
  }
  void Insert(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    index.Insert(MixKey(MetaOf(slot).key()), slot);
    stats.shard_rows_peak = std::max(stats.shard_rows_peak, static_cast<int64_t>(index.size()));
  }
  void Erase(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    index.Erase(MixKey(MetaOf(slot).key()), slot);
  }
};

SparseTable::SparseTable(const SparseTableOptions& options, std::unique_ptr<ColdStore> cold)
    : options_(options), cold_(std::move(cold)) {
  for (int i = 0; i < options.lock_shards; ++i) {
    shards_.push_back(std::make_unique<Shard>(stride()));
  }
}

SparseTable::~SparseTable() = default;

absl::StatusOr<std::unique_ptr<SparseTable>> SparseTable::Create(const SparseTableOptions& options,
                                                                 std::unique_ptr<ColdStore> cold) {
  if (options.dim <= 0) return absl::InvalidArgumentError("sparse table: dim must be > 0");
  if (options.lock_shards <= 0) {
    return absl::InvalidArgumentError("sparse table: lock_shards must be > 0");
  }
  if (options.memory_budget_bytes < 0) {
    return absl::InvalidArgumentError("sparse table: memory_budget_bytes must be >= 0");
  }
  if (options.memory_budget_bytes > 0 && cold == nullptr) {
    return absl::InvalidArgumentError("sparse table: a memory budget needs a cold store");
  }
  return std::unique_ptr<SparseTable>(new SparseTable(options, std::move(cold)));
}

uint32_t SparseTable::ShardIndex(uint64_t key) const {
  return static_cast<uint32_t>((MixKey(key) >> 32) % shards_.size());
}

SparseTable::Shard& SparseTable::ShardOf(uint64_t key) { return *shards_[ShardIndex(key)]; }

int SparseTable::LockShardOf(uint64_t key) const { return static_cast<int>(ShardIndex(key)); }

int SparseTable::lock_shards() const { return static_cast<int>(shards_.size()); }

int64_t SparseTable::ShareBytes() const {
  return options_.memory_budget_bytes / static_cast<int64_t>(shards_.size());
}

int64_t SparseTable::RowsAfterSpill() const { return ShareBytes() * 9 / 10 / SlotBytes(); }

int64_t SparseTable::SlotBytes() const {
  // The slot's floats, its Meta (key and statistics), and its index entry: 4 bytes in a table
  // kept between 40% and 80% full, 7 bytes on average.
  return static_cast<int64_t>(sizeof(float)) * stride() + static_cast<int64_t>(sizeof(Meta)) + 7;
}

std::vector<float> SparseTable::InitialValue(uint64_t key) const {
  std::vector<float> value(options_.dim);
  FillInitialValue(key, value.data());
  return value;
}

void SparseTable::FillInitialValue(uint64_t key, float* value) const {
  const uint64_t base = MixKey(key ^ MixKey(options_.seed));
  for (int i = 0; i < options_.dim; ++i) {
    const double unit = static_cast<double>(MixKey(base + static_cast<uint64_t>(i)) >> 40) /
                        static_cast<double>(1ull << 24);  // [0, 1)
    value[i] = static_cast<float>((2 * unit - 1) * options_.init_range);
  }
}

absl::StatusOr<uint32_t> SparseTable::Allocate(Shard& shard) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (!shard.free_slots.empty()) {
    uint32_t slot = shard.free_slots.back();
    shard.free_slots.pop_back();
    return slot;
  }
  const uint32_t slot = shard.slots;
  if (slot >= SlotIndex<Shard::SlotHash>::kMaxSlots) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sparse table: a lock shard holds ", slot, " resident rows, its most; raise lock_shards (",
        options_.lock_shards, ") or set a memory budget"));
  }
  if (const BlockPlace place = PlaceOf(slot, shard.large_rows); place.offset == 0) {
    const size_t bytes = shard.slot_bytes * place.rows;
    static_assert(std::is_trivially_destructible_v<Meta>);
    shard.blocks.emplace_back(static_cast<char*>(base::AllocateHuge(bytes)),
                              base::HugeDeleter{bytes});
  }
  ++shard.slots;
  return slot;
}

absl::Status SparseTable::BringBack(Shard& shard, absl::Span<const uint64_t> keys,
                                    const uint32_t* group, size_t size, uint64_t now,
                                    ColdMarks* marks) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // At most the rows the shard keeps after a spill (the others come back one by one as they are
  // touched).
  const size_t most = static_cast<size_t>(RowsAfterSpill());
  if (most == 0) return absl::OkStatus();
  constexpr size_t kFar = 32;
  std::vector<uint64_t> missing;
  for (size_t j = 0; j < std::min(size, kFar); ++j) shard.index.Prefetch(MixKey(keys[group[j]]));
  for (size_t j = 0; j < size; ++j) {
    if (j + kFar < size) shard.index.Prefetch(MixKey(keys[group[j + kFar]]));
    if (!shard.Find(keys[group[j]]).has_value()) missing.push_back(keys[group[j]]);
  }
  if (missing.empty()) return absl::OkStatus();
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  HETERPS_ASSIGN_OR_RETURN(std::vector<std::optional<std::string>> rows, cold_->GetMany(missing));
  std::vector<size_t> found;  // positions in `missing` of the rows to bring back
  for (size_t i = 0; i < missing.size() && found.size() < most; ++i) {
    if (rows[i].has_value()) found.push_back(i);
  }
  // Room first: the shard's oldest rows spilled so that it stays within its share with these.
  if (!found.empty()) HETERPS_RETURN_IF_ERROR(EnforceBudget(shard, found.size()));
  // Into memory, where the index hides their copies in the store from now on; a failure takes
  // those already in out again, so that each row stays in the store alone.
  std::vector<uint32_t> slots;
  const auto undo = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (uint32_t slot : slots) {
      shard.Erase(slot);
      shard.free_slots.push_back(slot);
    }
  };
  for (size_t i : found) {
    absl::StatusOr<uint32_t> slot = Allocate(shard);
    absl::Status status = slot.status();
    if (status.ok()) {
      Meta& meta = shard.MetaOf(*slot);
      status = Decode(*rows[i], stride(), shard.Slot(*slot), &meta);
      if (!status.ok()) shard.free_slots.push_back(*slot);
    }
    if (!status.ok()) {
      undo();
      return status;
    }
    Meta& meta = shard.MetaOf(*slot);
    meta.set_key(missing[i]);
    meta.last_seen = Tick(now);
    shard.Insert(*slot);
    slots.push_back(*slot);
  }
  shard.stats.cold_rows -= static_cast<int64_t>(found.size());
  for (size_t i : found) marks->emplace(missing[i], true);
  // Keys in neither tier: their first touch creates the row without asking the store again.
  for (size_t i = 0; i < missing.size(); ++i) {
    if (!rows[i].has_value()) marks->emplace(missing[i], false);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> SparseTable::Touch(Shard& shard, uint64_t key, uint64_t now,
                                            ColdMarks* marks) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // What BringBack learnt of the key, once: brought back, or in neither tier.
  std::optional<bool> mark;
  if (!marks->empty()) {
    if (auto it = marks->find(key); it != marks->end()) {
      mark = it->second;
      marks->erase(it);
    }
  }
  if (std::optional<uint32_t> slot = shard.Find(key)) {
    if (mark == true) {
      ++shard.stats.misses;
    } else {
      ++shard.stats.hits;
    }
    Meta& meta = shard.MetaOf(*slot);
    meta.last_seen = Tick(now);
    Increment(meta.accesses);
    return *slot;
  }
  std::optional<std::string> cold;
  if (cold_ != nullptr && mark != false) {
    HETERPS_ASSIGN_OR_RETURN(cold, cold_->Get(key));
  }
  HETERPS_ASSIGN_OR_RETURN(const uint32_t slot, Allocate(shard));
  float* data = shard.Slot(slot);
  Meta& meta = shard.MetaOf(slot);
  if (cold.has_value()) {
    absl::Status decoded = Decode(*cold, stride(), data, &meta);  // the store keeps its copy
    if (!decoded.ok()) {
      shard.free_slots.push_back(slot);
      return decoded;
    }
    ++shard.stats.misses;
    --shard.stats.cold_rows;
  } else {
    FillInitialValue(key, data);
    InitState(options_.optimizer, data + options_.dim, options_.dim);
    meta = Meta{};
    ++shard.stats.created;
  }
  meta.set_key(key);
  meta.last_seen = Tick(now);
  Increment(meta.accesses);
  shard.Insert(slot);
  return slot;
}

absl::Status SparseTable::EnforceBudget(Shard& shard,
                                        size_t incoming) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (options_.memory_budget_bytes == 0) return absl::OkStatus();
  const int64_t coming = static_cast<int64_t>(incoming);
  const int64_t resident = (static_cast<int64_t>(shard.index.size()) + coming) * SlotBytes();
  if (resident <= ShareBytes()) return absl::OkStatus();
  const int64_t keep = std::min<int64_t>(static_cast<int64_t>(shard.index.size()),
                                         std::max<int64_t>(0, RowsAfterSpill() - coming));
  // The oldest first: (age, slot) in decreasing age, ages modulo 2^32 (see Meta).
  const uint32_t now = Tick(clock_.load(std::memory_order_relaxed));
  std::vector<std::pair<uint32_t, uint32_t>> by_age;
  by_age.reserve(shard.index.size());
  shard.index.ForEach(
      [&](uint32_t slot) { by_age.emplace_back(now - shard.MetaOf(slot).last_seen, slot); });
  const size_t spill = by_age.size() - static_cast<size_t>(keep);
  std::nth_element(by_age.begin(), by_age.begin() + spill, by_age.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  // Written in batches of rows in key order (a batch's memtable inserts each start where the last
  // ended), each replacing the row's stale copy where the store has one; a row leaves memory once
  // its batch is stored.
  std::vector<std::pair<uint64_t, uint32_t>> by_key(spill);
  for (size_t i = 0; i < spill; ++i) {
    by_key[i] = {shard.MetaOf(by_age[i].second).key(), by_age[i].second};
  }
  std::sort(by_key.begin(), by_key.end());
  constexpr size_t kBatchRows = 4096;
  std::vector<std::pair<uint64_t, std::string>> rows;
  for (size_t from = 0; from < spill; from += kBatchRows) {
    const size_t to = std::min(spill, from + kBatchRows);
    rows.clear();
    for (size_t i = from; i < to; ++i) {
      const uint32_t slot = by_key[i].second;
      rows.emplace_back(by_key[i].first, Encode(shard.Slot(slot), stride(), shard.MetaOf(slot)));
    }
    HETERPS_RETURN_IF_ERROR(cold_->PutMany(rows));
    for (size_t i = from; i < to; ++i) {
      shard.Erase(by_key[i].second);
      shard.free_slots.push_back(by_key[i].second);
      ++shard.stats.spills;
      ++shard.stats.cold_rows;
    }
  }
  return absl::OkStatus();
}

template <typename Serve>
absl::Status SparseTable::ForEachKey(absl::Span<const uint64_t> keys, int row_floats,
                                     Serve serve) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // Positions grouped by lock shard (a stable counting sort, so a repeated key
  // keeps its order).
  const size_t n = keys.size(), shards = shards_.size();
  std::vector<uint32_t> start(shards + 1, 0), order(n), shard_of(n);
  for (size_t i = 0; i < n; ++i) {
    shard_of[i] = ShardIndex(keys[i]);
    ++start[shard_of[i] + 1];
  }
  for (size_t s = 0; s < shards; ++s) start[s + 1] += start[s];
  {
    std::vector<uint32_t> at(start.begin(), start.end() - 1);
    for (size_t i = 0; i < n; ++i) order[at[shard_of[i]]++] = static_cast<uint32_t>(i);
  }
  // Each group under one lock. Memory is fetched ahead: the index entry of the
  // key kFar places on, and the record and floats of the key kNear places on,
  // so that the misses of several keys overlap instead of queueing.
  constexpr size_t kFar = 32, kNear = 12;
  const size_t span = sizeof(Meta) + sizeof(float) * row_floats;
  // One shard's group, with its lock held.
  const auto serve_group = [&](size_t s) ABSL_NO_THREAD_SAFETY_ANALYSIS -> absl::Status {
    const uint32_t* group = order.data() + start[s];
    const size_t size = start[s + 1] - start[s];
    Shard& shard = *shards_[s];
    uint64_t now = clock_.fetch_add(size, std::memory_order_relaxed);
    ColdMarks marks;
    if (cold_ != nullptr && shard.stats.cold_rows > 0) {
      HETERPS_RETURN_IF_ERROR(BringBack(shard, keys, group, size, now, &marks));
    }
    for (size_t j = 0; j < std::min(size, kFar); ++j) shard.index.Prefetch(MixKey(keys[group[j]]));
    for (size_t j = 0; j < size; ++j) {
      if (j + kFar < size) shard.index.Prefetch(MixKey(keys[group[j + kFar]]));
      if (j + kNear < size) {
        if (std::optional<uint32_t> ahead = shard.index.Candidate(MixKey(keys[group[j + kNear]]))) {
          // The cache lines from the record to the last float the call uses.
          const uintptr_t first = reinterpret_cast<uintptr_t>(shard.SlotStart(*ahead));
          for (uintptr_t line = first & ~uintptr_t{63}; line < first + span; line += 64) {
            __builtin_prefetch(reinterpret_cast<const void*>(line), 1);
          }
        }
      }
      const size_t i = group[j];
      HETERPS_ASSIGN_OR_RETURN(uint32_t slot, Touch(shard, keys[i], ++now, &marks));
      serve(shard, i, slot);
      HETERPS_RETURN_IF_ERROR(EnforceBudget(shard));
    }
    return absl::OkStatus();
  };
  // A shard another call holds (spilling to the cold store, say) is passed over and come back to,
  // so that concurrent calls wait for each other only when nothing else is left to serve.
  std::vector<size_t> left;
  for (size_t s = 0; s < shards; ++s) {
    if (start[s + 1] > start[s]) left.push_back(s);
  }
  while (!left.empty()) {
    // The first shard free now; where none is, the first, waited for.
    size_t at = 0;
    while (at < left.size() && !shards_[left[at]]->mu.TryLock()) ++at;
    if (at == left.size()) {
      at = 0;
      shards_[left[at]]->mu.Lock();
    }
    const absl::Status status = serve_group(left[at]);
    shards_[left[at]]->mu.Unlock();
    HETERPS_RETURN_IF_ERROR(status);
    left.erase(left.begin() + static_cast<ptrdiff_t>(at));
  }
  return absl::OkStatus();
}

absl::Status SparseTable::Pull(absl::Span<const uint64_t> keys, absl::Span<float> values) {
  const int dim = options_.dim;
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("pull", values.size(), keys.size(), dim));
  return ForEachKey(keys, dim,
                    [&](Shard& shard, size_t i, uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                      const float* data = shard.Slot(slot);
                      std::copy(data, data + dim, values.data() + i * dim);
                    });
}

absl::Status SparseTable::Push(absl::Span<const uint64_t> keys, absl::Span<const float> grads) {
  const int dim = options_.dim;
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("push", grads.size(), keys.size(), dim));
  return ForEachKey(
      keys, stride(), [&](Shard& shard, size_t i, uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        float* data = shard.Slot(slot);
        RecordBase(shard, keys[i], data);
        Meta& meta = shard.MetaOf(slot);
        Increment(meta.steps);
        ApplyUpdate(options_.optimizer, data, data + dim, grads.data() + i * dim, dim, meta.steps);
      });
}

absl::StatusOr<std::optional<RowData>> SparseTable::Lookup(uint64_t key) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  const int dim = options_.dim, stride = this->stride();
  std::vector<float> floats(stride);
  Meta meta;
  if (std::optional<uint32_t> slot = shard.Find(key)) {
    const float* data = shard.Slot(*slot);
    std::copy(data, data + stride, floats.begin());
    meta = shard.MetaOf(*slot);
  } else {
    if (cold_ == nullptr) return std::optional<RowData>();
    HETERPS_ASSIGN_OR_RETURN(std::optional<std::string> bytes, cold_->Get(key));
    if (!bytes.has_value()) return std::optional<RowData>();
    HETERPS_RETURN_IF_ERROR(Decode(*bytes, stride, floats.data(), &meta));
  }
  RowData row;
  row.value.assign(floats.begin(), floats.begin() + dim);
  row.state.assign(floats.begin() + dim, floats.end());
  row.steps = meta.steps;
  row.accesses = meta.accesses;
  return std::optional<RowData>(std::move(row));
}

absl::Status SparseTable::Export(absl::Span<const uint64_t> keys, RowBatch* out) {
  const int dim = options_.dim, state = StateFloats(options_.optimizer.kind) * dim;
  // A pull creates the missing rows; then each row is read whole.
  std::vector<float> values(keys.size() * dim);
  HETERPS_RETURN_IF_ERROR(Pull(keys, absl::MakeSpan(values)));
  out->values.resize(keys.size() * dim);
  out->state.resize(keys.size() * state);
  out->steps.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (ReadResident(keys[i], out->values.data() + i * dim, out->state.data() + i * state,
                     &out->steps[i])) {
      continue;
    }
    HETERPS_ASSIGN_OR_RETURN(std::optional<RowData> row, Lookup(keys[i]));
    if (!row.has_value()) {
      return absl::InternalError(absl::StrCat("export: key ", keys[i], " vanished"));
    }
    std::copy(row->value.begin(), row->value.end(), out->values.begin() + i * dim);
    std::copy(row->state.begin(), row->state.end(), out->state.begin() + i * state);
    out->steps[i] = row->steps;
  }
  return absl::OkStatus();
}

absl::Status SparseTable::Import(absl::Span<const uint64_t> keys, const RowBatch& rows) {
  const int dim = options_.dim, state = StateFloats(options_.optimizer.kind) * dim;
  if (rows.values.size() != keys.size() * dim || rows.state.size() != keys.size() * state ||
      rows.steps.size() != keys.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("import: ", rows.values.size(), " values, ", rows.state.size(),
                     " state floats and ", rows.steps.size(), " counts for ", keys.size(),
                     " rows of dim ", dim, " and ", state, " state floats"));
  }
  RowData row;
  for (size_t i = 0; i < keys.size(); ++i) {
    HETERPS_ASSIGN_OR_RETURN(const bool replaced,
                             OverwriteResident(keys[i], rows.values.data() + i * dim,
                                               rows.state.data() + i * state, rows.steps[i]));
    if (replaced) continue;
    HETERPS_ASSIGN_OR_RETURN(std::optional<RowData> old, Lookup(keys[i]));
    bool recorded = false;
    if (tracking_deltas()) {
      const std::vector<float> before = old.has_value() ? old->value : InitialValue(keys[i]);
      Shard& shard = ShardOf(keys[i]);
      absl::MutexLock lock(&shard.mu);
      recorded = shard.bases.try_emplace(keys[i], before.begin(), before.end()).second;
    }
    row.value.assign(rows.values.begin() + i * dim, rows.values.begin() + (i + 1) * dim);
    row.state.assign(rows.state.begin() + i * state, rows.state.begin() + (i + 1) * state);
    row.steps = rows.steps[i];
    row.accesses = old.has_value() ? old->accesses : 0;
    if (const absl::Status inserted = Insert(keys[i], row); !inserted.ok()) {
      if (recorded) {
        // No row changed: no base either (one for a row in neither tier would fail exports).
        Shard& shard = ShardOf(keys[i]);
        absl::MutexLock lock(&shard.mu);
        shard.bases.erase(keys[i]);
      }
      return inserted;
    }
  }
  return absl::OkStatus();
}

bool SparseTable::ReadResident(uint64_t key, float* value, float* state, int64_t* steps) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  const std::optional<uint32_t> slot = shard.Find(key);
  if (!slot.has_value()) return false;
  const int dim = options_.dim, stride = this->stride();
  const float* data = shard.Slot(*slot);
  std::copy(data, data + dim, value);
  std::copy(data + dim, data + stride, state);
  *steps = shard.MetaOf(*slot).steps;
  return true;
}

bool SparseTable::Resident(uint64_t key) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  return shard.Find(key).has_value();
}

// As Insert does for a row it finds in memory: the floats and the update count replaced, the
// access count kept, the row seen now.
absl::StatusOr<bool> SparseTable::OverwriteResident(uint64_t key, const float* value,
                                                    const float* state, int64_t steps) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  const std::optional<uint32_t> slot = shard.Find(key);
  if (!slot.has_value()) return false;
  RecordBase(shard, key, shard.Slot(*slot));
  WriteSlot(shard, *slot, value, state, steps);
  HETERPS_RETURN_IF_ERROR(EnforceBudget(shard));
  return true;
}

void SparseTable::WriteSlot(Shard& shard, uint32_t slot, const float* value, const float* state,
                            int64_t steps) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const int dim = options_.dim, stride = this->stride();
  float* data = shard.Slot(slot);
  std::copy(value, value + dim, data);
  std::copy(state, state + (stride - dim), data + dim);
  Meta& meta = shard.MetaOf(slot);
  meta.last_seen = Tick(clock_.fetch_add(1) + 1);
  meta.steps = Saturate(steps);
}

absl::Status SparseTable::Insert(uint64_t key, const RowData& row) {
  const int dim = options_.dim, stride = this->stride();
  if (row.value.size() != static_cast<size_t>(dim) ||
      row.state.size() != static_cast<size_t>(stride - dim)) {
    return absl::InvalidArgumentError(
        absl::StrCat("insert: row of key ", key, " has ", row.value.size(), " + ", row.state.size(),
                     " floats, the table wants ", dim, " + ", stride - dim));
  }
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  std::optional<uint32_t> slot = shard.Find(key);
  if (!slot.has_value()) {
    // A row in the store alone is cold no more once in memory (its copy there, stale, stays
    // hidden).
    bool cold = false;
    if (cold_ != nullptr) {
      HETERPS_ASSIGN_OR_RETURN(std::optional<std::string> bytes, cold_->Get(key));
      cold = bytes.has_value();
    }
    HETERPS_ASSIGN_OR_RETURN(slot, Allocate(shard));
    if (cold) --shard.stats.cold_rows;
    shard.MetaOf(*slot).set_key(key);
    shard.Insert(*slot);
  }
  WriteSlot(shard, *slot, row.value.data(), row.state.data(), row.steps);
  Meta& meta = shard.MetaOf(*slot);
  meta.set_key(key);
  meta.accesses = Saturate(row.accesses);
  return EnforceBudget(shard);
}

absl::Status SparseTable::ForEachRow(
    const std::function<absl::Status(uint64_t, const RowData&)>& visit) {
  const int dim = options_.dim, stride = this->stride();
  auto make = [&](const float* data, const Meta& meta) {
    RowData row;
    row.value.assign(data, data + dim);
    row.state.assign(data + dim, data + stride);
    row.steps = meta.steps;
    row.accesses = meta.accesses;
    return row;
  };
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    absl::Status status;
    shard->index.ForEach([&](uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
      if (!status.ok()) return;
      const Meta& meta = shard->MetaOf(slot);
      status = visit(meta.key(), make(shard->Slot(slot), meta));
    });
    HETERPS_RETURN_IF_ERROR(status);
  }
  if (cold_ == nullptr) return absl::OkStatus();
  std::vector<float> floats(stride);
  return cold_->ForEach([&](uint64_t key, absl::string_view bytes) -> absl::Status {
    if (Resident(key)) return absl::OkStatus();  // a stale copy: the row was visited in memory
    Meta meta;
    HETERPS_RETURN_IF_ERROR(Decode(bytes, stride, floats.data(), &meta));
    return visit(key, make(floats.data(), meta));
  });
}

absl::Status SparseTable::Clear() {
  // The store first: where it fails, the table stays as it was (memory's rows hide the store's
  // stale copies, which must not outlive them).
  if (cold_ != nullptr) HETERPS_RETURN_IF_ERROR(cold_->Clear());
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->index.Clear();
    shard->blocks.clear();
    shard->slots = 0;
    shard->free_slots.clear();
    shard->stats.cold_rows = 0;
    shard->bases.clear();
  }
  return absl::OkStatus();
}

void SparseTable::RecordBase(Shard& shard, uint64_t key,
                             const float* value) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (!tracking_deltas()) return;
  shard.bases.try_emplace(key, value, value + options_.dim);
}

void SparseTable::TrackDeltas() { tracking_.store(true, std::memory_order_release); }

absl::Status SparseTable::ForEachBase(
    const std::function<absl::Status(uint64_t, absl::Span<const float>)>& visit) const {
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    for (const auto& [key, base] : shard->bases) HETERPS_RETURN_IF_ERROR(visit(key, base));
  }
  return absl::OkStatus();
}

void SparseTable::RestoreBases() {
  for (auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    shard->bases.clear();
  }
  TrackDeltas();
}

void SparseTable::SetBase(uint64_t key, absl::Span<const float> base) {
  Shard& shard = ShardOf(key);
  absl::MutexLock lock(&shard.mu);
  shard.bases.insert_or_assign(key, std::vector<float>(base.begin(), base.end()));
}

int64_t SparseTable::tracked_rows() const {
  int64_t rows = 0;
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    rows += static_cast<int64_t>(shard->bases.size());
  }
  return rows;
}

absl::StatusOr<const float*> SparseTable::ValueOf(Shard& shard, uint64_t key,
                                                  float* floats) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (const std::optional<uint32_t> slot = shard.Find(key)) return shard.Slot(*slot);
  // Spilled since it changed: the store's copy is the row.
  std::optional<std::string> bytes;
  if (cold_ != nullptr) {
    HETERPS_ASSIGN_OR_RETURN(bytes, cold_->Get(key));
  }
  if (!bytes.has_value()) {
    return absl::InternalError(
        absl::StrCat("deltas: the tracked row of key ", key, " is in neither tier"));
  }
  Meta meta;
  HETERPS_RETURN_IF_ERROR(Decode(*bytes, stride(), floats, &meta));
  return static_cast<const float*>(floats);
}

absl::Status SparseTable::ExportDeltas(float threshold, std::vector<uint64_t>* keys,
                                       std::vector<float>* deltas, int64_t max_rows) {
  return ExportChanges(threshold, keys, deltas, max_rows, /*move_bases=*/true);
}

absl::Status SparseTable::ExportWindow(float threshold, std::vector<uint64_t>* keys,
                                       std::vector<float>* deltas, int64_t max_rows) {
  return ExportChanges(threshold, keys, deltas, max_rows, /*move_bases=*/false);
}

absl::Status SparseTable::ExportChanges(float threshold, std::vector<uint64_t>* keys,
                                        std::vector<float>* deltas, int64_t max_rows,
                                        bool move_bases) {
  if (!tracking_deltas()) {
    return absl::FailedPreconditionError("export of deltas from a table that does not track them");
  }
  const int dim = options_.dim;
  // First every passing row's delta, nothing moved: a failure here (the cold store's, too many
  // rows) loses nothing.
  std::vector<std::pair<uint64_t, std::vector<float>>> sent;
  std::vector<float> floats(stride()), delta(dim);
  for (const auto& owned : shards_) {
    Shard& shard = *owned;
    absl::MutexLock lock(&shard.mu);
    for (const auto& [key, tracked] : shard.bases) {
      HETERPS_ASSIGN_OR_RETURN(const float* value, ValueOf(shard, key, floats.data()));
      if (PassingDelta(value, tracked.data(), dim, threshold, delta.data())) {
        sent.emplace_back(key, delta);
      }
    }
  }
  if (max_rows > 0 && static_cast<int64_t>(sent.size()) > max_rows) {
    return absl::ResourceExhaustedError(
        absl::StrCat("deltas: ", sent.size(), " rows pass the threshold, more than the ", max_rows,
                     " one answer carries: sync more often, or raise the threshold"));
  }
  // Then each sent row's base moves on by its delta, and a row whose base is its value again
  // (its value now: a change since the first pass stays) is tracked no more.
  if (move_bases) {
    for (const auto& [key, d] : sent) {
      Shard& shard = ShardOf(key);
      absl::MutexLock lock(&shard.mu);
      const auto it = shard.bases.find(key);
      if (it == shard.bases.end()) continue;  // cleared meanwhile
      std::vector<float>& b = it->second;
      for (int i = 0; i < dim; ++i) b[i] += d[i];
      const absl::StatusOr<const float*> value = ValueOf(shard, key, floats.data());
      if (value.ok() && std::equal(b.begin(), b.end(), *value)) shard.bases.erase(it);
    }
  }
  std::sort(sent.begin(), sent.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [key, d] : sent) {
    keys->push_back(key);
    deltas->insert(deltas->end(), d.begin(), d.end());
  }
  return absl::OkStatus();
}

absl::Status SparseTable::AddDeltas(absl::Span<const uint64_t> keys,
                                    absl::Span<const float> deltas) {
  const int dim = options_.dim;
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("add", deltas.size(), keys.size(), dim));
  const bool tracking = tracking_deltas();
  return ForEachKey(keys, dim,
                    [&](Shard& shard, size_t i, uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                      float* data = shard.Slot(slot);
                      const float* d = deltas.data() + i * dim;
                      for (int k = 0; k < dim; ++k) data[k] += d[k];
                      if (!tracking) return;
                      const auto base = shard.bases.find(keys[i]);
                      if (base == shard.bases.end()) return;
                      for (int k = 0; k < dim; ++k) base->second[k] += d[k];
                    });
}

absl::Status SparseTable::ApplyWindow(absl::Span<const uint64_t> keys,
                                      absl::Span<const float> merged,
                                      absl::Span<const float> own) {
  const int dim = options_.dim;
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("apply window", merged.size(), keys.size(), dim));
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("apply window", own.size(), keys.size(), dim));
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] <= keys[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "apply window: keys not sorted and distinct (", keys[i - 1], " before ", keys[i], ")"));
    }
  }
  if (!tracking_deltas()) {
    return absl::FailedPreconditionError("a window applied to a table that does not track deltas");
  }
  std::vector<float> base(dim);
  return ForEachKey(keys, dim,
                    [&](Shard& shard, size_t i, uint32_t slot) ABSL_NO_THREAD_SAFETY_ANALYSIS {
                      float* value = shard.Slot(slot);
                      const auto tracked = shard.bases.find(keys[i]);
                      if (tracked == shard.bases.end()) {
                        base.assign(value, value + dim);
                      } else {
                        base = tracked->second;
                      }
                      const bool caught_up = ApplyMerged(value, base.data(), merged.data() + i * dim,
                                                         own.data() + i * dim, dim);
                      if (caught_up) {
                        if (tracked != shard.bases.end()) shard.bases.erase(tracked);
                      } else if (tracked == shard.bases.end()) {
                        shard.bases.emplace(keys[i], base);
                      } else {
                        tracked->second = base;
                      }
                    });
}

SparseTableStats SparseTable::Stats() const {
  SparseTableStats total;
  for (const auto& shard : shards_) {
    absl::MutexLock lock(&shard->mu);
    total.memory_rows += static_cast<int64_t>(shard->index.size());
    total.cold_rows += shard->stats.cold_rows;
    total.created += shard->stats.created;
    total.hits += shard->stats.hits;
    total.misses += shard->stats.misses;
    total.spills += shard->stats.spills;
    total.shard_rows_peak = std::max(total.shard_rows_peak, shard->stats.shard_rows_peak);
  }
  total.memory_bytes = total.memory_rows * SlotBytes();
  return total;
}

}  // namespace heterps::ps
