// The GPU tier's engine: written once, built twice (gpu/target.h): twin_tier.cc for the host
// twin (g++, Thrust's OpenMP backend), cuda_tier.cu for CUDA GPUs (nvcc). The data-parallel work
// (sorting and de-duplicating a window's keys, finding them among the resident rows, gathering
// rows, merging duplicate gradients, the optimizer's updates, picking dirty rows) runs on the
// device with Thrust and small functors; the decisions over a window's misses and evictions,
// which are as many as the window's distinct keys, run on the host.
//
// Per table, a resident row lives in a slot of parallel device arrays (its key, value, optimizer
// state, update count, the window of its last use, a dirty flag) and stays there until it is
// evicted. The index is the resident keys sorted, each with its slot, so that a batch of keys
// finds its rows with one vectorised lower_bound; a load merges the loaded keys into the index
// and an eviction compacts it, moving 16 bytes a resident row, never the rows themselves.
// Thrust's scratch comes from one gpu::Scratch, and its calls do not wait for the stream: the
// engine synchronises only where the host reads what the device wrote.
//
// Not a header: included once by each target's translation unit.
#include <math.h>
#include <thrust/binary_search.h>
#include <thrust/copy.h>
#include <thrust/for_each.h>
#include <thrust/gather.h>
#include <thrust/iterator/constant_iterator.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/merge.h>
#include <thrust/reduce.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/unique.h>

#include <algorithm>
#include <iterator>
#include <map>
#include <numeric>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/gpu/target.h"
#include "heterps/ps/gpu/tier_engine.h"

namespace heterps::ps::HETERPS_GPU_TARGET {
namespace {

using gpu::DeviceArray;

// The slot of query key i, found among the r sorted resident keys of the index, or -1.
struct FindRows {
  const uint64_t* resident;
  const int64_t* slot;  // of each resident key
  int64_t r;
  const uint64_t* query;
  const int64_t* lower;  // lower_bound of each query
  int64_t* position;
  HETERPS_HD void operator()(int64_t i) const {
    const int64_t p = lower[i];
    position[i] = p < r && resident[p] == query[i] ? slot[p] : -1;
  }
};

struct NotResident {
  HETERPS_HD bool operator()(int64_t position) const { return position < 0; }
};

// Marks the rows a window uses with the window's number.
struct MarkUsed {
  const int64_t* position;
  int64_t* last;
  int64_t window;
  HETERPS_HD void operator()(int64_t i) const {
    if (position[i] >= 0) last[position[i]] = window;
  }
};

// out[i] = row `position[i]`'s value, for the keys that are resident.
struct GatherValues {
  const int64_t* position;
  const float* values;
  float* out;
  int64_t dim;
  HETERPS_HD void operator()(int64_t k) const {
    const int64_t i = k / dim, d = k % dim;
    if (position[i] >= 0) out[k] = values[position[i] * dim + d];
  }
};

// The sum of a distinct key's gradients, in the order they came: segment u of the keys sorted
// (stably) by key, `order` the original positions.
struct SumSegments {
  const int64_t* start;  // per distinct key: its first sorted position
  const int64_t* count;
  const int64_t* order;
  const float* grads;
  float* sums;
  int64_t dim;
  HETERPS_HD void operator()(int64_t k) const {
    const int64_t u = k / dim, d = k % dim;
    float s = 0.0f;
    for (int64_t j = start[u]; j < start[u] + count[u]; ++j) s += grads[order[j] * dim + d];
    sums[k] = s;
  }
};

// One optimizer update of each resident distinct key's row (optimizer.h's ApplyUpdate, the same
// arithmetic).
struct Update {
  const int64_t* position;
  const float* grads;  // per distinct key
  float* values;
  float* state;
  int64_t* steps;
  int32_t* dirty;
  int64_t dim;
  int kind;  // OptimizerKind
  float lr, beta1, beta2, epsilon;
  HETERPS_HD void operator()(int64_t u) const {
    const int64_t p = position[u];
    if (p < 0) return;
    const int64_t step = ++steps[p];
    dirty[p] = 1;
    float* w = values + p * dim;
    const float* g = grads + u * dim;
    if (kind == 0) {  // sgd
      for (int64_t i = 0; i < dim; ++i) w[i] -= lr * g[i];
    } else if (kind == 1) {  // adagrad
      float* a = state + p * dim;
      for (int64_t i = 0; i < dim; ++i) {
        a[i] += g[i] * g[i];
        w[i] -= lr * g[i] / (sqrtf(a[i]) + epsilon);
      }
    } else {  // adam
      float* m = state + p * 2 * dim;
      float* v = m + dim;
      const double c1 = 1 - pow(static_cast<double>(beta1), static_cast<double>(step));
      const double c2 = 1 - pow(static_cast<double>(beta2), static_cast<double>(step));
      for (int64_t i = 0; i < dim; ++i) {
        m[i] = beta1 * m[i] + (1 - beta1) * g[i];
        v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
        const double m_hat = m[i] / c1, v_hat = v[i] / c2;
        w[i] -= static_cast<float>(lr * m_hat / (sqrt(v_hat) + epsilon));
      }
    }
  }
};

// Element (b, d) of bag b's vector (ps/bags.h's PoolBags, the same arithmetic): the rows of
// the bag's keys, each resident (position >= 0: the slot's row) or fetched from the servers
// (position -2 - j: row j of `fetched`).
struct PoolOnDevice {
  const int64_t* position;  // per key
  const float* values;      // the table's slots
  const float* fetched;
  const int32_t* offsets;  // null: one-hot
  int64_t slots, dim;
  int mean;
  float* out;
  int64_t stride, column;
  HETERPS_HD const float* Row(int64_t k) const {
    const int64_t p = position[k];
    return p >= 0 ? values + p * dim : fetched + (-2 - p) * dim;
  }
  HETERPS_HD void operator()(int64_t e) const {
    const int64_t b = e / dim, d = e % dim;
    float* v = out + (b / slots) * stride + column + (b % slots) * dim + d;
    if (offsets == nullptr) {
      *v = Row(b)[d];
      return;
    }
    const int32_t begin = offsets[b], end = offsets[b + 1];
    float sum = 0.0f;
    for (int32_t k = begin; k < end; ++k) sum += Row(k)[d];
    if (mean && end > begin) sum *= 1.0f / static_cast<float>(end - begin);
    *v = sum;
  }
};

// Element (b, d) of the gradients of bag b's keys from the bag's (ps/bags.h's SpreadBagGrads).
struct SpreadOnDevice {
  const float* d_bags;
  int64_t stride, column;
  const int32_t* offsets;  // null: one-hot
  int64_t slots, dim;
  int mean;
  float* grads;  // per key
  HETERPS_HD void operator()(int64_t e) const {
    const int64_t b = e / dim, d = e % dim;
    const float g = d_bags[(b / slots) * stride + column + (b % slots) * dim + d];
    if (offsets == nullptr) {
      grads[b * dim + d] = g;
      return;
    }
    const int32_t begin = offsets[b], end = offsets[b + 1];
    const float scale = mean ? 1.0f / static_cast<float>(end - begin > 1 ? end - begin : 1) : 1.0f;
    for (int32_t k = begin; k < end; ++k) grads[int64_t{k} * dim + d] = g * scale;
  }
};

// Marks the keys fetched from the servers: missing key j (at position `at[j]`) reads row j of
// the fetched rows.
struct MarkFetched {
  const int64_t* at;
  int64_t* position;
  HETERPS_HD void operator()(int64_t j) const { position[at[j]] = -2 - j; }
};

// Copies `width` elements per row from rows `from[i]` of `in` to row i of `out`.
template <typename T>
struct GatherRows {
  const int64_t* from;
  const T* in;
  T* out;
  int64_t width;
  HETERPS_HD void operator()(int64_t k) const {
    const int64_t i = k / width, d = k % width;
    out[k] = in[from[i] * width + d];
  }
};

// Copies `width` elements per row from row i of `in` to rows `to[i]` of `out`.
template <typename T>
struct ScatterRows {
  const int64_t* to;
  const T* in;
  T* out;
  int64_t width;
  HETERPS_HD void operator()(int64_t k) const {
    const int64_t i = k / width, d = k % width;
    out[to[i] * width + d] = in[k];
  }
};

// Sets element `to[i]` of `out` to `value`.
template <typename T>
struct SetAt {
  const int64_t* to;
  T* out;
  T value;
  HETERPS_HD void operator()(int64_t i) const { out[to[i]] = value; }
};

class Engine : public TierEngine {
 public:
  explicit Engine(gpu::Device* device) : device_(device) {}
  ~Engine() override {
    // A fetch ahead still in flight writes into its table's rows: wait for it.
    for (auto& [table, t] : tables_) TakeAhead(t);
  }

