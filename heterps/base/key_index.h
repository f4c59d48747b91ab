// A scratch map from a batch's 64-bit keys to small indices, reused from batch to batch: the
// deduplication every step does (a batch's distinct keys, a block's distinct rows, a commit's
// distinct keys), without a hash map built and grown from empty each time.
//
//   KeyIndex index;                        // one per thread, kept between batches
//   index.Reset(keys.size());              // a new batch of at most that many distinct keys
//   for (uint64_t key : keys) {
//     auto [at, fresh] = index.Insert(key, distinct.size());
//     if (fresh) distinct.push_back(key);  // `at`: the key's index, first-seen order
//   }
//
// An open-addressing table (linear probing on MixKey's top bits, at most half full) whose
// entries carry the batch (a generation) that wrote them, so that Reset clears nothing: it only
// starts a new generation, re-sizing the table where it is too small or more than 4x too large
// for the batch (a table far larger than the batch would spread its keys over more cache lines
// than it needs). A batch with more distinct keys than Reset was told grows the table (the
// batch's entries re-inserted), so that the bound is a hint, never a limit. Trim frees a table
// above a size, so that a thread keeps a small one between batches and no more.
//
// Thread safety: none; give each thread its own (a thread_local one, or a member of an object
// one thread uses at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "heterps/base/mix_key.h"

namespace heterps::base {

class KeyIndex {
 public:
  // What a thread's table for a step's keys keeps between steps (Trim): a step of up to about 500
  // thousand distinct keys reuses its table, a larger one frees it.
  static constexpr size_t kStepKeptBytes = size_t{16} << 20;

  // Starts a batch of at most `max_keys` distinct keys (a hint: more grow the table).
  void Reset(size_t max_keys) {
    size_t slots = 16;
    while (slots < 2 * max_keys) slots *= 2;
    count_ = 0;
    if (entries_.size() < slots || entries_.size() > 4 * slots) {
      Allocate(slots);
      return;
    }
    if (++generation_ == 0) Allocate(entries_.size());  // every 2^32 batches: clear once
  }

  // The index of `key` in this batch: `next` and true where the batch has not seen it (it then
  // has that index), else the index it was given and false.
  std::pair<uint32_t, bool> Insert(uint64_t key, uint32_t next) {
    if (2 * (count_ + 1) > entries_.size()) Grow();
    Entry& entry = entries_[Find(key)];
    if (entry.generation == generation_) return {entry.index, false};
    entry = Entry{key, generation_, next};
    ++count_;
    return {next, true};
  }

  // Fetches the slot `key` starts its probe at into the cache (a batch's later key, while the
  // current one is inserted): the cache misses of several keys overlap.
  void Prefetch(uint64_t key) const {
    if (!entries_.empty()) __builtin_prefetch(&entries_[MixKey(key) >> shift_], 1);
  }

  // Distinct keys inserted since Reset.
  size_t size() const { return count_; }
  // Bytes the table holds (16 a slot).
  size_t bytes() const { return entries_.capacity() * sizeof(Entry); }
  // Frees the table (the next Reset allocates one).
  void Release() {
    std::vector<Entry>().swap(entries_);
    count_ = 0;
  }
  // Frees the table where it holds more than `max_bytes`: a thread's table kept between batches
  // stays within that, a larger batch's (a checkpoint's) goes when the batch is done.
  void Trim(size_t max_bytes) {
    if (bytes() > max_bytes) Release();
  }

 private:
  struct Entry {
    uint64_t key;
    uint32_t generation;  // 0: never written
    uint32_t index;
  };

  void Allocate(size_t slots) {
    std::vector<Entry>(slots, Entry{0, 0, 0}).swap(entries_);  // a smaller one frees the old
    shift_ = 64;
    for (size_t s = slots; s > 1; s /= 2) --shift_;
    generation_ = 1;
  }

  // The slot holding `key` in this batch, or the empty one its probe ends at.
  size_t Find(uint64_t key) const {
    const size_t mask = entries_.size() - 1;
    size_t slot = MixKey(key) >> shift_;
    while (entries_[slot].generation == generation_ && entries_[slot].key != key) {
      slot = (slot + 1) & mask;
    }
    return slot;
  }

  void Grow() {
    std::vector<Entry> old;
    old.swap(entries_);
    const uint32_t batch = generation_;
    Allocate(old.empty() ? 16 : 2 * old.size());
    for (const Entry& e : old) {
      if (e.generation == batch) entries_[Find(e.key)] = Entry{e.key, generation_, e.index};
    }
  }

  std::vector<Entry> entries_;
  int shift_ = 64;  // the slot is MixKey's top (64 - shift_) bits
  uint32_t generation_ = 0;
  size_t count_ = 0;
};

}  // namespace heterps::base
