#include "heterps/ps/pending.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "heterps/base/key_index.h"
#include "heterps/ps/block_tree.h"

namespace heterps::ps {

void PendingUpdates::AddSparse(int table, int part, absl::Span<const uint64_t> keys,
                               absl::Span<const float> grads) {
  absl::MutexLock lock(&mu_);
  Rows& rows = sparse_[table][part];
  rows.keys.insert(rows.keys.end(), keys.begin(), keys.end());
  rows.grads.insert(rows.grads.end(), grads.begin(), grads.end());
  bytes_ += static_cast<int64_t>(keys.size() * sizeof(uint64_t) + grads.size() * sizeof(float));
}

absl::Status PendingUpdates::AddDense(int table, int block, int part,
                                      absl::Span<const double> grads) {
  absl::MutexLock lock(&mu_);
  auto& parts = dense_[{table, block}];
  if (!parts.empty() && parts.begin()->second.size() != grads.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dense table ", table, " block ", block, ": a gradient of ", grads.size(),
                     " floats where earlier ones had ", parts.begin()->second.size()));
  }
  std::vector<double>& sum = parts[part];
  if (sum.empty()) {
    sum.assign(grads.begin(), grads.end());
    bytes_ += static_cast<int64_t>(grads.size() * sizeof(double));
  } else {
    for (size_t i = 0; i < grads.size(); ++i) sum[i] += grads[i];
  }
  return absl::OkStatus();
}

PendingParts PendingUpdates::Export() const {
  absl::MutexLock lock(&mu_);
  PendingParts out;
  for (const auto& [table, parts] : sparse_) {
    for (const auto& [part, rows] : parts)
      out.sparse.push_back({table, part, rows.keys, rows.grads});
  }
  for (const auto& [where, parts] : dense_) {
    for (const auto& [part, grads] : parts) {
      out.dense.push_back({where.first, where.second, part, grads});
    }
  }
  return out;
}

int PendingUpdates::DefaultThreads() {
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
}

absl::Status PendingUpdates::Apply(const CheckpointTables& tables, int threads) {
  std::map<int, std::map<int, Rows>> sparse;
  std::map<std::pair<int, int>, std::map<int, std::vector<double>>> dense;
  {
    absl::MutexLock lock(&mu_);
    sparse.swap(sparse_);
    dense.swap(dense_);
    bytes_ = 0;
  }
  absl::Status status;
  for (auto& [id, parts_of_table] : sparse) {
    // Named apart from the structured binding: C++17 lambdas cannot capture a binding.
    const std::map<int, Rows>& parts = parts_of_table;
    auto it = tables.sparse.find(id);
    if (it == tables.sparse.end()) {
      status.Update(absl::NotFoundError(absl::StrCat("commit: no sparse table ", id)));
      continue;
    }
    SparseTable* table = it->second;
    const int dim = table->dim();
    size_t total = 0;
    for (const auto& [part, rows] : parts) total += rows.keys.size();
    // Below a few thousand rows a thread costs more than it saves.
    constexpr size_t kRowsPerThread = 4096;
    const int groups = static_cast<int>(std::max<size_t>(
        1, std::min({static_cast<size_t>(std::max(threads, 1)),
                     static_cast<size_t>(table->lock_shards()), total / kRowsPerThread})));
    // Group g: the keys whose lock shard is g modulo `groups`. A key's contributions merged up the
    // block tree (a repeated key within a part added in arrival order first); keys in first-seen
    // order.
    std::vector<absl::Status> statuses(groups);
    auto apply = [&](int g) {
      // The calling thread's table is kept between commits (up to KeyIndex::kStepKeptBytes); a
      // helper thread's lives for one commit.
      thread_local base::KeyIndex index;
      index.Reset(total / groups);
      std::vector<uint64_t> keys;
      // Per key: its contributions, (part, offset of its row in `rows`).
      std::vector<std::vector<std::pair<int, size_t>>> parts_of;
      std::vector<float> rows;
      for (const auto& [part, contribution] : parts) {
        for (size_t i = 0; i < contribution.keys.size(); ++i) {
          if (groups > 1 && table->LockShardOf(contribution.keys[i]) % groups != g) continue;
          auto [at, fresh] = index.Insert(contribution.keys[i], keys.size());
          if (fresh) {
            keys.push_back(contribution.keys[i]);
            parts_of.emplace_back();
          }
          std::vector<std::pair<int, size_t>>& mine = parts_of[at];
          const float* grad = contribution.grads.data() + i * dim;
          if (!mine.empty() && mine.back().first == part) {
            float* row = rows.data() + mine.back().second;
            for (int d = 0; d < dim; ++d) row[d] += grad[d];
            continue;
          }
          mine.emplace_back(part, rows.size());
          rows.insert(rows.end(), grad, grad + dim);
        }
      }
      std::vector<float> sums(keys.size() * dim);
      for (size_t k = 0; k < keys.size(); ++k) {
        std::vector<std::pair<int, size_t>>& mine = parts_of[k];
        // One contribution is the key's sum as it is.
        if (mine.size() > 1) {
          MergeNodes(&mine, /*to_root=*/true, [&](size_t& left, size_t right) {
            for (int d = 0; d < dim; ++d) rows[left + d] += rows[right + d];
          });
        }
        std::copy_n(rows.data() + mine.front().second, dim, sums.data() + k * dim);
      }
      index.Trim(base::KeyIndex::kStepKeptBytes);
      statuses[g] = table->Push(keys, sums);
    };
    std::vector<std::thread> helpers;
    for (int g = 1; g < groups; ++g) helpers.emplace_back(apply, g);
    apply(0);
    for (std::thread& helper : helpers) helper.join();
    for (const absl::Status& s : statuses) status.Update(s);
  }
  for (auto& [where, parts] : dense) {
    auto it = tables.dense.find(where.first);
    if (it == tables.dense.end()) {
      status.Update(absl::NotFoundError(absl::StrCat("commit: no dense table ", where.first)));
      continue;
    }
    std::vector<std::pair<int, std::vector<double>>> nodes(std::make_move_iterator(parts.begin()),
                                                           std::make_move_iterator(parts.end()));
    MergeNodes(&nodes, /*to_root=*/true, AddDoubles);
    const std::vector<double>& sum = nodes.front().second;
    const std::vector<float> rounded(sum.begin(), sum.end());
    status.Update(it->second->Push(where.second, rounded));
  }
  return status;
}

bool PendingUpdates::empty() const {
  absl::MutexLock lock(&mu_);
  return sparse_.empty() && dense_.empty();
}

}  // namespace heterps::ps
