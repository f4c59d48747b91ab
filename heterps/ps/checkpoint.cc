#include "heterps/ps/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/env.h"
#include "heterps/base/status_macros.h"
#include "heterps/ps/ps_client.h"
#include "nlohmann/json.hpp"

namespace heterps::ps {
namespace {

using json = nlohmann::ordered_json;

constexpr char kFormat[] = "heterps-checkpoint-v1";

void Fnv(uint64_t& h, const char* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    h ^= static_cast<unsigned char>(data[i]);
    h *= 1099511628211ull;
  }
}

// Writes a file through the Env, keeping its size and checksum; every failure names the file and
// the reason. Appends are buffered: a checkpoint is written in large pieces.
class Writer {
 public:
  static absl::StatusOr<Writer> Open(base::Env* env, const std::string& path) {
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<base::WritableFile> file, env->NewWritableFile(path));
    return Writer(std::move(file));
  }
  template <typename T>
  absl::Status Put(const T* data, size_t count) {
    const char* bytes = reinterpret_cast<const char*>(data);
    const size_t size = sizeof(T) * count;
    Fnv(hash_, bytes, size);
    bytes_ += size;
    buffer_.append(bytes, size);
    if (buffer_.size() >= kBufferBytes) return Drain();
    return absl::OkStatus();
  }
  // Writes what is buffered, syncs to the disk and closes.
  absl::Status Close() {
    HETERPS_RETURN_IF_ERROR(Drain());
    HETERPS_RETURN_IF_ERROR(file_->Sync());
    return file_->Close();
  }
  uint64_t bytes() const { return bytes_; }
  uint64_t hash() const { return hash_; }

 private:
  static constexpr size_t kBufferBytes = 1 << 20;
  explicit Writer(std::unique_ptr<base::WritableFile> file) : file_(std::move(file)) {}
  absl::Status Drain() {
    absl::Status status = file_->Append(buffer_);
    buffer_.clear();
    return status;
  }
  std::unique_ptr<base::WritableFile> file_;
  std::string buffer_;
  uint64_t bytes_ = 0;
  uint64_t hash_ = 1469598103934665603ull;
};

// Reads what a Writer wrote, streaming (a checkpoint may be larger than memory); a short read is
// DataLoss naming the file.
class Reader {
 public:
  static absl::StatusOr<Reader> Open(base::Env* env, const std::string& path) {
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<base::SequentialFile> file,
                             env->NewSequentialFile(path));
    return Reader(path, std::move(file));
  }
  template <typename T>
  absl::Status Get(T* out, size_t count) {
    char* bytes = reinterpret_cast<char*>(out);
    size_t size = sizeof(T) * count;
    while (size > 0) {
      HETERPS_RETURN_IF_ERROR(Fill());
      if (begin_ == end_) {
        return absl::DataLossError(absl::StrCat(path_, ": truncated at byte ", pos_));
      }
      const size_t n = std::min(size, end_ - begin_);
      std::memcpy(bytes, buffer_.data() + begin_, n);
      begin_ += n;
      bytes += n;
      size -= n;
      pos_ += n;
    }
    return absl::OkStatus();
  }
  absl::StatusOr<bool> done() {
    HETERPS_RETURN_IF_ERROR(Fill());
    return begin_ == end_;
  }
  // Reads the rest of the file, for its size and checksum.
  absl::Status Digest(uint64_t* bytes, uint64_t* hash) {
    *bytes = 0;
    *hash = 1469598103934665603ull;
    for (;;) {
      HETERPS_RETURN_IF_ERROR(Fill());
      if (begin_ == end_) return absl::OkStatus();
      Fnv(*hash, buffer_.data() + begin_, end_ - begin_);
      *bytes += end_ - begin_;
      pos_ += end_ - begin_;
      begin_ = end_;
    }
  }

 private:
  Reader(std::string path, std::unique_ptr<base::SequentialFile> file)
      : path_(std::move(path)), file_(std::move(file)), buffer_(1 << 20) {}
  // Refills the buffer once it is used up; at the end of the file it stays empty.
  absl::Status Fill() {
    if (begin_ < end_) return absl::OkStatus();
    absl::StatusOr<size_t> n = file_->Read(buffer_.size(), buffer_.data());
    if (!n.ok()) return absl::DataLossError(n.status().message());
    begin_ = 0;
    end_ = *n;
    return absl::OkStatus();
  }
  std::string path_;
  std::unique_ptr<base::SequentialFile> file_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;
  uint64_t pos_ = 0;
};