  absl::Status AddTable(int table, const SparseTableOptions& options, int64_t capacity) override {
    Table& t = tables_[table];
    t.options = options;
    t.dim = options.dim;
    t.state = StateFloats(options.optimizer.kind) * options.dim;
    t.capacity = capacity;
    t.free.clear();
    for (int64_t slot = capacity - 1; slot >= 0; --slot) t.free.push_back(slot);
    HETERPS_RETURN_IF_ERROR(t.keys.Reserve(device_, capacity));
    HETERPS_RETURN_IF_ERROR(t.slots.Reserve(device_, capacity));
    HETERPS_RETURN_IF_ERROR(t.slot_keys.Reserve(device_, capacity));
    HETERPS_RETURN_IF_ERROR(t.values.Reserve(device_, capacity * t.dim));
    HETERPS_RETURN_IF_ERROR(
        t.state_floats.Reserve(device_, std::max<int64_t>(1, capacity * t.state)));
    HETERPS_RETURN_IF_ERROR(t.steps.Reserve(device_, capacity));
    HETERPS_RETURN_IF_ERROR(t.last.Reserve(device_, capacity));
    return t.dirty.Reserve(device_, capacity);
  }

  bool Has(int table) const override { return tables_.count(table) > 0; }

  absl::Status Prefetch(int table, absl::Span<const uint64_t> keys, PsClient* target) override {
    Table& t = tables_.at(table);
    ++window_;
    t.passed_before = std::move(t.passed);
    t.passed.clear();
    t.unloaded.clear();
    // What was fetched ahead for this window serves its loads (Load) and goes with it.
    const auto drop = absl::MakeCleanup([this, &t] { TakeAhead(t); });
    HETERPS_RETURN_IF_ERROR(UploadKeys(t, keys));
    int64_t w = 0;
    HETERPS_ASSIGN_OR_RETURN(std::vector<Miss> misses, Misses(t, keys.size(), &w));
    Run(w, MarkUsed{positions_.data(), t.last.data(), window_});
    if (misses.empty()) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(MakeRoom(t, static_cast<int64_t>(misses.size()), target));
    return Load(t, Hottest(std::move(misses), t.capacity - t.r, &t.unloaded), target);
  }

