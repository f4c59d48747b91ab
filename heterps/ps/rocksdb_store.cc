#include "heterps/ps/rocksdb_store.h"

#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace heterps::ps {
namespace {

std::string KeyBytes(uint64_t key) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, key >>= 8) out[i] = static_cast<char>(key & 0xff);
  return out;
}

uint64_t KeyOf(const rocksdb::Slice& bytes) {
  uint64_t key = 0;
  for (size_t i = 0; i < 8 && i < bytes.size(); ++i) {
    key = (key << 8) | static_cast<unsigned char>(bytes[i]);
  }
  return key;
}

}  // namespace

struct RocksDbColdStore::Impl {
  std::string dir;
  std::unique_ptr<rocksdb::DB> db;
  rocksdb::WriteOptions write;

  absl::Status Error(absl::string_view what, const rocksdb::Status& s) const {
    return absl::UnavailableError(absl::StrCat("cold store ", dir, ": ", what, ": ", s.ToString()));
  }
};

RocksDbColdStore::RocksDbColdStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RocksDbColdStore::~RocksDbColdStore() = default;

void SetColdStoreOptions(rocksdb::Options* options) {
  options->create_if_missing = true;
  // Point lookups of random keys: bloom filters (in SST files and the memtable) and a block
  // cache; rows of floats do not compress, so no compression.
  options->OptimizeForPointLookup(/*block_cache_size_mb=*/64);
  options->memtable_whole_key_filtering = true;
  options->memtable_prefix_bloom_size_ratio = 0.02;
  options->compression = rocksdb::kNoCompression;
}

absl::StatusOr<std::unique_ptr<RocksDbColdStore>> RocksDbColdStore::Open(const std::string& dir) {
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  impl->write.disableWAL = true;
  rocksdb::Options options;
  SetColdStoreOptions(&options);
  rocksdb::Status destroyed = rocksdb::DestroyDB(dir, options);
  if (!destroyed.ok()) return impl->Error("cannot empty", destroyed);
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &db);
  if (!s.ok()) return impl->Error("cannot open", s);
  impl->db.reset(db);
  return std::unique_ptr<RocksDbColdStore>(new RocksDbColdStore(std::move(impl)));
}

absl::Status RocksDbColdStore::Put(uint64_t key, absl::string_view bytes) {
  rocksdb::Status s =
      impl_->db->Put(impl_->write, KeyBytes(key), rocksdb::Slice(bytes.data(), bytes.size()));
  return s.ok() ? absl::OkStatus() : impl_->Error("put", s);
}

absl::Status RocksDbColdStore::PutMany(const std::vector<std::pair<uint64_t, std::string>>& rows) {
  rocksdb::WriteBatch batch;
  for (const auto& [key, bytes] : rows) {
    rocksdb::Status s = batch.Put(KeyBytes(key), rocksdb::Slice(bytes.data(), bytes.size()));
    if (!s.ok()) return impl_->Error("put", s);
  }
  rocksdb::Status s = impl_->db->Write(impl_->write, &batch);
  return s.ok() ? absl::OkStatus() : impl_->Error("put", s);
}

absl::StatusOr<std::optional<std::string>> RocksDbColdStore::Get(uint64_t key) {
  std::string value;
  rocksdb::Status s = impl_->db->Get(rocksdb::ReadOptions(), KeyBytes(key), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return impl_->Error("get", s);
  return std::optional<std::string>(std::move(value));
}

absl::StatusOr<std::vector<std::optional<std::string>>> RocksDbColdStore::GetMany(
    absl::Span<const uint64_t> keys) {
  const size_t n = keys.size();
  std::vector<std::string> key_bytes(n);
  std::vector<rocksdb::Slice> slices(n);
  for (size_t i = 0; i < n; ++i) {
    key_bytes[i] = KeyBytes(keys[i]);
    slices[i] = key_bytes[i];
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  // Big-endian keys sort as the numbers do.
  impl_->db->MultiGet(rocksdb::ReadOptions(), impl_->db->DefaultColumnFamily(), n, slices.data(),
                      values.data(), statuses.data(), std::is_sorted(keys.begin(), keys.end()));
  std::vector<std::optional<std::string>> rows(n);
  for (size_t i = 0; i < n; ++i) {
    if (statuses[i].IsNotFound()) continue;
    if (!statuses[i].ok()) return impl_->Error("get", statuses[i]);
    rows[i].emplace(values[i].data(), values[i].size());
  }
  return rows;
}

absl::Status RocksDbColdStore::Delete(uint64_t key) {
  rocksdb::Status s = impl_->db->Delete(impl_->write, KeyBytes(key));
  return s.ok() ? absl::OkStatus() : impl_->Error("delete", s);
}

absl::Status RocksDbColdStore::ForEach(
    const std::function<absl::Status(uint64_t, absl::string_view)>& visit) {
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    absl::Status s =
        visit(KeyOf(it->key()), absl::string_view(it->value().data(), it->value().size()));
    if (!s.ok()) return s;
  }
  return it->status().ok() ? absl::OkStatus() : impl_->Error("iterate", it->status());
}

absl::Status RocksDbColdStore::Clear() {
  rocksdb::WriteBatch batch;
  std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions()));
  for (it->SeekToFirst(); it->Valid(); it->Next()) batch.Delete(it->key());
  if (!it->status().ok()) return impl_->Error("clear", it->status());
  rocksdb::Status s = impl_->db->Write(impl_->write, &batch);
  return s.ok() ? absl::OkStatus() : impl_->Error("clear", s);
}

std::string DescribeRocksDb(rocksdb::DB* db) {
  std::string out;
  for (int level = 0; level < db->NumberLevels(); ++level) {
    std::string files;
    if (!db->GetProperty(absl::StrCat("rocksdb.num-files-at-level", level), &files) ||
        files == "0") {
      continue;
    }
    absl::StrAppend(&out, out.empty() ? "" : ", ", "L", level, " ", files, " files");
  }
  uint64_t live = 0, pending = 0, running = 0, entries = 0, deletes = 0;
  db->GetIntProperty("rocksdb.num-entries-active-mem-table", &entries);
  db->GetIntProperty("rocksdb.num-deletes-active-mem-table", &deletes);
  absl::StrAppend(&out, out.empty() ? "" : ", ", "memtable ", entries, " entries (", deletes,
                  " deletes)");
  db->GetIntProperty("rocksdb.estimate-live-data-size", &live);
  db->GetIntProperty("rocksdb.estimate-pending-compaction-bytes", &pending);
  db->GetIntProperty("rocksdb.num-running-compactions", &running);
  absl::StrAppend(&out, out.empty() ? "" : "; ", live >> 20, " MiB live, ", pending >> 20,
                  " MiB waiting for compaction, ", running, " compactions running");
  return out;
}

absl::Status WaitForRocksDb(rocksdb::DB* db, absl::string_view dir) {
  for (;;) {
    uint64_t busy = 0, value = 0;
    for (const char* property : {"rocksdb.num-running-compactions", "rocksdb.num-running-flushes",
                                 "rocksdb.compaction-pending", "rocksdb.mem-table-flush-pending"}) {
      if (!db->GetIntProperty(property, &value)) {
        return absl::UnavailableError(
            absl::StrCat("cold store ", dir, ": RocksDB does not report ", property));
      }
      busy += value;
    }
    if (busy == 0) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::string RocksDbColdStore::Describe() const { return DescribeRocksDb(impl_->db.get()); }

absl::Status RocksDbColdStore::WaitForBackgroundWork() {
  return WaitForRocksDb(impl_->db.get(), impl_->dir);
}

}  // namespace heterps::ps