absl::StatusOr<json> WriteSparse(base::Env* env, const std::string& dir, int id,
                                 SparseTable& table) {
  const std::string name = absl::StrCat("sparse-", id, ".bin");
  HETERPS_ASSIGN_OR_RETURN(Writer w, Writer::Open(env, dir + "/" + name));
  const int32_t dim = table.dim();
  const int32_t state = StateFloats(table.options().optimizer.kind) * dim;
  HETERPS_RETURN_IF_ERROR(w.Put(&dim, 1));
  HETERPS_RETURN_IF_ERROR(w.Put(&state, 1));
  int64_t rows = 0;
  HETERPS_RETURN_IF_ERROR(table.ForEachRow([&](uint64_t key, const RowData& row) {
    ++rows;
    HETERPS_RETURN_IF_ERROR(w.Put(&key, 1));
    HETERPS_RETURN_IF_ERROR(w.Put(&row.steps, 1));
    HETERPS_RETURN_IF_ERROR(w.Put(&row.accesses, 1));
    HETERPS_RETURN_IF_ERROR(w.Put(row.value.data(), row.value.size()));
    return w.Put(row.state.data(), row.state.size());
  }));
  HETERPS_RETURN_IF_ERROR(w.Close());
  return json{{"file", name},          {"table", id},
              {"kind", "sparse"},      {"dim", dim},
              {"state_floats", state}, {"rows", rows},
              {"bytes", w.bytes()},    {"fnv64", absl::StrFormat("%016x", w.hash())}};
}

absl::StatusOr<json> WriteDense(base::Env* env, const std::string& dir, int id, DenseTable& table) {
  const std::string name = absl::StrCat("dense-", id, ".bin");
  HETERPS_ASSIGN_OR_RETURN(Writer w, Writer::Open(env, dir + "/" + name));
  json sizes = json::array();
  for (int b = 0; b < table.num_blocks(); ++b) {
    HETERPS_ASSIGN_OR_RETURN(DenseTable::BlockData data, table.Read(b));
    sizes.push_back(table.block_size(b));
    HETERPS_RETURN_IF_ERROR(w.Put(&data.steps, 1));
    HETERPS_RETURN_IF_ERROR(w.Put(data.value.data(), data.value.size()));
    HETERPS_RETURN_IF_ERROR(w.Put(data.state.data(), data.state.size()));
  }
  HETERPS_RETURN_IF_ERROR(w.Close());
  return json{{"file", name},       {"table", id},
              {"kind", "dense"},    {"block_sizes", sizes},
              {"bytes", w.bytes()}, {"fnv64", absl::StrFormat("%016x", w.hash())}};
}

}  // namespace

absl::Status SaveCheckpoint(base::Env* env, const std::string& root, int64_t step,
                            const CheckpointTables& tables) {
  HETERPS_RETURN_IF_ERROR(env->CreateDirs(root));
  const std::string name = absl::StrCat("ckpt-", step);
  const std::string tmp = absl::StrCat(root, "/.", name, ".tmp-", getpid());
  HETERPS_RETURN_IF_ERROR(env->RemoveAll(tmp));
  HETERPS_RETURN_IF_ERROR(env->CreateDirs(tmp));
  auto write_all = [&]() -> absl::Status {
    json files = json::array();
    for (const auto& [id, table] : tables.sparse) {
      HETERPS_ASSIGN_OR_RETURN(json entry, WriteSparse(env, tmp, id, *table));
      files.push_back(entry);
    }
    for (const auto& [id, table] : tables.dense) {
      HETERPS_ASSIGN_OR_RETURN(json entry, WriteDense(env, tmp, id, *table));
      files.push_back(entry);
    }
    json manifest = {{"format", kFormat}, {"step", step}, {"files", files}};
    HETERPS_ASSIGN_OR_RETURN(Writer w, Writer::Open(env, tmp + "/MANIFEST"));
    const std::string text = manifest.dump(2) + "\n";
    HETERPS_RETURN_IF_ERROR(w.Put(text.data(), text.size()));
    HETERPS_RETURN_IF_ERROR(w.Close());
    return env->SyncDir(tmp);
  };
  if (absl::Status s = write_all(); !s.ok()) {
    env->RemoveAll(tmp).IgnoreError();
    return s;
  }
  // Into place: an older checkpoint of the same step is replaced, any other one is untouched.
  const std::string final_dir = root + "/" + name;
  absl::Status placed = env->RemoveAll(final_dir);
  if (placed.ok()) placed = env->RenameFile(tmp, final_dir);
  if (placed.ok()) placed = env->SyncDir(root);
  if (!placed.ok()) {
    env->RemoveAll(tmp).IgnoreError();
    return placed;
  }
  return base::WriteFileAtomically(env, root + "/LATEST", name + "\n");
}