  absl::Status Anticipate(int table, absl::Span<const uint64_t> keys,
                          PsClient* target) override {
    Table& t = tables_.at(table);
    TakeAhead(t);  // one named earlier and not taken: dropped
    if (keys.empty()) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(UploadKeys(t, keys, /*ahead=*/true));
    int64_t w = 0;
    HETERPS_ASSIGN_OR_RETURN(std::vector<Miss> misses, Misses(t, keys.size(), &w));
    // What the next window's Prefetch will load (as it chooses, nothing resident changing until
    // then): its most frequent misses, as many as the rows it does not use leave room for.
    const int64_t used = w - static_cast<int64_t>(misses.size());
    const std::vector<uint64_t> load = Hottest(std::move(misses), t.capacity - used, nullptr);
    // Not the keys whose rows the servers may still change before the next window: this window's
    // misses that found no room (their gradients pass through now) and the keys that passed
    // through in the window before (its commit may not be behind every fetch).
    std::vector<uint64_t> passing = t.unloaded;
    passing.insert(passing.end(), t.passed_before.begin(), t.passed_before.end());
    passing.insert(passing.end(), t.passed.begin(), t.passed.end());
    std::sort(passing.begin(), passing.end());
    Table::Ahead& a = t.ahead;
    std::set_difference(load.begin(), load.end(), passing.begin(), passing.end(),
                        std::back_inserter(a.keys));
    if (a.keys.empty()) return absl::OkStatus();
    a.target = target;
    a.ticket = target->ExportRows(table, a.keys, &a.rows);
    stats_.fetched_ahead_rows += static_cast<int64_t>(a.keys.size());
    return absl::OkStatus();
  }

  absl::Status Pull(int table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                    PsClient* target) override {
    Table& t = tables_.at(table);
    const int64_t n = static_cast<int64_t>(keys.size());
    HETERPS_RETURN_IF_ERROR(CheckRowFloats("pull", values.size(), keys.size(), t.dim));
    if (n == 0) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(UploadKeys(t, keys));
    HETERPS_RETURN_IF_ERROR(Locate(t, scratch_keys_.data(), n));
    HETERPS_RETURN_IF_ERROR(rows_.Reserve(device_, n * t.dim));
    Run(n * t.dim, GatherValues{positions_.data(), t.values.data(), rows_.data(), t.dim});
    HETERPS_RETURN_IF_ERROR(Download(values.data(), rows_.data(), n * t.dim));
    // The keys that are not resident (none where the window's prefetch found room for all), from
    // the servers.
    HETERPS_ASSIGN_OR_RETURN(const int64_t m, Missing(n));
    std::vector<int64_t> at(m);
    HETERPS_RETURN_IF_ERROR(Download(at.data(), lower_.data(), m));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    std::vector<uint64_t> missing;
    for (int64_t i : at) missing.push_back(keys[i]);
    stats_.hits += n - m;
    stats_.misses += m;
    if (missing.empty()) return absl::OkStatus();
    std::vector<float> fetched(missing.size() * t.dim);
    HETERPS_RETURN_IF_ERROR(
        target->Wait(target->PullSparse(table, missing, absl::MakeSpan(fetched))));
    for (size_t j = 0; j < at.size(); ++j) {
      std::copy_n(fetched.begin() + j * t.dim, t.dim, values.begin() + at[j] * t.dim);
    }
    return absl::OkStatus();
  }

  absl::Status Push(int table, absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                    bool accumulate, int part, PsClient* target) override {
    Table& t = tables_.at(table);
    const int64_t n = static_cast<int64_t>(keys.size());
    HETERPS_RETURN_IF_ERROR(CheckRowFloats("push", grads.size(), keys.size(), t.dim));
    if (n == 0) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(UploadKeys(t, keys));
    HETERPS_RETURN_IF_ERROR(Upload(grads_in_, grads));
    return PushUploaded(table, t, n, accumulate, part, target);
  }

  absl::Status LookupBags(int table, const Bags& bags, float* out, int64_t stride, int64_t column,
                          PsClient* target) override {
    Table& t = tables_.at(table);
    const int64_t n = static_cast<int64_t>(bags.keys.size());
    if (bags.bags() == 0) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(UploadKeys(t, bags.keys));
    HETERPS_ASSIGN_OR_RETURN(const int32_t* offsets, UploadOffsets(t, bags));
    HETERPS_RETURN_IF_ERROR(Locate(t, scratch_keys_.data(), n));
    // The keys that are not resident (none where the window's prefetch found room for all): their
    // rows from the servers, up to the device.
    HETERPS_ASSIGN_OR_RETURN(const int64_t m, Missing(n));
    stats_.hits += n - m;
    stats_.misses += m;
    std::vector<float> fetched;
    if (m > 0) {
      std::vector<int64_t> at(m);
      HETERPS_RETURN_IF_ERROR(Download(at.data(), lower_.data(), m));
      HETERPS_RETURN_IF_ERROR(device_->Synchronize());
      std::vector<uint64_t> missing;
      for (int64_t i : at) missing.push_back(bags.keys[i]);
      fetched.resize(m * t.dim);
      HETERPS_RETURN_IF_ERROR(
          target->Wait(target->PullSparse(table, missing, absl::MakeSpan(fetched))));
      HETERPS_RETURN_IF_ERROR(Upload(spare_floats_, absl::MakeConstSpan(fetched)));
      Run(m, MarkFetched{lower_.data(), positions_.data()});
    }
    Run(bags.bags() * t.dim,
        PoolOnDevice{positions_.data(), t.values.data(), spare_floats_.data(), offsets, bags.slots,
                     t.dim, bags.mean ? 1 : 0, out, stride, column});
    // The fetched rows, host memory the upload reads, are done with once the stream is.
    return m > 0 ? device_->Synchronize() : absl::OkStatus();
  }

  absl::Status PushBags(int table, const Bags& bags, const float* grads, int64_t stride,
                        int64_t column, bool accumulate, int part, PsClient* target) override {
    Table& t = tables_.at(table);
    const int64_t n = static_cast<int64_t>(bags.keys.size());
    if (n == 0) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(UploadKeys(t, bags.keys));
    HETERPS_ASSIGN_OR_RETURN(const int32_t* offsets, UploadOffsets(t, bags));
    HETERPS_RETURN_IF_ERROR(grads_in_.Reserve(device_, n * t.dim));
    Run(bags.bags() * t.dim, SpreadOnDevice{grads, stride, column, offsets, bags.slots, t.dim,
                                            bags.mean ? 1 : 0, grads_in_.data()});
    return PushUploaded(table, t, n, accumulate, part, target);
  }

