// The GPU tier's engine: written once, built twice (gpu/target.h): twin_tier.cc for the host
// twin (g++, Thrust's OpenMP backend), cuda_tier.cu for CUDA GPUs (nvcc). The data-parallel work
// (sorting and de-duplicating a window's keys, finding them among the resident rows, gathering
// rows, merging duplicate gradients, the optimizer's updates, picking dirty rows) runs on the
// device with Thrust and small functors; the decisions over a window's misses and evictions,
// which are as many as the window's distinct keys, run on the host.
//
// Per table, the resident rows are kept sorted by key in parallel device arrays (keys, values,
// optimizer state, update counts, the window of each row's last use, dirty flags), so that a
// batch of keys finds its rows with one vectorised lower_bound.
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
#include <map>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/gpu/target.h"
#include "heterps/ps/gpu/tier_engine.h"

namespace heterps::ps::HETERPS_GPU_TARGET {
namespace {

using gpu::DeviceArray;

// Where query key i sits among the r sorted resident keys: its position, or -1.
struct FindRows {
  const uint64_t* resident;
  int64_t r;
  const uint64_t* query;
  const int64_t* lower;  // lower_bound of each query
  int64_t* position;
  HETERPS_HD void operator()(int64_t i) const {
    const int64_t p = lower[i];
    position[i] = p < r && resident[p] == query[i] ? p : -1;
  }
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

// Copies `width` floats per row from rows `from[i]` of `in` to row i of `out`.
struct GatherRows {
  const int64_t* from;
  const float* in;
  float* out;
  int64_t width;
  HETERPS_HD void operator()(int64_t k) const {
    const int64_t i = k / width, d = k % width;
    out[k] = in[from[i] * width + d];
  }
};

class Engine : public TierEngine {
 public:
  explicit Engine(gpu::Device* device) : device_(device) {}

  absl::Status AddTable(int table, const SparseTableOptions& options, int64_t capacity) override {
    Table& t = tables_[table];
    t.options = options;
    t.dim = options.dim;
    t.state = StateFloats(options.optimizer.kind) * options.dim;
    t.capacity = capacity;
    HETERPS_RETURN_IF_ERROR(t.keys.Reserve(device_, capacity));
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
    // The window's distinct keys and how often each comes, sorted.
    HETERPS_RETURN_IF_ERROR(Upload(scratch_keys_, keys));
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream());
    const int64_t n = static_cast<int64_t>(keys.size());
    thrust::sort(policy, scratch_keys_.data(), scratch_keys_.data() + n);
    HETERPS_RETURN_IF_ERROR(distinct_.Reserve(device_, std::max<int64_t>(n, 1)));
    HETERPS_RETURN_IF_ERROR(counts_.Reserve(device_, std::max<int64_t>(n, 1)));
    const auto ends = thrust::reduce_by_key(policy, scratch_keys_.data(), scratch_keys_.data() + n,
                                            thrust::constant_iterator<int64_t>(1), distinct_.data(),
                                            counts_.data());
    const int64_t w = ends.first - distinct_.data();
    HETERPS_RETURN_IF_ERROR(Locate(t, distinct_.data(), w));
    Run(w, MarkUsed{positions_.data(), t.last.data(), window_});
    // On the host: which distinct keys are missing, and how hot each is.
    std::vector<uint64_t> window_keys(w);
    std::vector<int64_t> counts(w), where(w);
    HETERPS_RETURN_IF_ERROR(Download(window_keys.data(), distinct_.data(), w));
    HETERPS_RETURN_IF_ERROR(Download(counts.data(), counts_.data(), w));
    HETERPS_RETURN_IF_ERROR(Download(where.data(), positions_.data(), w));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    std::vector<std::pair<int64_t, uint64_t>> misses;  // (-count, key): hottest first
    for (int64_t i = 0; i < w; ++i) {
      if (where[i] < 0) misses.push_back({-counts[i], window_keys[i]});
    }
    if (misses.empty()) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(MakeRoom(t, static_cast<int64_t>(misses.size()), target));
    const int64_t room = t.capacity - t.r;
    if (static_cast<int64_t>(misses.size()) > room) {
      std::stable_sort(misses.begin(), misses.end());
      misses.resize(room);
    }
    std::vector<uint64_t> load;
    for (const auto& [count, key] : misses) load.push_back(key);
    std::sort(load.begin(), load.end());
    return Load(t, load, target);
  }

