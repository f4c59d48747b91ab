#include "heterps/ps/ps_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"

namespace heterps::ps {

KeyPlan PlanKeys(absl::Span<const uint64_t> keys, int num_servers) {
  KeyPlan plan;
  plan.keys.resize(num_servers);
  const size_t n = keys.size();
  plan.where.resize(n);
  if (n == 0) return plan;
  // An open-addressing set of the batch's keys (linear probing, at most half full), each entry
  // holding its key's index among its server's keys; the entry of the key kAhead positions on is
  // fetched ahead, so that the cache misses of several keys overlap. A table of up to kKept
  // entries is the calling thread's, kept between calls of the same size: an entry belongs to
  // this call only if it carries this call's generation, so that nothing is cleared. A larger one
  // (a batch of more than kKept / 2 keys, as a checkpoint's) is the call's own.
  struct Entry {
    uint64_t key;
    uint32_t generation;
    int32_t index;
  };
  constexpr size_t kKept = size_t{1} << 18;  // 4 MiB a thread at most
  thread_local std::vector<Entry> kept;
  thread_local uint32_t generation = 0;
  int shift = 64 - 4;  // the slot is the mixed key's top bits
  while ((size_t{1} << (64 - shift)) < 2 * n) --shift;
  const size_t mask = (size_t{1} << (64 - shift)) - 1;
  std::vector<Entry> own;
  std::vector<Entry>* table = &own;
  uint32_t now = 1;
  if (mask + 1 > kKept) {
    own.assign(mask + 1, Entry{0, 0, 0});
  } else {
    if (kept.size() != mask + 1 || ++generation == 0) {
      kept.assign(mask + 1, Entry{0, 0, 0});
      generation = 1;
    }
    table = &kept;
    now = generation;
  }
  Entry* const entries = table->data();
  const uint64_t servers = static_cast<uint64_t>(num_servers);
  for (auto& server_keys : plan.keys) server_keys.reserve(n / num_servers + n / (4 * num_servers));
  constexpr size_t kAhead = 16;
  for (size_t i = 0; i < std::min(n, kAhead); ++i) {
    __builtin_prefetch(&entries[MixKey(keys[i]) >> shift], 1);
  }
  for (size_t i = 0; i < n; ++i) {
    if (i + kAhead < n) __builtin_prefetch(&entries[MixKey(keys[i + kAhead]) >> shift], 1);
    const uint64_t key = keys[i], mixed = MixKey(key);
    // ServerOf, from the mix already computed (no division for one server).
    const int server = servers == 1 ? 0 : static_cast<int>(mixed % servers);
    size_t slot = mixed >> shift;
    while (entries[slot].generation == now && entries[slot].key != key) slot = (slot + 1) & mask;
    Entry& entry = entries[slot];
    if (entry.generation != now) {
      entry = Entry{key, now, static_cast<int32_t>(plan.keys[server].size())};
      plan.keys[server].push_back(key);
    }
    plan.where[i] = {server, entry.index};
  }
  return plan;
}

absl::Status InProcessPsClient::CreateSparseTable(
    int table, const SparseTableOptions& options,
    const std::function<std::unique_ptr<ColdStore>(int server)>& make_cold) {
  std::vector<std::unique_ptr<SparseTable>> shards;
  for (int s = 0; s < num_servers_; ++s) {
    HETERPS_ASSIGN_OR_RETURN(auto shard,
                             SparseTable::Create(options, make_cold ? make_cold(s) : nullptr));
    shards.push_back(std::move(shard));
  }
  absl::MutexLock lock(&mu_);
  if (!sparse_.emplace(table, std::move(shards)).second) {
    return absl::AlreadyExistsError(absl::StrCat("sparse table ", table, " exists"));
  }
  return absl::OkStatus();
}

absl::Status InProcessPsClient::CreateDenseTable(int table, const DenseTableOptions& options) {
  HETERPS_ASSIGN_OR_RETURN(auto dense, DenseTable::Create(options));
  absl::MutexLock lock(&mu_);
  if (!dense_.emplace(table, std::move(dense)).second) {
    return absl::AlreadyExistsError(absl::StrCat("dense table ", table, " exists"));
  }
  return absl::OkStatus();
}

SparseTable* InProcessPsClient::sparse(int table, int server) {
  absl::MutexLock lock(&mu_);
  auto it = sparse_.find(table);
  return it == sparse_.end() ? nullptr : it->second[server].get();
}

DenseTable* InProcessPsClient::dense(int table) {
  absl::MutexLock lock(&mu_);
  auto it = dense_.find(table);
  return it == dense_.end() ? nullptr : it->second.get();
}

absl::StatusOr<std::vector<SparseTable*>> InProcessPsClient::Sparse(int table) {
  absl::MutexLock lock(&mu_);
  auto it = sparse_.find(table);
  if (it == sparse_.end()) return absl::NotFoundError(absl::StrCat("no sparse table ", table));
  std::vector<SparseTable*> shards;
  for (auto& s : it->second) shards.push_back(s.get());
  return shards;
}

Ticket InProcessPsClient::Done(absl::Status status) {
  absl::MutexLock lock(&mu_);
  done_.emplace(next_, std::move(status));
  return next_++;
}

Ticket InProcessPsClient::PullSparse(int table, absl::Span<const uint64_t> keys,
                                     absl::Span<float> values) {
  auto pull = [&]() -> absl::Status {
    HETERPS_ASSIGN_OR_RETURN(std::vector<SparseTable*> shards, Sparse(table));
    const int dim = shards[0]->dim();
    HETERPS_RETURN_IF_ERROR(CheckRowFloats("pull", values.size(), keys.size(), dim));
    KeyPlan plan = PlanKeys(keys, num_servers_);
    std::vector<std::vector<float>> answers(num_servers_);
    for (int s = 0; s < num_servers_; ++s) {
      answers[s].resize(plan.keys[s].size() * dim);
      HETERPS_RETURN_IF_ERROR(shards[s]->Pull(plan.keys[s], absl::MakeSpan(answers[s])));
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [s, j] = plan.where[i];
      std::copy_n(answers[s].begin() + static_cast<ptrdiff_t>(j) * dim, dim,
                  values.begin() + static_cast<ptrdiff_t>(i) * dim);
    }
    return absl::OkStatus();
  };
  return Done(pull());
}

absl::Status InProcessPsClient::SumByServer(
    int table, absl::Span<const uint64_t> keys, absl::Span<const float> grads,
    const std::function<absl::Status(int, SparseTable*, const std::vector<uint64_t>&,
                                     const std::vector<float>&)>& deliver) {
  HETERPS_ASSIGN_OR_RETURN(std::vector<SparseTable*> shards, Sparse(table));
  const int dim = shards[0]->dim();
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("push", grads.size(), keys.size(), dim));
  KeyPlan plan = PlanKeys(keys, num_servers_);
  std::vector<std::vector<float>> sums(num_servers_);
  for (int s = 0; s < num_servers_; ++s) sums[s].assign(plan.keys[s].size() * dim, 0.0f);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [s, j] = plan.where[i];
    for (int d = 0; d < dim; ++d) sums[s][j * dim + d] += grads[i * dim + d];
  }
  for (int s = 0; s < num_servers_; ++s) {
    HETERPS_RETURN_IF_ERROR(deliver(s, shards[s], plan.keys[s], sums[s]));
  }
  return absl::OkStatus();
}

