// The SSD tier: a ColdStore on a RocksDB database in a local directory. The only code in heterps
// that includes RocksDB.
//
// The store is a cache of cold rows, not the durable copy (checkpoints are), so writes skip
// RocksDB's write-ahead log. Keys are stored big-endian so that iteration is in key order.
//
// Thread safety: every method may be called concurrently (RocksDB is thread-safe).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/ps/cold_store.h"

namespace rocksdb {
class DB;
struct Options;
}  // namespace rocksdb

namespace heterps::ps {

// The options the tier opens its database with (docs/ps.md, "The SSD tier"); ps_bench's reference,
// RocksDB alone, opens its own with them.
void SetColdStoreOptions(rocksdb::Options* options);
// RocksDbColdStore::Describe and WaitForBackgroundWork on a database of ps_bench's own (`dir`
// names it in errors).
std::string DescribeRocksDb(rocksdb::DB* db);
absl::Status WaitForRocksDb(rocksdb::DB* db, absl::string_view dir);

class RocksDbColdStore : public ColdStore {
 public:
  // Opens (creating if needed) a database in `dir`, emptying it: a cold tier starts empty, and
  // its rows come back through checkpoints. Unavailable, naming the directory, if it cannot.
  static absl::StatusOr<std::unique_ptr<RocksDbColdStore>> Open(const std::string& dir);
  ~RocksDbColdStore() override;

  absl::Status Put(uint64_t key, absl::string_view bytes) override;
  absl::Status PutMany(const std::vector<std::pair<uint64_t, std::string>>& rows) override;
  absl::StatusOr<std::optional<std::string>> Get(uint64_t key) override;
  // One MultiGet.
  absl::StatusOr<std::vector<std::optional<std::string>>> GetMany(
      absl::Span<const uint64_t> keys) override;
  absl::Status Delete(uint64_t key) override;
  absl::Status ForEach(
      const std::function<absl::Status(uint64_t, absl::string_view)>& visit) override;
  absl::Status Clear() override;

  // RocksDB's account of the database in one line: the files of each level, the active
  // memtable's entries and deletes, the live bytes, the bytes waiting for compaction and the
  // compactions running (for benchmarks, to say what they measured).
  std::string Describe() const;
  // Waits until RocksDB has no flush or compaction running or pending (a benchmark measures the
  // store at rest, as its reference). Unavailable if RocksDB cannot say.
  absl::Status WaitForBackgroundWork();

 private:
  struct Impl;
  explicit RocksDbColdStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::ps