  absl::Status Pull(int table, absl::Span<const uint64_t> keys, absl::Span<float> values,
                    PsClient* target) override {
    Table& t = tables_.at(table);
    const int64_t n = static_cast<int64_t>(keys.size());
    HETERPS_RETURN_IF_ERROR(CheckRowFloats("pull", values.size(), keys.size(), t.dim));
    if (n == 0) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(Upload(scratch_keys_, keys));
    HETERPS_RETURN_IF_ERROR(Locate(t, scratch_keys_.data(), n));
    HETERPS_RETURN_IF_ERROR(rows_.Reserve(device_, n * t.dim));
    Run(n * t.dim, GatherValues{positions_.data(), t.values.data(), rows_.data(), t.dim});
    std::vector<int64_t> where(n);
    HETERPS_RETURN_IF_ERROR(Download(where.data(), positions_.data(), n));
    HETERPS_RETURN_IF_ERROR(Download(values.data(), rows_.data(), n * t.dim));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    // The keys that are not resident, from the servers.
    std::vector<uint64_t> missing;
    std::vector<int64_t> at;
    for (int64_t i = 0; i < n; ++i) {
      if (where[i] < 0) {
        missing.push_back(keys[i]);
        at.push_back(i);
      }
    }
    stats_.hits += n - static_cast<int64_t>(missing.size());
    stats_.misses += static_cast<int64_t>(missing.size());
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
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream());
    // Merge the duplicates: sort the keys stably (their positions along), then per distinct key
    // the sum of its gradients in the order they came, as the servers sum them.
    HETERPS_RETURN_IF_ERROR(Upload(scratch_keys_, keys));
    HETERPS_RETURN_IF_ERROR(Upload(grads_in_, grads));
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
    // The resident ones updated here.
    HETERPS_RETURN_IF_ERROR(Locate(t, distinct_.data(), u));
    const OptimizerOptions& o = t.options.optimizer;
    Run(u, Update{positions_.data(), rows_.data(), t.values.data(), t.state_floats.data(),
                  t.steps.data(), t.dirty.data(), t.dim, static_cast<int>(o.kind), o.learning_rate,
                  o.beta1, o.beta2, o.epsilon});
    // The others to the servers, summed.
    std::vector<int64_t> where(u);
    std::vector<uint64_t> distinct(u);
    std::vector<float> sums(u * t.dim);
    HETERPS_RETURN_IF_ERROR(Download(where.data(), positions_.data(), u));
    HETERPS_RETURN_IF_ERROR(Download(distinct.data(), distinct_.data(), u));
    HETERPS_RETURN_IF_ERROR(Download(sums.data(), rows_.data(), u * t.dim));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    std::vector<uint64_t> pass_keys;
    std::vector<float> pass_grads;
    for (int64_t i = 0; i < u; ++i) {
      if (where[i] >= 0) continue;
      pass_keys.push_back(distinct[i]);
      pass_grads.insert(pass_grads.end(), sums.begin() + i * t.dim, sums.begin() + (i + 1) * t.dim);
    }
    if (pass_keys.empty()) return absl::OkStatus();
    return target->Wait(accumulate ? target->AccumulateSparse(table, pass_keys, pass_grads, part)
                                   : target->PushSparse(table, pass_keys, pass_grads));
  }