Ticket InProcessPsClient::PushSparse(int table, absl::Span<const uint64_t> keys,
                                     absl::Span<const float> grads) {
  return Done(SumByServer(table, keys, grads,
                          [](int, SparseTable* shard, const std::vector<uint64_t>& k,
                             const std::vector<float>& sums) { return shard->Push(k, sums); }));
}

Ticket InProcessPsClient::AccumulateSparse(int table, absl::Span<const uint64_t> keys,
                                           absl::Span<const float> grads, int part) {
  return Done(SumByServer(table, keys, grads,
                          [&](int server, SparseTable*, const std::vector<uint64_t>& k,
                              const std::vector<float>& sums) {
                            if (!k.empty()) pending_[server].AddSparse(table, part, k, sums);
                            return absl::OkStatus();
                          }));
}

Ticket InProcessPsClient::AccumulateDense(int table, int block, absl::Span<const double> grads,
                                          int part) {
  DenseTable* t = dense(table);
  if (t == nullptr) return Done(absl::NotFoundError(absl::StrCat("no dense table ", table)));
  if (block < 0 || block >= t->num_blocks() ||
      static_cast<int64_t>(grads.size()) != t->block_size(block)) {
    return Done(
        absl::InvalidArgumentError(absl::StrCat("accumulate: dense table ", table, " has no block ",
                                                block, " of ", grads.size(), " floats")));
  }
  return Done(pending_[table % num_servers_].AddDense(table, block, part, grads));
}

absl::Status InProcessPsClient::Commit() {
  absl::Status status;
  for (int s = 0; s < num_servers_; ++s)
    status.Update(pending_[s].Apply(Tables(s), PendingUpdates::DefaultThreads()));
  return status;
}

CheckpointTables InProcessPsClient::Tables(int server) {
  absl::MutexLock lock(&mu_);
  CheckpointTables tables;
  for (auto& [id, shards] : sparse_) tables.sparse[id] = shards[server].get();
  for (auto& [id, table] : dense_) {
    if (id % num_servers_ == server) tables.dense[id] = table.get();
  }
  return tables;
}