  int64_t dim(int table) const override { return tables_.at(table).dim; }

  absl::Status Flush(PsClient* target) override {
    for (auto& [table, t] : tables_) {
      // A fetch ahead in flight is done before the end of the round (a checkpoint follows): the
      // rows it makes exist then, whatever the timing. It still serves the next window.
      Settle(t);
      if (t.r == 0) continue;
      std::vector<int64_t> slots(t.r);
      std::vector<int32_t> dirty(t.capacity);
      HETERPS_RETURN_IF_ERROR(Download(slots.data(), t.slots.data(), t.r));
      HETERPS_RETURN_IF_ERROR(Download(dirty.data(), t.dirty.data(), t.capacity));
      HETERPS_RETURN_IF_ERROR(device_->Synchronize());
      std::vector<int64_t> rows;  // the changed rows' slots, in key order
      for (int64_t slot : slots) {
        if (dirty[slot]) rows.push_back(slot);
      }
      HETERPS_RETURN_IF_ERROR(WriteBack(table, t, rows, target));
      HETERPS_RETURN_IF_ERROR(device_->Fill(t.dirty.data(), 0, t.capacity * sizeof(int32_t)));
    }
    return device_->Synchronize();
  }

  GpuTierStats stats() const override {
    GpuTierStats s = stats_;
    s.resident_rows = 0;
    for (const auto& [table, t] : tables_) s.resident_rows += t.r;
    return s;
  }

 private:
  // What an upload carried, on the host and on the device.
  template <typename T>
  struct Sent {
    std::vector<T> host;
    DeviceArray<T> device;
  };

  struct Table {
    SparseTableOptions options;
    int64_t dim = 0, state = 0, capacity = 0;
    int64_t r = 0;  // resident rows
    // The index: the resident keys sorted in [0, r), each with its slot.
    DeviceArray<uint64_t> keys;
    DeviceArray<int64_t> slots;
    // Per slot, [0, capacity): the row's key, value, optimizer state, update count, the window
    // of its last use, whether it changed since it was last written back.
    DeviceArray<uint64_t> slot_keys;
    DeviceArray<float> values, state_floats;
    DeviceArray<int64_t> steps, last;
    DeviceArray<int32_t> dirty;
    std::vector<int64_t> free;  // the slots no row holds (the next one taken from the back)
    Sent<uint64_t> sent_keys;   // the table's last keys uploaded (UploadKeys)
    Sent<uint64_t> ahead_keys;  // the next window's, uploaded by Anticipate
    Sent<int32_t> sent_offsets;
    // Rows fetched ahead for the next window (Anticipate), while this one runs: distinct keys in
    // key order; their rows, in flight until `ticket` is waited for (target != null); the keys
    // written to the servers since the fetch began (not taken: Changed).
    struct Ahead {
      std::vector<uint64_t> keys;
      RowBatch rows;
      PsClient* target = nullptr;
      Ticket ticket = 0;
      bool waited = false, whole = false;  // Settle: waited for, and every row came
      std::vector<uint64_t> changed;
    } ahead;
    // The keys whose gradients passed through to the servers in this window and in the one
    // before, and this window's misses that found no room (sorted).
    std::vector<uint64_t> passed, passed_before, unloaded;
  };

  // Waits for the fetch ahead of table t, if one is in flight, and keeps whether it brought every
  // row (the call writes into t.ahead.rows until then).
  void Settle(Table& t) {
    Table::Ahead& a = t.ahead;
    if (a.target == nullptr || a.waited) return;
    a.whole = a.target->Wait(a.ticket).ok() &&
              a.rows.values.size() == a.keys.size() * t.dim &&
              a.rows.state.size() == a.keys.size() * t.state && a.rows.steps.size() == a.keys.size();
    a.waited = true;
  }

  // The rows fetched ahead for table t, waited for and taken from it; none (no keys) where none
  // were asked for or the fetch failed (the loads then fetch them again).
  Table::Ahead TakeAhead(Table& t) {
    Settle(t);
    Table::Ahead a = std::move(t.ahead);
    t.ahead = Table::Ahead();
    if (!a.whole) return Table::Ahead();
    std::sort(a.changed.begin(), a.changed.end());
    return a;
  }

  // Keys written to the servers (gradients passed through, rows written back): a fetch ahead in
  // flight or done may hold their rows from before.
  void Changed(Table& t, absl::Span<const uint64_t> keys) {
    if (t.ahead.target == nullptr) return;
    t.ahead.changed.insert(t.ahead.changed.end(), keys.begin(), keys.end());
  }

  // The rows of `load` (sorted, distinct), in that order: each from the rows fetched ahead where
  // they hold it and nothing since can have changed it, else from the servers (asked before the
  // fetch ahead is waited for, so that the two calls overlap).
  absl::Status FetchRows(Table& t, int table, const std::vector<uint64_t>& load, PsClient* target,
                         RowBatch* rows) {
    const std::vector<uint64_t>& ahead_keys = t.ahead.keys;  // until TakeAhead, below
    std::vector<uint64_t> changed = t.ahead.changed;
    std::sort(changed.begin(), changed.end());
    std::vector<int64_t> from(load.size(), -1);  // the row's index among the rows fetched ahead
    std::vector<uint64_t> fetch;
    for (size_t i = 0; i < load.size(); ++i) {
      const auto it = std::lower_bound(ahead_keys.begin(), ahead_keys.end(), load[i]);
      if (it != ahead_keys.end() && *it == load[i] &&
          !std::binary_search(changed.begin(), changed.end(), load[i])) {
        from[i] = it - ahead_keys.begin();
      } else {
        fetch.push_back(load[i]);
      }
    }
    const auto all = [&] { return target->Wait(target->ExportRows(table, load, rows)); };
    if (fetch.size() == load.size()) {
      TakeAhead(t);  // none of its rows serve
      return all();
    }
    RowBatch fetched;
    const Ticket ticket = fetch.empty() ? 0 : target->ExportRows(table, fetch, &fetched);
    const Table::Ahead a = TakeAhead(t);
    if (!fetch.empty()) HETERPS_RETURN_IF_ERROR(target->Wait(ticket));
    if (a.keys.empty()) return all();  // the fetch ahead failed: every row from the servers
    const size_t m = load.size(), dim = t.dim, state = t.state;
    rows->values.resize(m * dim);
    rows->state.resize(m * state);
    rows->steps.resize(m);
    for (size_t i = 0, f = 0; i < m; ++i) {
      const bool ahead = from[i] >= 0;
      const RowBatch& in = ahead ? a.rows : fetched;
      const size_t j = ahead ? static_cast<size_t>(from[i]) : f++;
      std::copy_n(in.values.data() + j * dim, dim, rows->values.data() + i * dim);
      std::copy_n(in.state.data() + j * state, state, rows->state.data() + i * state);
      rows->steps[i] = in.steps[j];
    }
    stats_.ahead_rows += static_cast<int64_t>(m - fetch.size());
    return absl::OkStatus();
  }

