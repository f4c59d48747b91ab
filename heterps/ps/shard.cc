#include "heterps/ps/shard.h"

#include "absl/strings/str_cat.h"

namespace heterps::ps {

absl::Status Shard::AddSparse(int id, std::unique_ptr<SparseTable> table) {
  absl::MutexLock lock(&mu_);
  if (sparse_.count(id) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("sparse table ", id, " exists"));
  }
  if (tracking_) table->TrackDeltas();
  sparse_.emplace(id, std::move(table));
  return absl::OkStatus();
}

absl::Status Shard::AddDense(int id, std::unique_ptr<DenseTable> table) {
  absl::MutexLock lock(&mu_);
  if (dense_.count(id) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("dense table ", id, " exists"));
  }
  if (tracking_) table->TrackDeltas();
  dense_.emplace(id, std::move(table));
  return absl::OkStatus();
}

SparseTable* Shard::sparse(int id) const {
  absl::MutexLock lock(&mu_);
  auto it = sparse_.find(id);
  return it == sparse_.end() ? nullptr : it->second.get();
}

DenseTable* Shard::dense(int id) const {
  absl::MutexLock lock(&mu_);
  auto it = dense_.find(id);
  return it == dense_.end() ? nullptr : it->second.get();
}

std::vector<int> Shard::sparse_ids() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> ids;
  for (const auto& [id, table] : sparse_) ids.push_back(id);
  return ids;
}

std::vector<int> Shard::dense_ids() const {
  absl::MutexLock lock(&mu_);
  std::vector<int> ids;
  for (const auto& [id, table] : dense_) ids.push_back(id);
  return ids;
}

int Shard::num_tables() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(sparse_.size() + dense_.size());
}

int64_t Shard::sparse_memory_bytes() const {
  // The tables' own locks are taken outside the shard's: a table is never removed.
  std::vector<const SparseTable*> tables;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, table] : sparse_) tables.push_back(table.get());
  }
  int64_t bytes = 0;
  for (const SparseTable* table : tables) bytes += table->Stats().memory_bytes;
  return bytes;
}

CheckpointTables Shard::Tables() const {
  absl::MutexLock lock(&mu_);
  CheckpointTables tables;
  for (const auto& [id, table] : sparse_) tables.sparse[id] = table.get();
  for (const auto& [id, table] : dense_) tables.dense[id] = table.get();
  return tables;
}

absl::Status Shard::Commit(int threads) { return pending_.Apply(Tables(), threads); }

void Shard::TrackDeltas() {
  absl::MutexLock lock(&mu_);
  tracking_ = true;
  for (auto& [id, table] : sparse_) table->TrackDeltas();
  for (auto& [id, table] : dense_) table->TrackDeltas();
}

}  // namespace heterps::ps