std::vector<Ticket> PsClient::PullDenseBlocks(int table, absl::Span<const DensePull> blocks) {
  std::vector<Ticket> tickets;
  for (const DensePull& b : blocks) tickets.push_back(PullDense(table, b.block, b.values));
  return tickets;
}

std::vector<Ticket> PsClient::PushDenseBlocks(int table, absl::Span<const DensePush> blocks) {
  std::vector<Ticket> tickets;
  for (const DensePush& b : blocks) tickets.push_back(PushDense(table, b.block, b.grads));
  return tickets;
}

Ticket InProcessPsClient::PullDense(int table, int block, absl::Span<float> values) {
  DenseTable* t = dense(table);
  return Done(t == nullptr ? absl::NotFoundError(absl::StrCat("no dense table ", table))
                           : t->Pull(block, values));
}

Ticket InProcessPsClient::PushDense(int table, int block, absl::Span<const float> grads) {
  DenseTable* t = dense(table);
  return Done(t == nullptr ? absl::NotFoundError(absl::StrCat("no dense table ", table))
                           : t->Push(block, grads));
}

Ticket InProcessPsClient::ExportDense(int table, int block, int64_t offset, int64_t count,
                                      DenseSlice* out) {
  DenseTable* t = dense(table);
  return Done(t == nullptr ? absl::NotFoundError(absl::StrCat("no dense table ", table))
                           : t->ReadSlice(block, offset, count, out));
}

Ticket InProcessPsClient::ImportDense(int table, int block, int64_t offset,
                                      const DenseSlice& slice) {
  DenseTable* t = dense(table);
  return Done(t == nullptr ? absl::NotFoundError(absl::StrCat("no dense table ", table))
                           : t->WriteSlice(block, offset, slice));
}

namespace {

// The rows of `batch` at positions `at` (of `floats_per_row` floats each) appended to `out`.
void Take(const RowBatch& batch, const std::vector<size_t>& at, int dim, int state, RowBatch* out) {
  for (size_t i : at) {
    out->values.insert(out->values.end(), batch.values.begin() + i * dim,
                       batch.values.begin() + (i + 1) * dim);
    out->state.insert(out->state.end(), batch.state.begin() + i * state,
                      batch.state.begin() + (i + 1) * state);
    out->steps.push_back(batch.steps[i]);
  }
}

}  // namespace

Ticket InProcessPsClient::ExportRows(int table, absl::Span<const uint64_t> keys, RowBatch* out) {
  auto run = [&]() -> absl::Status {
    HETERPS_ASSIGN_OR_RETURN(std::vector<SparseTable*> shards, Sparse(table));
    const int dim = shards[0]->dim();
    const int state = StateFloats(shards[0]->options().optimizer.kind) * dim;
    KeyPlan plan = PlanKeys(keys, num_servers_);
    std::vector<RowBatch> parts(num_servers_);
    for (int s = 0; s < num_servers_; ++s) {
      HETERPS_RETURN_IF_ERROR(shards[s]->Export(plan.keys[s], &parts[s]));
    }
    *out = RowBatch();
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [s, j] = plan.where[i];
      Take(parts[s], {static_cast<size_t>(j)}, dim, state, out);
    }
    return absl::OkStatus();
  };
  return Done(run());
}

Ticket InProcessPsClient::ImportRows(int table, absl::Span<const uint64_t> keys,
                                     const RowBatch& rows) {
  auto run = [&]() -> absl::Status {
    HETERPS_ASSIGN_OR_RETURN(std::vector<SparseTable*> shards, Sparse(table));
    const int dim = shards[0]->dim();
    const int state = StateFloats(shards[0]->options().optimizer.kind) * dim;
    if (rows.steps.size() != keys.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("import: ", rows.steps.size(), " rows for ", keys.size(), " keys"));
    }
    std::vector<std::vector<uint64_t>> server_keys(num_servers_);
    std::vector<std::vector<size_t>> at(num_servers_);
    for (size_t i = 0; i < keys.size(); ++i) {
      const int s = ServerOf(keys[i], num_servers_);
      server_keys[s].push_back(keys[i]);
      at[s].push_back(i);
    }
    for (int s = 0; s < num_servers_; ++s) {
      RowBatch part;
      Take(rows, at[s], dim, state, &part);
      HETERPS_RETURN_IF_ERROR(shards[s]->Import(server_keys[s], part));
    }
    return absl::OkStatus();
  };
  return Done(run());
}

absl::Status InProcessPsClient::Wait(Ticket ticket) {
  absl::MutexLock lock(&mu_);
  auto it = done_.find(ticket);
  if (it == done_.end()) return absl::NotFoundError(absl::StrCat("no pending ticket ", ticket));
  absl::Status status = std::move(it->second);
  done_.erase(it);
  return status;
}

}  // namespace heterps::ps
