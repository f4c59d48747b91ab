#include "heterps/ps/in_process_client.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/ps/key_plan.h"

namespace heterps::ps {

InProcessPsClient::InProcessPsClient(int num_servers) : num_servers_(num_servers) {
  for (int s = 0; s < num_servers; ++s) shards_.push_back(std::make_unique<Shard>());
}

absl::Status InProcessPsClient::CreateSparseTable(
    int table, const SparseTableOptions& options,
    const std::function<std::unique_ptr<ColdStore>(int server)>& make_cold) {
  // Every server's shard, or none: a table that exists anywhere exists on the first.
  if (shards_[0]->sparse(table) != nullptr) {
    return absl::AlreadyExistsError(absl::StrCat("sparse table ", table, " exists"));
  }
  std::vector<std::unique_ptr<SparseTable>> tables;
  for (int s = 0; s < num_servers_; ++s) {
    HETERPS_ASSIGN_OR_RETURN(auto shard,
                             SparseTable::Create(options, make_cold ? make_cold(s) : nullptr));
    tables.push_back(std::move(shard));
  }
  for (int s = 0; s < num_servers_; ++s) {
    HETERPS_RETURN_IF_ERROR(shards_[s]->AddSparse(table, std::move(tables[s])));
  }
  return absl::OkStatus();
}

absl::Status InProcessPsClient::CreateDenseTable(int table, const DenseTableOptions& options) {
  if (table < 0) return absl::InvalidArgumentError(absl::StrCat("table id ", table, " < 0"));
  HETERPS_ASSIGN_OR_RETURN(auto dense, DenseTable::Create(options));
  return shards_[table % num_servers_]->AddDense(table, std::move(dense));
}

SparseTable* InProcessPsClient::sparse(int table, int server) {
  return server < 0 || server >= num_servers_ ? nullptr : shards_[server]->sparse(table);
}

DenseTable* InProcessPsClient::dense(int table) {
  return table < 0 ? nullptr : shards_[table % num_servers_]->dense(table);
}

absl::StatusOr<std::vector<SparseTable*>> InProcessPsClient::Sparse(int table) {
  std::vector<SparseTable*> tables;
  for (const auto& shard : shards_) {
    SparseTable* t = shard->sparse(table);
    if (t == nullptr) return absl::NotFoundError(absl::StrCat("no sparse table ", table));
    tables.push_back(t);
  }
  return tables;
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
                            if (!k.empty()) {
                              shards_[server]->pending().AddSparse(table, part, k, sums);
                            }
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
  // dense(table) found the table: its id is >= 0.
  return Done(shards_[table % num_servers_]->pending().AddDense(table, block, part, grads));
}

absl::Status InProcessPsClient::Commit() {
  absl::Status status;
  for (const auto& shard : shards_) {
    status.Update(shard->Commit(PendingUpdates::DefaultThreads()));
  }
  return status;
}

CheckpointTables InProcessPsClient::Tables(int server) { return shards_[server]->Tables(); }

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

absl::Status InProcessPsClient::TrackDeltas() {
  for (auto& shard : shards_) shard->TrackDeltas();
  return absl::OkStatus();
}

absl::Status InProcessPsClient::ExportDeltas(int table, float threshold,
                                             std::vector<uint64_t>* keys,
                                             std::vector<float>* deltas) {
  HETERPS_ASSIGN_OR_RETURN(std::vector<SparseTable*> shards, Sparse(table));
  for (SparseTable* t : shards) HETERPS_RETURN_IF_ERROR(t->ExportDeltas(threshold, keys, deltas));
  return absl::OkStatus();
}

absl::Status InProcessPsClient::AddDeltas(int table, absl::Span<const uint64_t> keys,
                                          absl::Span<const float> deltas) {
  HETERPS_ASSIGN_OR_RETURN(std::vector<SparseTable*> shards, Sparse(table));
  const int dim = shards[0]->dim();
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("add deltas", deltas.size(), keys.size(), dim));
  const std::vector<ServerRows> split = SplitRows(keys, deltas, dim, num_servers_);
  for (int s = 0; s < num_servers_; ++s) {
    HETERPS_RETURN_IF_ERROR(shards[s]->AddDeltas(split[s].keys, split[s].rows));
  }
  return absl::OkStatus();
}

absl::Status InProcessPsClient::ExportDenseDeltas(int table, int block, float threshold,
                                                  std::vector<float>* delta) {
  DenseTable* t = dense(table);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("no dense table ", table));
  return t->ExportDeltas(block, threshold, delta);
}

absl::Status InProcessPsClient::AddDenseDeltas(int table, int block,
                                               absl::Span<const float> delta) {
  DenseTable* t = dense(table);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("no dense table ", table));
  return t->AddDeltas(block, delta);
}

absl::Status InProcessPsClient::ExportWindow(int table, float threshold,
                                             std::vector<uint64_t>* keys,
                                             std::vector<float>* deltas) {
  HETERPS_ASSIGN_OR_RETURN(std::vector<SparseTable*> shards, Sparse(table));
  for (SparseTable* t : shards) HETERPS_RETURN_IF_ERROR(t->ExportWindow(threshold, keys, deltas));
  return absl::OkStatus();
}

absl::Status InProcessPsClient::ApplyWindow(int table, absl::Span<const uint64_t> keys,
                                            absl::Span<const float> merged,
                                            absl::Span<const float> own) {
  HETERPS_ASSIGN_OR_RETURN(std::vector<SparseTable*> shards, Sparse(table));
  const int dim = shards[0]->dim();
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("apply window", merged.size(), keys.size(), dim));
  HETERPS_RETURN_IF_ERROR(CheckRowFloats("apply window", own.size(), keys.size(), dim));
  const std::vector<ServerRows> to = SplitRows(keys, merged, dim, num_servers_);
  const std::vector<ServerRows> sent = SplitRows(keys, own, dim, num_servers_);
  for (int s = 0; s < num_servers_; ++s) {
    HETERPS_RETURN_IF_ERROR(shards[s]->ApplyWindow(to[s].keys, to[s].rows, sent[s].rows));
  }
  return absl::OkStatus();
}

absl::Status InProcessPsClient::ExportDenseWindow(int table, int block, float threshold,
                                                  std::vector<float>* delta) {
  DenseTable* t = dense(table);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("no dense table ", table));
  return t->ExportWindow(block, threshold, delta);
}

absl::Status InProcessPsClient::ApplyDenseWindow(int table, int block,
                                                 absl::Span<const float> merged,
                                                 absl::Span<const float> own) {
  DenseTable* t = dense(table);
  if (t == nullptr) return absl::NotFoundError(absl::StrCat("no dense table ", table));
  return t->ApplyWindow(block, merged, own);
}

absl::Status InProcessPsClient::ExportPending(PendingParts* out) {
  for (auto& shard : shards_) MergePendingParts(shard->pending().Export(), out);
  return absl::OkStatus();
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
