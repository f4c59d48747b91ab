#include "heterps/ps/gpu/gpu_tier.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/ps/gpu/tier_engine.h"

namespace heterps::ps {

int64_t TierRowBytes(const SparseTableOptions& options) {
  // Its key and slot in the index; in its slot: its key, value and state floats, update count,
  // the window of its last use, a dirty flag.
  return 8 + 8 + 8 + 4 * options.dim * (1 + StateFloats(options.optimizer.kind)) + 8 + 8 + 4;
}

absl::StatusOr<std::unique_ptr<GpuTier>> GpuTier::Create(PsClient* target, gpu::Device* device,
                                                         const GpuTierOptions& options) {
  if (options.memory_budget_bytes <= 0) {
    return absl::InvalidArgumentError("GPU tier: a memory budget is required");
  }
  std::unique_ptr<TierEngine> engine;
  if (device->info().emulated) {
    engine = twin::NewTierEngine(device);
  } else {
    HETERPS_ASSIGN_OR_RETURN(engine, cuda::NewCudaTierEngine(device));
  }
  return std::unique_ptr<GpuTier>(new GpuTier(target, device, options, std::move(engine)));
}

GpuTier::GpuTier(PsClient* target, gpu::Device* device, const GpuTierOptions& options,
                 std::unique_ptr<TierEngine> engine)
    : ForwardingPsClient(target), device_(device), options_(options), engine_(std::move(engine)) {}

GpuTier::~GpuTier() = default;

std::vector<int64_t> SplitTierBudget(int64_t budget_bytes, const std::vector<TierTable>& tables) {
  __int128 total = 0;  // bytes of every row of every table
  for (const TierTable& t : tables) {
    total += static_cast<__int128>(std::max<int64_t>(t.rows, 0)) * TierRowBytes(t.options);
  }
  std::vector<int64_t> capacity;
  for (const TierTable& t : tables) {
    const int64_t rows = std::max<int64_t>(t.rows, 0);
    // rows x budget / total, rounded down: the table's bytes are its share of the budget.
    capacity.push_back(total <= budget_bytes
                           ? rows
                           : static_cast<int64_t>(static_cast<__int128>(rows) *
                                                  std::max<int64_t>(budget_bytes, 0) / total));
  }
  return capacity;
}

absl::Status GpuTier::AddTables(const std::vector<TierTable>& tables) {
  if (added_) return absl::InvalidArgumentError("GPU tier: the tables are added once");
  added_ = true;
  std::set<int> seen;
  for (const TierTable& t : tables) {
    if (t.rows < 1 || !seen.insert(t.table).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GPU tier: table ", t.table, t.rows < 1 ? " has no rows" : " is named twice"));
    }
  }
  const std::vector<int64_t> capacity = SplitTierBudget(options_.memory_budget_bytes, tables);
  for (size_t i = 0; i < tables.size(); ++i) {
    if (capacity[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU tier: ", options_.memory_budget_bytes, " bytes for ", tables.size(),
                       " tables hold no row of table ", tables[i].table));
    }
  }
  for (size_t i = 0; i < tables.size(); ++i) {
    HETERPS_RETURN_IF_ERROR(engine_->AddTable(tables[i].table, tables[i].options, capacity[i]));
    reserved_bytes_ += capacity[i] * TierRowBytes(tables[i].options);
  }
  return absl::OkStatus();
}

Ticket GpuTier::Done(absl::Status status) {
  absl::MutexLock lock(&mu_);
  const Ticket ticket = next_--;
  done_.emplace(ticket, std::move(status));
  return ticket;
}

Ticket GpuTier::PullSparse(int table, absl::Span<const uint64_t> keys, absl::Span<float> values) {
  if (!engine_->Has(table)) return ForwardingPsClient::PullSparse(table, keys, values);
  return Done(engine_->Pull(table, keys, values, target()));
}

Ticket GpuTier::PushSparse(int table, absl::Span<const uint64_t> keys,
                           absl::Span<const float> grads) {
  if (!engine_->Has(table)) return ForwardingPsClient::PushSparse(table, keys, grads);
  return Done(engine_->Push(table, keys, grads, false, 0, target()));
}

Ticket GpuTier::AccumulateSparse(int table, absl::Span<const uint64_t> keys,
                                 absl::Span<const float> grads, int part) {
  if (!engine_->Has(table)) {
    return ForwardingPsClient::AccumulateSparse(table, keys, grads, part);
  }
  return Done(engine_->Push(table, keys, grads, true, part, target()));
}

absl::Status GpuTier::Prefetch(int table, absl::Span<const uint64_t> keys) {
  if (!engine_->Has(table)) return ForwardingPsClient::Prefetch(table, keys);
  return engine_->Prefetch(table, keys, target());
}

absl::Status GpuTier::Anticipate(int table, absl::Span<const uint64_t> keys) {
  if (!engine_->Has(table)) return ForwardingPsClient::Anticipate(table, keys);
  return engine_->Anticipate(table, keys, target());
}

bool GpuTier::Holds(int table) const { return engine_->Has(table); }