  // Push's work after its n keys are in scratch_keys_ and their gradients in grads_in_.
  absl::Status PushUploaded(int table, Table& t, int64_t n, bool accumulate, int part,
                            PsClient* target) {
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream(), scratch_);
    // Merge the duplicates: sort the keys stably (their positions along), then per distinct key
    // the sum of its gradients in the order they came, as the servers sum them.
    HETERPS_RETURN_IF_ERROR(order_.Reserve(device_, n));
    thrust::sequence(policy, order_.data(), order_.data() + n);
    thrust::stable_sort_by_key(policy, scratch_keys_.data(), scratch_keys_.data() + n,
                               order_.data());
    HETERPS_RETURN_IF_ERROR(distinct_.Reserve(device_, n));
    HETERPS_RETURN_IF_ERROR(counts_.Reserve(device_, n));
    const auto ends = thrust::reduce_by_key(policy, scratch_keys_.data(), scratch_keys_.data() + n,
                                            thrust::constant_iterator<int64_t>(1), distinct_.data(),
                                            counts_.data());
    const int64_t u = ends.first - distinct_.data();
    HETERPS_RETURN_IF_ERROR(starts_.Reserve(device_, u));
    thrust::exclusive_scan(policy, counts_.data(), counts_.data() + u, starts_.data());
    HETERPS_RETURN_IF_ERROR(rows_.Reserve(device_, u * t.dim));
    Run(u * t.dim, SumSegments{starts_.data(), counts_.data(), order_.data(), grads_in_.data(),
                               rows_.data(), t.dim});
    // The resident ones updated here; the others to the servers, summed (in key order). None
    // where the window's prefetch found room for all: then nothing comes back to the host, and
    // the update runs on while the host goes on (the stream orders it before any later work).
    HETERPS_RETURN_IF_ERROR(Locate(t, distinct_.data(), u));
    HETERPS_ASSIGN_OR_RETURN(const int64_t m, Missing(u));
    const OptimizerOptions& o = t.options.optimizer;
    Run(u, Update{positions_.data(), rows_.data(), t.values.data(), t.state_floats.data(),
                  t.steps.data(), t.dirty.data(), t.dim, static_cast<int>(o.kind), o.learning_rate,
                  o.beta1, o.beta2, o.epsilon});
    if (m == 0) return absl::OkStatus();
    std::vector<uint64_t> pass_keys(m);
    std::vector<float> pass_grads(m * t.dim);
    HETERPS_RETURN_IF_ERROR(spare_keys_.Reserve(device_, m));
    HETERPS_RETURN_IF_ERROR(spare_floats_.Reserve(device_, m * t.dim));
    thrust::gather(policy, lower_.data(), lower_.data() + m, distinct_.data(), spare_keys_.data());
    Run(m * t.dim, GatherRows<float>{lower_.data(), rows_.data(), spare_floats_.data(), t.dim});
    HETERPS_RETURN_IF_ERROR(Download(pass_keys.data(), spare_keys_.data(), m));
    HETERPS_RETURN_IF_ERROR(Download(pass_grads.data(), spare_floats_.data(), m * t.dim));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    t.passed.insert(t.passed.end(), pass_keys.begin(), pass_keys.end());
    Changed(t, pass_keys);
    return target->Wait(accumulate ? target->AccumulateSparse(table, pass_keys, pass_grads, part)
                                   : target->PushSparse(table, pass_keys, pass_grads));
  }

  // `keys` of table t into scratch_keys_ (which the callers reorder); the bags' offsets on the
  // device (null for one-hot bags). What a table's last upload carried stays on the device, so
  // that the same keys (a window's prefetch and its one micro-batch's lookup, a lookup and its
  // backward's push) cross PCIe once: the host compares, the device copies. The next window's
  // keys (`ahead`: Anticipate) are kept apart, and become the window's at its Prefetch, so that a
  // step's keys still cross once.
  absl::Status UploadKeys(Table& t, absl::Span<const uint64_t> keys, bool ahead = false) {
    HETERPS_RETURN_IF_ERROR(scratch_keys_.Reserve(device_, std::max<size_t>(keys.size(), 1)));
    const auto same = [&keys](const Sent<uint64_t>& sent) {
      return std::equal(keys.begin(), keys.end(), sent.host.begin(), sent.host.end());
    };
    if (ahead && same(t.sent_keys)) {
      return device_->CopyOnDevice(scratch_keys_.data(), t.sent_keys.device.data(),
                                   keys.size() * sizeof(uint64_t));
    }
    if (!ahead && !same(t.sent_keys) && same(t.ahead_keys)) std::swap(t.sent_keys, t.ahead_keys);
    return UploadOnce(ahead ? t.ahead_keys : t.sent_keys, scratch_keys_.data(), keys);
  }
  absl::StatusOr<const int32_t*> UploadOffsets(Table& t, const Bags& bags) {
    if (bags.one_hot()) return nullptr;
    HETERPS_RETURN_IF_ERROR(offsets_.Reserve(device_, std::max<size_t>(bags.offsets.size(), 1)));
    HETERPS_RETURN_IF_ERROR(UploadOnce(t.sent_offsets, offsets_.data(), bags.offsets));
    return offsets_.data();
  }
  template <typename T>
  absl::Status UploadOnce(Sent<T>& sent, T* to, absl::Span<const T> from) {
    if (from.empty()) return absl::OkStatus();
    if (!std::equal(from.begin(), from.end(), sent.host.begin(), sent.host.end())) {
      sent.host.clear();  // until the upload has succeeded
      HETERPS_RETURN_IF_ERROR(Upload(sent.device, from));
      sent.host.assign(from.begin(), from.end());
    }
    return device_->CopyOnDevice(to, sent.device.data(), from.size() * sizeof(T));
  }