absl::StatusOr<int64_t> LoadLatestCheckpoint(base::Env* env, const std::string& root,
                                             const CheckpointTables& tables) {
  auto latest = base::ReadFile(env, root + "/LATEST", 4096);
  if (!latest.ok()) return absl::NotFoundError(absl::StrCat(root, ": no checkpoint (no LATEST)"));
  std::string name = *latest;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  return LoadCheckpointDir(env, root + "/" + name, tables);
}

absl::StatusOr<int64_t> LoadCheckpoint(base::Env* env, const std::string& root, int64_t step,
                                       const CheckpointTables& tables) {
  const std::string dir = absl::StrCat(root, "/ckpt-", step);
  if (!env->FileExists(dir + "/MANIFEST")) {
    return absl::NotFoundError(absl::StrCat(dir, ": no checkpoint of step ", step));
  }
  return LoadCheckpointDir(env, dir, tables);
}

absl::StatusOr<uint64_t> DigestTables(const CheckpointTables& tables) {
  uint64_t digest = 0;
  // Per row (per block) an FNV-1a hash of its table, key and contents; the sum does not depend on
  // the order of the rows.
  auto row_hash = [](int table, uint64_t key, const std::vector<float>& value,
                     const std::vector<float>& state, int64_t steps) {
    uint64_t h = 0xcbf29ce484222325ull;
    Fnv(h, reinterpret_cast<const char*>(&table), sizeof(table));
    Fnv(h, reinterpret_cast<const char*>(&key), sizeof(key));
    Fnv(h, reinterpret_cast<const char*>(value.data()), value.size() * sizeof(float));
    Fnv(h, reinterpret_cast<const char*>(state.data()), state.size() * sizeof(float));
    Fnv(h, reinterpret_cast<const char*>(&steps), sizeof(steps));
    return h;
  };
  for (const auto& [id, table] : tables.sparse) {
    HETERPS_RETURN_IF_ERROR(table->ForEachRow([&](uint64_t key, const RowData& row) {
      digest += row_hash(id, key, row.value, row.state, row.steps);
      return absl::OkStatus();
    }));
  }
  for (const auto& [id, table] : tables.dense) {
    for (int b = 0; b < table->num_blocks(); ++b) {
      HETERPS_ASSIGN_OR_RETURN(DenseTable::BlockData data, table->Read(b));
      digest += row_hash(id, static_cast<uint64_t>(b), data.value, data.state, data.steps);
    }
  }
  return digest;
}

