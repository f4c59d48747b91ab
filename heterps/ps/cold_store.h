// Where a sparse table's cold rows live: a key-value store on local disk (the SSD tier). The
// table decides what is cold; the store only keeps bytes. Two implementations: RocksDbColdStore
// (heterps/ps/rocksdb_store.h, the real tier) and MemoryColdStore (below, for unit tests of the
// table's tiering logic, next to tests with the real one).
//
// Thread safety: every method may be called concurrently.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace heterps::ps {

class ColdStore {
 public:
  virtual ~ColdStore() = default;
  virtual absl::Status Put(uint64_t key, absl::string_view bytes) = 0;
  // Puts every (key, bytes) of `rows`; on an error, none of them is stored. RocksDB writes them as
  // one batch, whose memtable inserts are cheapest with the keys in increasing order (spills pass
  // them so). This default puts them one by one and deletes what it put when one fails.
  virtual absl::Status PutMany(const std::vector<std::pair<uint64_t, std::string>>& rows) {
    for (size_t i = 0; i < rows.size(); ++i) {
      absl::Status put = Put(rows[i].first, rows[i].second);
      if (put.ok()) continue;
      for (size_t j = 0; j < i; ++j) put.Update(Delete(rows[j].first));
      return put;
    }
    return absl::OkStatus();
  }
  // The bytes stored for `key`, or nullopt if none.
  virtual absl::StatusOr<std::optional<std::string>> Get(uint64_t key) = 0;
  // The bytes stored for each of `keys`, in their order (nullopt where none); an error if any
  // read fails. RocksDB reads them as one MultiGet (cheapest with the keys in increasing order:
  // a table's misses are passed so); this default gets them one by one.
  virtual absl::StatusOr<std::vector<std::optional<std::string>>> GetMany(
      absl::Span<const uint64_t> keys) {
    std::vector<std::optional<std::string>> rows;
    rows.reserve(keys.size());
    for (uint64_t key : keys) {
      absl::StatusOr<std::optional<std::string>> row = Get(key);
      if (!row.ok()) return row.status();
      rows.push_back(*std::move(row));
    }
    return rows;
  }
  virtual absl::Status Delete(uint64_t key) = 0;
  // Visits every stored row in key order, as of the call (a snapshot; `visit` may call the store
  // or take locks held around its calls); stops at the first error `visit` returns.
  virtual absl::Status ForEach(
      const std::function<absl::Status(uint64_t, absl::string_view)>& visit) = 0;
  // Removes every row.
  virtual absl::Status Clear() = 0;
};

// An in-memory ColdStore for tests of the layer above.
class MemoryColdStore : public ColdStore {
 public:
  absl::Status Put(uint64_t key, absl::string_view bytes) override {
    absl::MutexLock lock(&mu_);
    rows_[key] = std::string(bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<std::string>> Get(uint64_t key) override {
    absl::MutexLock lock(&mu_);
    auto it = rows_.find(key);
    if (it == rows_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  absl::Status Delete(uint64_t key) override {
    absl::MutexLock lock(&mu_);
    rows_.erase(key);
    return absl::OkStatus();
  }
  // Visits a snapshot, as RocksDB's iterator does, without the lock held (so that `visit` may
  // take locks that are held around this store's other calls).
  absl::Status ForEach(
      const std::function<absl::Status(uint64_t, absl::string_view)>& visit) override {
    std::map<uint64_t, std::string> rows;
    {
      absl::MutexLock lock(&mu_);
      rows = rows_;
    }
    for (const auto& [key, bytes] : rows) {
      absl::Status s = visit(key, bytes);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  absl::Status Clear() override {
    absl::MutexLock lock(&mu_);
    rows_.clear();
    return absl::OkStatus();
  }

 private:
  absl::Mutex mu_;
  std::map<uint64_t, std::string> rows_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterps::ps