  template <typename F>
  void Run(int64_t n, const F& f) {
    if (n <= 0) return;
    thrust::for_each_n(gpu::HETERPS_GPU_TARGET::Policy(device_->stream(), scratch_),
                       thrust::counting_iterator<int64_t>(0), n, f);
  }

  template <typename T>
  absl::Status Upload(DeviceArray<T>& to, absl::Span<const T> from) {
    HETERPS_RETURN_IF_ERROR(to.Reserve(device_, std::max<size_t>(from.size(), 1)));
    return device_->CopyToDevice(to.data(), from.data(), from.size() * sizeof(T));
  }
  template <typename T>
  absl::Status Download(T* to, const T* from, int64_t n) {
    return device_->CopyToHost(to, from, static_cast<size_t>(n) * sizeof(T));
  }

  // positions_[i] = the slot of query[i]'s row, or -1 where it is not resident.
  absl::Status Locate(Table& t, const uint64_t* query, int64_t n) {
    HETERPS_RETURN_IF_ERROR(lower_.Reserve(device_, std::max<int64_t>(n, 1)));
    HETERPS_RETURN_IF_ERROR(positions_.Reserve(device_, std::max<int64_t>(n, 1)));
    if (n == 0) return absl::OkStatus();
    thrust::lower_bound(gpu::HETERPS_GPU_TARGET::Policy(device_->stream(), scratch_),
                        t.keys.data(), t.keys.data() + t.r, query, query + n, lower_.data());
    Run(n, FindRows{t.keys.data(), t.slots.data(), t.r, query, lower_.data(), positions_.data()});
    return absl::OkStatus();
  }

  // The positions i < n whose positions_[i] is -1 (not resident), in order, into lower_ (which
  // Locate filled and its caller no longer needs); how many.
  absl::StatusOr<int64_t> Missing(int64_t n) {
    if (n == 0) return 0;
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream(), scratch_);
    const int64_t* end = thrust::copy_if(policy, thrust::counting_iterator<int64_t>(0),
                                         thrust::counting_iterator<int64_t>(n), positions_.data(),
                                         lower_.data(), NotResident());
    return static_cast<int64_t>(end - lower_.data());
  }

  // A window's missing key: (-how often it comes, the key), so that the hottest sort first.
  using Miss = std::pair<int64_t, uint64_t>;

  // What a window whose misses are `misses` loads into `room` free rows: its most frequent misses
  // (key order among equals), the keys sorted; the others into *left (sorted) unless null.
  static std::vector<uint64_t> Hottest(std::vector<Miss> misses, int64_t room,
                                       std::vector<uint64_t>* left) {
    room = std::max<int64_t>(room, 0);
    if (static_cast<int64_t>(misses.size()) > room) {
      std::stable_sort(misses.begin(), misses.end());
      for (size_t i = room; left != nullptr && i < misses.size(); ++i) {
        left->push_back(misses[i].second);
      }
      if (left != nullptr) std::sort(left->begin(), left->end());
      misses.resize(room);
    }
    std::vector<uint64_t> keys;
    for (const auto& [count, key] : misses) keys.push_back(key);
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  // The window's n keys in scratch_keys_ (which it sorts): its distinct keys (*distinct of them,
  // in distinct_, located among the resident rows in positions_) and, to the host, those that are
  // not resident, in key order.
  absl::StatusOr<std::vector<Miss>> Misses(Table& t, int64_t n, int64_t* distinct) {
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream(), scratch_);
    thrust::sort(policy, scratch_keys_.data(), scratch_keys_.data() + n);
    HETERPS_RETURN_IF_ERROR(distinct_.Reserve(device_, std::max<int64_t>(n, 1)));
    HETERPS_RETURN_IF_ERROR(counts_.Reserve(device_, std::max<int64_t>(n, 1)));
    const auto ends = thrust::reduce_by_key(policy, scratch_keys_.data(), scratch_keys_.data() + n,
                                            thrust::constant_iterator<int64_t>(1), distinct_.data(),
                                            counts_.data());
    const int64_t w = ends.first - distinct_.data();
    *distinct = w;
    HETERPS_RETURN_IF_ERROR(Locate(t, distinct_.data(), w));
    HETERPS_ASSIGN_OR_RETURN(const int64_t m, Missing(w));
    std::vector<Miss> misses;
    if (m == 0) return misses;
    std::vector<uint64_t> keys(m);
    std::vector<int64_t> counts(m);
    HETERPS_RETURN_IF_ERROR(spare_keys_.Reserve(device_, m));
    HETERPS_RETURN_IF_ERROR(spare_ints_.Reserve(device_, m));
    thrust::gather(policy, lower_.data(), lower_.data() + m, distinct_.data(), spare_keys_.data());
    thrust::gather(policy, lower_.data(), lower_.data() + m, counts_.data(), spare_ints_.data());
    HETERPS_RETURN_IF_ERROR(Download(keys.data(), spare_keys_.data(), m));
    HETERPS_RETURN_IF_ERROR(Download(counts.data(), spare_ints_.data(), m));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    for (int64_t i = 0; i < m; ++i) misses.push_back({-counts[i], keys[i]});
    return misses;
  }