  absl::Status Flush(PsClient* target) override {
    for (auto& [table, t] : tables_) {
      if (t.r == 0) continue;
      std::vector<int32_t> dirty(t.r);
      HETERPS_RETURN_IF_ERROR(Download(dirty.data(), t.dirty.data(), t.r));
      HETERPS_RETURN_IF_ERROR(device_->Synchronize());
      std::vector<int64_t> rows;
      for (int64_t i = 0; i < t.r; ++i) {
        if (dirty[i]) rows.push_back(i);
      }
      HETERPS_RETURN_IF_ERROR(WriteBack(table, t, rows, target));
      HETERPS_RETURN_IF_ERROR(device_->Fill(t.dirty.data(), 0, t.r * sizeof(int32_t)));
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
  struct Table {
    SparseTableOptions options;
    int64_t dim = 0, state = 0, capacity = 0;
    int64_t r = 0;  // resident rows, sorted by key in [0, r)
    DeviceArray<uint64_t> keys;
    DeviceArray<float> values, state_floats;
    DeviceArray<int64_t> steps, last;
    DeviceArray<int32_t> dirty;
  };

  template <typename F>
  void Run(int64_t n, const F& f) {
    if (n <= 0) return;
    thrust::for_each_n(gpu::HETERPS_GPU_TARGET::Policy(device_->stream()),
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

  // positions_[i] = the resident row of query[i], or -1.
  absl::Status Locate(Table& t, const uint64_t* query, int64_t n) {
    HETERPS_RETURN_IF_ERROR(lower_.Reserve(device_, std::max<int64_t>(n, 1)));
    HETERPS_RETURN_IF_ERROR(positions_.Reserve(device_, std::max<int64_t>(n, 1)));
    if (n == 0) return absl::OkStatus();
    thrust::lower_bound(gpu::HETERPS_GPU_TARGET::Policy(device_->stream()), t.keys.data(),
                        t.keys.data() + t.r, query, query + n, lower_.data());
    Run(n, FindRows{t.keys.data(), t.r, query, lower_.data(), positions_.data()});
    return absl::OkStatus();
  }

  // Frees room for `wanted` rows, up to all the rows this window does not use, least recently
  // used first; the changed ones are written back.
  absl::Status MakeRoom(Table& t, int64_t wanted, PsClient* target) {
    const int64_t short_by = wanted - (t.capacity - t.r);
    if (short_by <= 0 || t.r == 0) return absl::OkStatus();
    std::vector<int64_t> last(t.r);
    std::vector<int32_t> dirty(t.r);
    HETERPS_RETURN_IF_ERROR(Download(last.data(), t.last.data(), t.r));
    HETERPS_RETURN_IF_ERROR(Download(dirty.data(), t.dirty.data(), t.r));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    std::vector<int64_t> idle;  // rows this window does not use
    for (int64_t i = 0; i < t.r; ++i) {
      if (last[i] < window_) idle.push_back(i);
    }
    std::stable_sort(idle.begin(), idle.end(),
                     [&](int64_t a, int64_t b) { return last[a] < last[b]; });
    idle.resize(std::min<int64_t>(short_by, static_cast<int64_t>(idle.size())));
    if (idle.empty()) return absl::OkStatus();
    std::vector<int64_t> changed;
    for (int64_t i : idle) {
      if (dirty[i]) changed.push_back(i);
    }
    std::sort(changed.begin(), changed.end());
    HETERPS_RETURN_IF_ERROR(WriteBack(-1, t, changed, target));
    // Keep the others, in key order.
    std::vector<char> evict(t.r, 0);
    for (int64_t i : idle) evict[i] = 1;
    std::vector<int64_t> keep;
    for (int64_t i = 0; i < t.r; ++i) {
      if (!evict[i]) keep.push_back(i);
    }
    stats_.evicted_rows += static_cast<int64_t>(idle.size());
    return Compact(t, keep);
  }

  // The table's rows become rows `keep` (ascending), in that order.
  absl::Status Compact(Table& t, const std::vector<int64_t>& keep) {
    const int64_t k = static_cast<int64_t>(keep.size());
    HETERPS_RETURN_IF_ERROR(Upload(order_, absl::MakeConstSpan(keep)));
    HETERPS_RETURN_IF_ERROR(Permute(t, order_.data(), k));
    t.r = k;
    return absl::OkStatus();
  }

  // Rows `from[0..k)` of every array of the table into rows 0..k.
  absl::Status Permute(Table& t, const int64_t* from, int64_t k) {
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream());
    HETERPS_RETURN_IF_ERROR(spare_keys_.Reserve(device_, t.capacity));
    HETERPS_RETURN_IF_ERROR(spare_floats_.Reserve(
        device_, std::max<int64_t>(1, t.capacity * std::max(t.dim, t.state))));
    HETERPS_RETURN_IF_ERROR(spare_ints_.Reserve(device_, t.capacity));
    thrust::gather(policy, from, from + k, t.keys.data(), spare_keys_.data());
    HETERPS_RETURN_IF_ERROR(
        device_->CopyOnDevice(t.keys.data(), spare_keys_.data(), k * sizeof(uint64_t)));
    for (auto [array, width] : {std::pair{&t.values, t.dim}, std::pair{&t.state_floats, t.state}}) {
      if (width == 0) continue;
      Run(k * width, GatherRows{from, array->data(), spare_floats_.data(), width});
      HETERPS_RETURN_IF_ERROR(
          device_->CopyOnDevice(array->data(), spare_floats_.data(), k * width * sizeof(float)));
    }
    for (DeviceArray<int64_t>* array : {&t.steps, &t.last}) {
      thrust::gather(policy, from, from + k, array->data(), spare_ints_.data());
      HETERPS_RETURN_IF_ERROR(
          device_->CopyOnDevice(array->data(), spare_ints_.data(), k * sizeof(int64_t)));
    }
    thrust::gather(policy, from, from + k, t.dirty.data(),
                   reinterpret_cast<int32_t*>(spare_ints_.data()));
    return device_->CopyOnDevice(t.dirty.data(), spare_ints_.data(), k * sizeof(int32_t));
  }

  // Brings the rows of `load` (sorted, none resident, room for all) from the servers.
  absl::Status Load(Table& t, const std::vector<uint64_t>& load, PsClient* target) {
    const int64_t m = static_cast<int64_t>(load.size());
    if (m == 0) return absl::OkStatus();
    const int table = TableId(t);
    RowBatch rows;
    HETERPS_RETURN_IF_ERROR(target->Wait(target->ExportRows(table, load, &rows)));
    const int64_t at = t.r;
    HETERPS_RETURN_IF_ERROR(
        device_->CopyToDevice(t.keys.data() + at, load.data(), m * sizeof(uint64_t)));
    HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(t.values.data() + at * t.dim, rows.values.data(),
                                                  m * t.dim * sizeof(float)));
    HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(t.state_floats.data() + at * t.state,
                                                  rows.state.data(), m * t.state * sizeof(float)));
    HETERPS_RETURN_IF_ERROR(
        device_->CopyToDevice(t.steps.data() + at, rows.steps.data(), m * sizeof(int64_t)));
    std::vector<int64_t> now(m, window_);
    HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(t.last.data() + at, now.data(), m * 8));
    HETERPS_RETURN_IF_ERROR(device_->Fill(t.dirty.data() + at, 0, m * sizeof(int32_t)));
    stats_.loaded_rows += m;
    // Sorted again: the resident keys [0, at) and the loaded ones [at, total) are each sorted and
    // share none, so one merge gives the permutation that sorts them (O(total), where a sort of
    // all of them was O(total log total)), applied to every array.
    const int64_t total = at + m;
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream());
    HETERPS_RETURN_IF_ERROR(order_.Reserve(device_, total));
    HETERPS_RETURN_IF_ERROR(spare_keys_.Reserve(device_, t.capacity));
    thrust::merge_by_key(policy, t.keys.data(), t.keys.data() + at, t.keys.data() + at,
                         t.keys.data() + total, thrust::counting_iterator<int64_t>(0),
                         thrust::counting_iterator<int64_t>(at), spare_keys_.data(),
                         order_.data());
    HETERPS_RETURN_IF_ERROR(Permute(t, order_.data(), total));
    t.r = total;
    return device_->Synchronize();
  }