absl::Status GpuTier::CheckBagRows(const char* what, int table, const Bags& bags, const float* data,
                                   int64_t stride, int64_t column) const {
  if (!engine_->Has(table)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU tier: ", what, " of table ", table, ", which has no rows on ", device_->info().name));
  }
  HETERPS_RETURN_IF_ERROR(CheckBags(bags, absl::StrCat("GPU tier: ", what)));
  const int64_t width = bags.slots * engine_->dim(table);
  if (column < 0 || column + width > stride) {
    return absl::InvalidArgumentError(absl::StrCat("GPU tier: ", what, ": ", width,
                                                   " floats from column ", column,
                                                   " do not fit rows of ", stride));
  }
  if (bags.samples == 0) return absl::OkStatus();
  const size_t bytes = static_cast<size_t>((bags.samples - 1) * stride + width) * sizeof(float);
  if (data == nullptr || !device_->IsDeviceMemory(data + column, bytes)) {
    return absl::InvalidArgumentError(absl::StrCat("GPU tier: ", what, ": the ", bytes,
                                                   " bytes of the bags' vectors are not memory of ",
                                                   device_->info().name));
  }
  return absl::OkStatus();
}

absl::Status GpuTier::LookupBags(int table, const Bags& bags, float* out, int64_t stride,
                                 int64_t column) {
  HETERPS_RETURN_IF_ERROR(CheckBagRows("lookup", table, bags, out, stride, column));
  return engine_->LookupBags(table, bags, out, stride, column, target());
}

absl::Status GpuTier::PushBags(int table, const Bags& bags, const float* grads, int64_t stride,
                               int64_t column) {
  HETERPS_RETURN_IF_ERROR(CheckBagRows("push", table, bags, grads, stride, column));
  return engine_->PushBags(table, bags, grads, stride, column, false, 0, target());
}

absl::Status GpuTier::AccumulateBags(int table, const Bags& bags, const float* grads,
                                     int64_t stride, int64_t column, int part) {
  HETERPS_RETURN_IF_ERROR(CheckBagRows("push", table, bags, grads, stride, column));
  return engine_->PushBags(table, bags, grads, stride, column, true, part, target());
}

absl::Status GpuTier::Flush() {
  HETERPS_RETURN_IF_ERROR(engine_->Flush(target()));
  return ForwardingPsClient::Flush();
}

absl::Status GpuTier::ExportDeltas(int table, float threshold, std::vector<uint64_t>* keys,
                                   std::vector<float>* deltas) {
  if (engine_->Has(table)) HETERPS_RETURN_IF_ERROR(engine_->Flush(target()));
  return ForwardingPsClient::ExportDeltas(table, threshold, keys, deltas);
}

absl::Status GpuTier::AddDeltas(int table, absl::Span<const uint64_t> keys,
                                absl::Span<const float> deltas) {
  HETERPS_RETURN_IF_ERROR(RefuseStale(table));
  return ForwardingPsClient::AddDeltas(table, keys, deltas);
}

absl::Status GpuTier::ExportWindow(int table, float threshold, std::vector<uint64_t>* keys,
                                   std::vector<float>* deltas) {
  if (engine_->Has(table)) HETERPS_RETURN_IF_ERROR(engine_->Flush(target()));
  return ForwardingPsClient::ExportWindow(table, threshold, keys, deltas);
}

absl::Status GpuTier::ApplyWindow(int table, absl::Span<const uint64_t> keys,
                                  absl::Span<const float> merged, absl::Span<const float> own) {
  HETERPS_RETURN_IF_ERROR(RefuseStale(table));
  return ForwardingPsClient::ApplyWindow(table, keys, merged, own);
}

absl::Status GpuTier::RefuseStale(int table) const {
  if (!engine_->Has(table)) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("GPU tier: deltas of other regions for table ", table, ", whose rows on ",
                   device_->info().name, " they would leave stale"));
}

absl::Status GpuTier::ExportPending(PendingParts* out) {
  if (reserved_bytes_ > 0) {  // it holds a table
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU tier: the step's pending parts, part of which it merges on ", device_->info().name));
  }
  return ForwardingPsClient::ExportPending(out);
}

absl::Status GpuTier::Wait(Ticket ticket) {
  if (ticket >= 0) return ForwardingPsClient::Wait(ticket);
  absl::MutexLock lock(&mu_);
  auto it = done_.find(ticket);
  if (it == done_.end()) return absl::NotFoundError(absl::StrCat("no pending ticket ", ticket));
  absl::Status status = std::move(it->second);
  done_.erase(it);
  return status;
}

absl::StatusOr<double> RawGatherRowsPerSecond(gpu::Device* device, int64_t rows, int64_t dim,
                                              int64_t n, int repeats) {
  if (device->info().emulated) return twin::RawGather(device, rows, dim, n, repeats);
  return cuda::RawGather(device, rows, dim, n, repeats);
}

GpuTierStats GpuTier::stats() const {
  GpuTierStats s = engine_->stats();
  const gpu::DeviceCounters c = device_->counters();
  s.host_to_device_bytes = c.host_to_device_bytes;
  s.device_to_host_bytes = c.device_to_host_bytes;
  s.reserved_bytes = reserved_bytes_;
  return s;
}

}  // namespace heterps::ps