absl::Status PruneCheckpoints(base::Env* env, const std::string& root, int keep) {
  HETERPS_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(root));
  std::vector<int64_t> steps;
  for (const std::string& name : names) {
    int64_t step = 0;
    if (absl::StartsWith(name, "ckpt-") && absl::SimpleAtoi(name.substr(5), &step)) {
      steps.push_back(step);
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  for (size_t i = std::max(keep, 0); i < steps.size(); ++i) {
    HETERPS_RETURN_IF_ERROR(env->RemoveAll(absl::StrCat(root, "/ckpt-", steps[i])));
  }
  return absl::OkStatus();
}

namespace {

// A checkpoint directory whose MANIFEST and files have been verified.
struct VerifiedDir {
  std::string dir;
  json manifest;
  std::vector<std::string> paths;  // per MANIFEST entry
  std::vector<bool> load;          // per entry: a table this load fills
};

// Pass 1 over one source: every file whole and intact (streamed, never held whole), every sparse
// table as the manifest describes it, every dense table that `tables` holds likewise. A dense
// table `tables` does not hold is an error unless `foreign_dense` (re-sharding: it is another
// new shard's). Counts what it found of `tables`.
absl::StatusOr<VerifiedDir> Verify(base::Env* env, const std::string& dir,
                                   const CheckpointTables& tables, bool foreign_dense,
                                   std::map<int, int>* sparse_seen,
                                   std::map<int, int>* dense_seen) {
  VerifiedDir v;
  v.dir = dir;
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, dir + "/MANIFEST", 64 << 20));
  v.manifest = json::parse(text, nullptr, false);
  const json& manifest = v.manifest;
  if (manifest.is_discarded() || !manifest.is_object() || manifest.value("format", "") != kFormat ||
      !manifest.contains("files") || !manifest["files"].is_array()) {
    return absl::DataLossError(absl::StrCat(dir, "/MANIFEST: not a heterps checkpoint manifest"));
  }
  for (const json& f : manifest["files"]) {
    if (!f.is_object()) {
      return absl::DataLossError(absl::StrCat(dir, "/MANIFEST: an entry is not an object"));
    }
    const std::string path = dir + "/" + f.value("file", "");
    uint64_t size = 0, hash = 0;
    {
      HETERPS_ASSIGN_OR_RETURN(Reader reader, Reader::Open(env, path));
      HETERPS_RETURN_IF_ERROR(reader.Digest(&size, &hash));
    }
    if (size != f.value("bytes", uint64_t{0})) {
      return absl::DataLossError(absl::StrCat(path, ": ", size, " bytes, the manifest says ",
                                              f.value("bytes", uint64_t{0}), " (truncated?)"));
    }
    if (absl::StrFormat("%016x", hash) != f.value("fnv64", "")) {
      return absl::DataLossError(absl::StrCat(path, ": checksum mismatch: the file is corrupt"));
    }
    const int id = f.value("table", -1);
    bool load = true;
    if (f.value("kind", "") == "sparse") {
      auto it = tables.sparse.find(id);
      if (it == tables.sparse.end() || it->second->dim() != f.value("dim", -1) ||
          StateFloats(it->second->options().optimizer.kind) * it->second->dim() !=
              f.value("state_floats", -1)) {
        return absl::FailedPreconditionError(absl::StrCat(
            path, ": sparse table ", id, " of dim ", f.value("dim", -1), " and ",
            f.value("state_floats", -1), " optimizer floats per row has no match here"));
      }
      ++(*sparse_seen)[id];
    } else {
      auto it = tables.dense.find(id);
      load = it != tables.dense.end();
      if (!load && !foreign_dense) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, ": dense table ", id, " has no match here"));
      }
      if (load) {
        std::vector<int64_t> sizes = f.value("block_sizes", std::vector<int64_t>());
        bool match = static_cast<int>(sizes.size()) == it->second->num_blocks();
        for (size_t b = 0; match && b < sizes.size(); ++b) {
          match = sizes[b] == it->second->block_size(static_cast<int>(b));
        }
        if (!match) {
          return absl::FailedPreconditionError(
              absl::StrCat(path, ": dense table ", id, " has no match here"));
        }
        ++(*dense_seen)[id];
      }
    }
    v.paths.push_back(path);
    v.load.push_back(load);
  }
  return v;
}

// Pass 2 over one source: the sparse rows `keep` accepts, the dense tables verified for loading.
absl::Status LoadVerified(base::Env* env, const VerifiedDir& v, const CheckpointTables& tables,
                          const std::function<bool(uint64_t)>& keep) {
  size_t i = 0;
  for (const json& f : v.manifest["files"]) {
    const size_t at = i++;
    if (!v.load[at]) continue;
    HETERPS_ASSIGN_OR_RETURN(Reader r, Reader::Open(env, v.paths[at]));
    const int id = f["table"];
    if (f["kind"] == "sparse") {
      SparseTable& table = *tables.sparse.at(id);
      int32_t dim = 0, state = 0;
      HETERPS_RETURN_IF_ERROR(r.Get(&dim, 1));
      HETERPS_RETURN_IF_ERROR(r.Get(&state, 1));
      RowData row;
      row.value.resize(dim);
      row.state.resize(state);
      for (;;) {
        HETERPS_ASSIGN_OR_RETURN(const bool done, r.done());
        if (done) break;
        uint64_t key = 0;
        HETERPS_RETURN_IF_ERROR(r.Get(&key, 1));
        HETERPS_RETURN_IF_ERROR(r.Get(&row.steps, 1));
        HETERPS_RETURN_IF_ERROR(r.Get(&row.accesses, 1));
        HETERPS_RETURN_IF_ERROR(r.Get(row.value.data(), row.value.size()));
        HETERPS_RETURN_IF_ERROR(r.Get(row.state.data(), row.state.size()));
        if (keep == nullptr || keep(key)) HETERPS_RETURN_IF_ERROR(table.Insert(key, row));
      }
    } else {
      DenseTable& table = *tables.dense.at(id);
      for (int b = 0; b < table.num_blocks(); ++b) {
        HETERPS_ASSIGN_OR_RETURN(DenseTable::BlockData data, table.Read(b));
        HETERPS_RETURN_IF_ERROR(r.Get(&data.steps, 1));
        HETERPS_RETURN_IF_ERROR(r.Get(data.value.data(), data.value.size()));
        HETERPS_RETURN_IF_ERROR(r.Get(data.state.data(), data.state.size()));
        HETERPS_RETURN_IF_ERROR(table.Write(b, data));
      }
    }
  }
  return absl::OkStatus();
}