  // Writes rows `rows` (ascending) of `t` back to the servers, and counts them.
  absl::Status WriteBack(int table, Table& t, const std::vector<int64_t>& rows, PsClient* target) {
    const int64_t k = static_cast<int64_t>(rows.size());
    if (k == 0) return absl::OkStatus();
    if (table < 0) table = TableId(t);
    HETERPS_RETURN_IF_ERROR(Upload(order_, absl::MakeConstSpan(rows)));
    auto policy = gpu::HETERPS_GPU_TARGET::Policy(device_->stream());
    HETERPS_RETURN_IF_ERROR(spare_keys_.Reserve(device_, std::max<int64_t>(k, 1)));
    HETERPS_RETURN_IF_ERROR(spare_ints_.Reserve(device_, std::max<int64_t>(k, 1)));
    HETERPS_RETURN_IF_ERROR(
        spare_floats_.Reserve(device_, std::max<int64_t>(1, k * std::max(t.dim, t.state))));
    std::vector<uint64_t> keys(k);
    RowBatch batch;
    batch.values.resize(k * t.dim);
    batch.state.resize(k * t.state);
    batch.steps.resize(k);
    thrust::gather(policy, order_.data(), order_.data() + k, t.keys.data(), spare_keys_.data());
    HETERPS_RETURN_IF_ERROR(Download(keys.data(), spare_keys_.data(), k));
    thrust::gather(policy, order_.data(), order_.data() + k, t.steps.data(), spare_ints_.data());
    HETERPS_RETURN_IF_ERROR(Download(batch.steps.data(), spare_ints_.data(), k));
    Run(k * t.dim, GatherRows{order_.data(), t.values.data(), spare_floats_.data(), t.dim});
    HETERPS_RETURN_IF_ERROR(Download(batch.values.data(), spare_floats_.data(), k * t.dim));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    if (t.state > 0) {
      Run(k * t.state,
          GatherRows{order_.data(), t.state_floats.data(), spare_floats_.data(), t.state});
      HETERPS_RETURN_IF_ERROR(Download(batch.state.data(), spare_floats_.data(), k * t.state));
      HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    }
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
  // Scratch, grown as needed and reused.
  DeviceArray<uint64_t> scratch_keys_, distinct_, spare_keys_;
  DeviceArray<int64_t> counts_, lower_, positions_, order_, starts_, spare_ints_;
  DeviceArray<float> grads_in_, rows_, spare_floats_;
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
                       GatherRows{index.data(), table.data(), out.data(), dim});
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