  // Frees room for `wanted` rows, up to all the rows this window does not use, least recently
  // used first (in key order among equals); the changed ones are written back.
  absl::Status MakeRoom(Table& t, int64_t wanted, PsClient* target) {
    const int64_t short_by = wanted - (t.capacity - t.r);
    if (short_by <= 0 || t.r == 0) return absl::OkStatus();
    std::vector<int64_t> slots(t.r), last(t.capacity);
    std::vector<int32_t> dirty(t.capacity);
    HETERPS_RETURN_IF_ERROR(Download(slots.data(), t.slots.data(), t.r));
    HETERPS_RETURN_IF_ERROR(Download(last.data(), t.last.data(), t.capacity));
    HETERPS_RETURN_IF_ERROR(Download(dirty.data(), t.dirty.data(), t.capacity));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    std::vector<int64_t> idle;  // positions in the index of the rows this window does not use
    for (int64_t i = 0; i < t.r; ++i) {
      if (last[slots[i]] < window_) idle.push_back(i);
    }
    std::stable_sort(idle.begin(), idle.end(),
                     [&](int64_t a, int64_t b) { return last[slots[a]] < last[slots[b]]; });
    idle.resize(std::min<int64_t>(short_by, static_cast<int64_t>(idle.size())));
    if (idle.empty()) return absl::OkStatus();
    std::sort(idle.begin(), idle.end());
    std::vector<int64_t> changed;  // their slots, in key order
    for (int64_t i : idle) {
      if (dirty[slots[i]]) changed.push_back(slots[i]);
    }
    HETERPS_RETURN_IF_ERROR(WriteBack(-1, t, changed, target));
    // The index keeps the others, in key order; the evicted rows' slots are free.
    std::vector<char> evict(t.r, 0);
    for (int64_t i : idle) {
      evict[i] = 1;
      t.free.push_back(slots[i]);
    }
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < t.r; ++i) {
      if (!evict[i]) keep.push_back(i);
    }
    stats_.evicted_rows += static_cast<int64_t>(idle.size());
    return Compact(t, keep);
  }

  // The index becomes its entries `keep` (ascending), in that order.
  absl::Status Compact(Table& t, const std::vector<int64_t>& keep) {
    const int64_t k = static_cast<int64_t>(keep.size());
    HETERPS_RETURN_IF_ERROR(Upload(order_, absl::MakeConstSpan(keep)));
    HETERPS_RETURN_IF_ERROR(spare_keys_.Reserve(device_, t.capacity));
    HETERPS_RETURN_IF_ERROR(spare_ints_.Reserve(device_, t.capacity));
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream(), scratch_);
    thrust::gather(policy, order_.data(), order_.data() + k, t.keys.data(), spare_keys_.data());
    thrust::gather(policy, order_.data(), order_.data() + k, t.slots.data(), spare_ints_.data());
    return TakeIndex(t, k);  // and `keep`, host memory the upload reads, is done with
  }

  // The index becomes the k entries built in spare_keys_ and spare_ints_; waits for the stream,
  // so that the host memory the caller's uploads read may go.
  absl::Status TakeIndex(Table& t, int64_t k) {
    HETERPS_RETURN_IF_ERROR(
        device_->CopyOnDevice(t.keys.data(), spare_keys_.data(), k * sizeof(uint64_t)));
    HETERPS_RETURN_IF_ERROR(
        device_->CopyOnDevice(t.slots.data(), spare_ints_.data(), k * sizeof(int64_t)));
    t.r = k;
    return device_->Synchronize();
  }

  // Brings the rows of `load` (sorted, none resident, a free slot for each) from the servers.
  absl::Status Load(Table& t, const std::vector<uint64_t>& load, PsClient* target) {
    const int64_t m = static_cast<int64_t>(load.size());
    if (m == 0) return absl::OkStatus();
    const int table = TableId(t);
    RowBatch rows;
    HETERPS_RETURN_IF_ERROR(FetchRows(t, table, load, target, &rows));
    // Their slots, and the index's new entries after its r resident ones.
    std::vector<int64_t> slots(m);
    for (int64_t& slot : slots) {
      slot = t.free.back();
      t.free.pop_back();
    }
    const int64_t at = t.r;
    HETERPS_RETURN_IF_ERROR(
        device_->CopyToDevice(t.keys.data() + at, load.data(), m * sizeof(uint64_t)));
    HETERPS_RETURN_IF_ERROR(
        device_->CopyToDevice(t.slots.data() + at, slots.data(), m * sizeof(int64_t)));
    const int64_t* to = t.slots.data() + at;
    // The rows into their slots, through scratch.
    HETERPS_RETURN_IF_ERROR(spare_floats_.Reserve(
        device_, std::max<int64_t>(1, m * std::max(t.dim, t.state))));
    HETERPS_RETURN_IF_ERROR(spare_ints_.Reserve(device_, std::max<int64_t>(m, t.capacity)));
    Run(m, ScatterRows<uint64_t>{to, t.keys.data() + at, t.slot_keys.data(), 1});
    HETERPS_RETURN_IF_ERROR(
        device_->CopyToDevice(spare_floats_.data(), rows.values.data(), m * t.dim * sizeof(float)));
    Run(m * t.dim, ScatterRows<float>{to, spare_floats_.data(), t.values.data(), t.dim});
    if (t.state > 0) {
      HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(spare_floats_.data(), rows.state.data(),
                                                    m * t.state * sizeof(float)));
      Run(m * t.state, ScatterRows<float>{to, spare_floats_.data(), t.state_floats.data(), t.state});
    }
    HETERPS_RETURN_IF_ERROR(
        device_->CopyToDevice(spare_ints_.data(), rows.steps.data(), m * sizeof(int64_t)));
    Run(m, ScatterRows<int64_t>{to, spare_ints_.data(), t.steps.data(), 1});
    Run(m, SetAt<int64_t>{to, t.last.data(), window_});
    Run(m, SetAt<int32_t>{to, t.dirty.data(), 0});
    stats_.loaded_rows += m;
    // The index sorted again: its resident keys [0, at) and the loaded ones [at, total) are each
    // sorted and share none, so one merge sorts them (keys and slots: 16 bytes an entry).
    const int64_t total = at + m;
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream(), scratch_);
    HETERPS_RETURN_IF_ERROR(spare_keys_.Reserve(device_, t.capacity));
    thrust::merge_by_key(policy, t.keys.data(), t.keys.data() + at, t.keys.data() + at,
                         t.keys.data() + total, t.slots.data(), t.slots.data() + at,
                         spare_keys_.data(), spare_ints_.data());
    return TakeIndex(t, total);  // and `rows` and `slots`, host memory the copies read, are done
  }

  // Writes the rows in slots `rows` of `t` back to the servers (in that order), and counts them.
  absl::Status WriteBack(int table, Table& t, const std::vector<int64_t>& rows, PsClient* target) {
    const int64_t k = static_cast<int64_t>(rows.size());
    if (k == 0) return absl::OkStatus();
    if (table < 0) table = TableId(t);
    HETERPS_RETURN_IF_ERROR(Upload(order_, absl::MakeConstSpan(rows)));
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream(), scratch_);
    HETERPS_RETURN_IF_ERROR(spare_keys_.Reserve(device_, std::max<int64_t>(k, 1)));
    HETERPS_RETURN_IF_ERROR(spare_ints_.Reserve(device_, std::max<int64_t>(k, 1)));
    HETERPS_RETURN_IF_ERROR(
        spare_floats_.Reserve(device_, std::max<int64_t>(1, k * std::max(t.dim, t.state))));
    std::vector<uint64_t> keys(k);
    RowBatch batch;
    batch.values.resize(k * t.dim);
    batch.state.resize(k * t.state);
    batch.steps.resize(k);
    thrust::gather(policy, order_.data(), order_.data() + k, t.slot_keys.data(),
                   spare_keys_.data());
    HETERPS_RETURN_IF_ERROR(Download(keys.data(), spare_keys_.data(), k));
    thrust::gather(policy, order_.data(), order_.data() + k, t.steps.data(), spare_ints_.data());
    HETERPS_RETURN_IF_ERROR(Download(batch.steps.data(), spare_ints_.data(), k));
    Run(k * t.dim,
        GatherRows<float>{order_.data(), t.values.data(), spare_floats_.data(), t.dim});
    HETERPS_RETURN_IF_ERROR(Download(batch.values.data(), spare_floats_.data(), k * t.dim));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    if (t.state > 0) {
      Run(k * t.state,
          GatherRows<float>{order_.data(), t.state_floats.data(), spare_floats_.data(), t.state});
      HETERPS_RETURN_IF_ERROR(Download(batch.state.data(), spare_floats_.data(), k * t.state));
      HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    }
    Changed(t, keys);
    HETERPS_RETURN_IF_ERROR(target->Wait(target->ImportRows(table, keys, batch)));
    stats_.written_back_rows += k;
    return absl::OkStatus();
  }

  int TableId(const Table& t) const {
    for (const auto& [id, table] : tables_) {
      if (&table == &t) return id;
    }
    return -1;
  }

  gpu::Device* const device_;
  std::map<int, Table> tables_;
  int64_t window_ = 0;
  GpuTierStats stats_;
  gpu::Scratch scratch_{device_};  // Thrust's temporary storage
  // Scratch, grown as needed and reused.
  DeviceArray<uint64_t> scratch_keys_, distinct_, spare_keys_;
  DeviceArray<int64_t> counts_, lower_, positions_, order_, starts_, spare_ints_;
  DeviceArray<float> grads_in_, rows_, spare_floats_;
  DeviceArray<int32_t> offsets_;
};