// Verifies every source, then loads them: every sparse table from every source (its rows that
// `keep` accepts), every dense table of `tables` from the one source that has it. Nothing changes
// before every source is verified.
absl::StatusOr<int64_t> LoadSources(base::Env* env, const std::vector<std::string>& dirs,
                                    const CheckpointTables& tables,
                                    const std::function<bool(uint64_t)>& keep) {
  const bool resharding = keep != nullptr;
  std::map<int, int> sparse_seen, dense_seen;
  std::vector<VerifiedDir> verified;
  for (const std::string& dir : dirs) {
    HETERPS_ASSIGN_OR_RETURN(VerifiedDir v,
                             Verify(env, dir, tables, resharding, &sparse_seen, &dense_seen));
    if (!verified.empty() &&
        v.manifest.value("step", int64_t{-1}) != verified[0].manifest.value("step", int64_t{-1})) {
      return absl::DataLossError(absl::StrCat(
          dir, "/MANIFEST: step ", v.manifest.value("step", int64_t{-1}), ", ", verified[0].dir,
          " has step ", verified[0].manifest.value("step", int64_t{-1})));
    }
    verified.push_back(std::move(v));
  }
  const std::string where = dirs.size() == 1 ? dirs[0] + "/MANIFEST" : dirs[0] + " and the others";
  for (const auto& [id, table] : tables.sparse) {
    if (sparse_seen[id] != static_cast<int>(dirs.size())) {
      return absl::DataLossError(
          absl::StrCat(where, ": sparse table ", id, " is not in every source"));
    }
  }
  for (const auto& [id, table] : tables.dense) {
    if (dense_seen[id] != 1) {
      return absl::DataLossError(absl::StrCat(where, ": dense table ", id, " is in ",
                                              dense_seen[id], " sources, not one"));
    }
  }
  for (const auto& [id, table] : tables.sparse) HETERPS_RETURN_IF_ERROR(table->Clear());
  for (const VerifiedDir& v : verified) HETERPS_RETURN_IF_ERROR(LoadVerified(env, v, tables, keep));
  return verified.empty() ? int64_t{0} : verified[0].manifest.value("step", int64_t{0});
}

}  // namespace

absl::StatusOr<int64_t> LoadCheckpointDir(base::Env* env, const std::string& dir,
                                          const CheckpointTables& tables) {
  return LoadSources(env, {dir}, tables, nullptr);
}

absl::StatusOr<int64_t> LoadCheckpointResharded(base::Env* env,
                                                const std::vector<std::string>& roots, int64_t step,
                                                int shard, int num_shards,
                                                const CheckpointTables& tables) {
  if (roots.empty() || num_shards < 1 || shard < 0 || shard >= num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("re-sharding to shard ", shard, " of ",
                                                   num_shards, " from ", roots.size(),
                                                   " checkpoints"));
  }
  std::vector<std::string> dirs;
  for (const std::string& root : roots) {
    const std::string dir = absl::StrCat(root, "/ckpt-", step);
    if (!env->FileExists(dir + "/MANIFEST")) {
      return absl::NotFoundError(absl::StrCat(dir, ": no checkpoint of step ", step));
    }
    dirs.push_back(dir);
  }
  return LoadSources(env, dirs, tables, [shard, num_shards](uint64_t key) {
    return ServerOf(key, num_shards) == shard;
  });
}

}  // namespace heterps::ps