// The raw gather: a row index per output row, as random as a tier's lookups, nothing else.
absl::StatusOr<double> RawGatherImpl(gpu::Device* device, int64_t rows, int64_t dim, int64_t n,
                                     int repeats) {
  HETERPS_ASSIGN_OR_RETURN(auto table, DeviceArray<float>::Make(device, rows * dim));
  HETERPS_ASSIGN_OR_RETURN(auto out, DeviceArray<float>::Make(device, n * dim));
  HETERPS_ASSIGN_OR_RETURN(auto index, DeviceArray<int64_t>::Make(device, n));
  std::vector<int64_t> host(n);
  uint64_t state = 12345;
  for (int64_t& i : host) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    i = static_cast<int64_t>((state >> 17) % static_cast<uint64_t>(rows));
  }
  HETERPS_RETURN_IF_ERROR(device->Fill(table.data(), 1, rows * dim * sizeof(float)));
  HETERPS_RETURN_IF_ERROR(device->CopyToDevice(index.data(), host.data(), n * sizeof(int64_t)));
  auto policy = gpu::HETERPS_GPU_TARGET::Policy(device->stream());
  auto run = [&] {
    thrust::for_each_n(policy, thrust::counting_iterator<int64_t>(0), n * dim,
                       GatherRows<float>{index.data(), table.data(), out.data(), dim});
  };
  run();  // warm-up
  HETERPS_RETURN_IF_ERROR(device->Synchronize());
  const absl::Time start = absl::Now();
  for (int r = 0; r < repeats; ++r) run();
  HETERPS_RETURN_IF_ERROR(device->Synchronize());
  return static_cast<double>(n) * repeats / absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace
}  // namespace heterps::ps::HETERPS_GPU_TARGET
