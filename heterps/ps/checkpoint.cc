// The checkpoint format in one file (over 500 lines): what is written and what a load checks are
// read side by side, so that no field is written without being verified.
#include "heterps/ps/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/base/env.h"
#include "heterps/base/fnv.h"
#include "heterps/base/json.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/xxhash.h"
#include "heterps/ps/key_plan.h"
#include "heterps/ps/ps_client.h"
#include "nlohmann/json.hpp"

namespace heterps::ps {
namespace {

using json = nlohmann::ordered_json;

constexpr char kFormat[] = "heterps-checkpoint-v2";
// The previous format: FNV-1a checksums, no identity. Still read.
constexpr char kFormatV1[] = "heterps-checkpoint-v1";

// A file's checksum as a MANIFEST names it: XXH3-64 ("xxh3_64", format v2) or FNV-1a 64
// ("fnv64", format v1), fed in pieces of any size.
class Checksum {
 public:
  explicit Checksum(bool fnv = false) : fnv_(fnv), state_(XXH3_createState()) {
    XXH3_64bits_reset(state_);
  }
  ~Checksum() { XXH3_freeState(state_); }
  Checksum(Checksum&& other) noexcept
      : fnv_(other.fnv_), fnv_hash_(other.fnv_hash_), state_(other.state_) {
    other.state_ = nullptr;
  }
  Checksum(const Checksum&) = delete;
  Checksum& operator=(const Checksum&) = delete;
  Checksum& operator=(Checksum&&) = delete;

  void Update(const char* data, size_t size) {
    if (fnv_) {
      fnv_hash_ = base::Fnv1a64(data, size, fnv_hash_);
    } else {
      XXH3_64bits_update(state_, data, size);
    }
  }
  std::string Hex() const {
    return absl::StrFormat("%016x", fnv_ ? fnv_hash_ : XXH3_64bits_digest(state_));
  }

 private:
  bool fnv_;
  uint64_t fnv_hash_ = base::kFnv1a64Offset;
  XXH3_state_t* state_;
};

// A name LATEST or a MANIFEST may hold: a plain name inside its directory.
bool PlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Writes a file through the Env, keeping its size and checksum; every failure names the file and
// the reason. Appends are buffered: a checkpoint is written in large pieces.
class Writer {
 public:
  static absl::StatusOr<Writer> Open(base::Env* env, const std::string& path) {
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<base::WritableFile> file,
                             env->NewLargeWritableFile(path));
    return Writer(std::move(file));
  }
  template <typename T>
  absl::Status Put(const T* data, size_t count) {
    const char* bytes = reinterpret_cast<const char*>(data);
    const size_t size = sizeof(T) * count;
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
  // The checksum of everything put; valid after Close.
  std::string checksum() const { return checksum_.Hex(); }

 private:
  static constexpr size_t kBufferBytes = 1 << 20;
  explicit Writer(std::unique_ptr<base::WritableFile> file) : file_(std::move(file)) {}
  absl::Status Drain() {
    checksum_.Update(buffer_.data(), buffer_.size());
    absl::Status status = file_->Append(buffer_);
    buffer_.clear();
    return status;
  }
  std::unique_ptr<base::WritableFile> file_;
  std::string buffer_;
  uint64_t bytes_ = 0;
  Checksum checksum_;
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
  // Passes over `size` bytes.
  absl::Status Skip(size_t size) {
    while (size > 0) {
      HETERPS_RETURN_IF_ERROR(Fill());
      if (begin_ == end_) {
        return absl::DataLossError(absl::StrCat(path_, ": truncated at byte ", pos_));
      }
      const size_t n = std::min(size, end_ - begin_);
      begin_ += n;
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
  absl::Status Digest(uint64_t* bytes, Checksum* checksum) {
    *bytes = 0;
    for (;;) {
      HETERPS_RETURN_IF_ERROR(Fill());
      if (begin_ == end_) return absl::OkStatus();
      checksum->Update(buffer_.data() + begin_, end_ - begin_);
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
  return json{
      {"file", name},          {"table", id},  {"kind", "sparse"},   {"dim", dim},
      {"state_floats", state}, {"rows", rows}, {"bytes", w.bytes()}, {"xxh3_64", w.checksum()}};
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
  return json{{"file", name},         {"table", id},        {"kind", "dense"},
              {"block_sizes", sizes}, {"bytes", w.bytes()}, {"xxh3_64", w.checksum()}};
}

// A tracked table's GEO bases (sparse_table.h, docs/regions.md), beside its rows: a sparse
// table's dim, then each tracked row's key and base; a dense table's blocks, each a byte (1:
// tracked) and, where tracked, its base.
absl::StatusOr<json> WriteSparseBases(base::Env* env, const std::string& dir, int id,
                                      const SparseTable& table) {
  const std::string name = absl::StrCat("sparse-", id, ".bases");
  HETERPS_ASSIGN_OR_RETURN(Writer w, Writer::Open(env, dir + "/" + name));
  const int32_t dim = table.dim();
  HETERPS_RETURN_IF_ERROR(w.Put(&dim, 1));
  int64_t rows = 0;
  HETERPS_RETURN_IF_ERROR(table.ForEachBase([&](uint64_t key, absl::Span<const float> base) {
    ++rows;
    HETERPS_RETURN_IF_ERROR(w.Put(&key, 1));
    return w.Put(base.data(), base.size());
  }));
  HETERPS_RETURN_IF_ERROR(w.Close());
  return json{{"file", name}, {"table", id},         {"kind", "sparse-bases"}, {"dim", dim},
              {"rows", rows}, {"bytes", w.bytes()}, {"xxh3_64", w.checksum()}};
}

absl::StatusOr<json> WriteDenseBases(base::Env* env, const std::string& dir, int id,
                                     const DenseTable& table) {
  const std::string name = absl::StrCat("dense-", id, ".bases");
  HETERPS_ASSIGN_OR_RETURN(Writer w, Writer::Open(env, dir + "/" + name));
  json sizes = json::array();
  for (int b = 0; b < table.num_blocks(); ++b) {
    HETERPS_ASSIGN_OR_RETURN(const std::vector<float> base, table.BaseOf(b));
    sizes.push_back(table.block_size(b));
    const uint8_t tracked = base.empty() ? 0 : 1;
    HETERPS_RETURN_IF_ERROR(w.Put(&tracked, 1));
    HETERPS_RETURN_IF_ERROR(w.Put(base.data(), base.size()));
  }
  HETERPS_RETURN_IF_ERROR(w.Close());
  return json{{"file", name},         {"table", id},        {"kind", "dense-bases"},
              {"block_sizes", sizes}, {"bytes", w.bytes()}, {"xxh3_64", w.checksum()}};
}

}  // namespace

absl::Status CheckJobId(const std::string& job) {
  bool ok = !job.empty() && job.size() <= 64;
  for (char c : job) ok = ok && (absl::ascii_isalnum(c) || c == '_' || c == '-');
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("job id \"", absl::CHexEscape(job.substr(0, 80)),
                                                 "\": 1 to 64 letters, digits, '_' or '-'"));
}

absl::Status SaveCheckpoint(base::Env* env, const std::string& root, int64_t step,
                            const CheckpointTables& tables, const CheckpointId& id) {
  if (!id.job.empty()) HETERPS_RETURN_IF_ERROR(CheckJobId(id.job));
  if (step < 0 || id.num_shards < 1 || id.shard < 0 || id.shard >= id.num_shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint of step ", step, " of shard ", id.shard, " of ", id.num_shards));
  }
  HETERPS_RETURN_IF_ERROR(env->CreateDirs(root));
  const std::string name = absl::StrCat("ckpt-", step);
  const std::string tmp = absl::StrCat(root, "/.", name, ".tmp-", getpid());
  // What a save killed part-way left behind (one process saves into a root at a time).
  HETERPS_ASSIGN_OR_RETURN(const std::vector<std::string> names, env->ListDir(root));
  for (const std::string& entry : names) {
    if (absl::StartsWith(entry, ".ckpt-") && absl::StrContains(entry, ".tmp-")) {
      HETERPS_RETURN_IF_ERROR(env->RemoveAll(root + "/" + entry));
    }
  }
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
    for (const auto& [id, table] : tables.sparse) {
      if (!table->tracking_deltas()) continue;
      HETERPS_ASSIGN_OR_RETURN(json entry, WriteSparseBases(env, tmp, id, *table));
      files.push_back(entry);
    }
    for (const auto& [id, table] : tables.dense) {
      if (!table->tracking_deltas()) continue;
      HETERPS_ASSIGN_OR_RETURN(json entry, WriteDenseBases(env, tmp, id, *table));
      files.push_back(entry);
    }
    json manifest = {{"format", kFormat},           {"job", id.job}, {"shard", id.shard},
                     {"num_shards", id.num_shards}, {"step", step},  {"files", files}};
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

namespace {
absl::StatusOr<int64_t> LoadSources(base::Env* env, const std::vector<std::string>& dirs,
                                    int64_t step, const CheckpointId& id, bool resharding,
                                    const CheckpointTables& tables);
}  // namespace

absl::StatusOr<int64_t> LoadLatestCheckpoint(base::Env* env, const std::string& root,
                                             const CheckpointTables& tables,
                                             const CheckpointId& id) {
  auto latest = base::ReadFile(env, root + "/LATEST", 4096);
  if (!latest.ok()) return absl::NotFoundError(absl::StrCat(root, ": no checkpoint (no LATEST)"));
  std::string name = *latest;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  int64_t step = -1;
  if (!PlainName(name) || !absl::StartsWith(name, "ckpt-") ||
      !absl::SimpleAtoi(name.substr(5), &step) || step < 0 || name != absl::StrCat("ckpt-", step)) {
    return absl::DataLossError(
        absl::StrCat(root, "/LATEST: \"", absl::CHexEscape(name.substr(0, 100)),
                     "\" is not the name of a checkpoint in this directory (ckpt-<step>)"));
  }
  return LoadCheckpoint(env, root, step, tables, id);
}

absl::StatusOr<int64_t> LoadCheckpoint(base::Env* env, const std::string& root, int64_t step,
                                       const CheckpointTables& tables, const CheckpointId& id) {
  const std::string dir = absl::StrCat(root, "/ckpt-", step);
  if (!env->FileExists(dir + "/MANIFEST")) {
    return absl::NotFoundError(absl::StrCat(dir, ": no checkpoint of step ", step));
  }
  return LoadSources(env, {dir}, step, id, /*resharding=*/false, tables);
}

absl::StatusOr<uint64_t> DigestTables(const CheckpointTables& tables) {
  uint64_t digest = 0;
  // Per row (per block) an FNV-1a hash of its table, key and contents; the sum does not depend on
  // the order of the rows.
  auto row_hash = [](int table, uint64_t key, const std::vector<float>& value,
                     const std::vector<float>& state, int64_t steps) {
    uint64_t h = base::Fnv1a64(&table, sizeof(table), 0xcbf29ce484222325ull);
    h = base::Fnv1a64(&key, sizeof(key), h);
    h = base::Fnv1a64(value.data(), value.size() * sizeof(float), h);
    h = base::Fnv1a64(state.data(), state.size() * sizeof(float), h);
    return base::Fnv1a64(&steps, sizeof(steps), h);
  };
  for (const auto& [table_id, table] : tables.sparse) {
    const int id = table_id;  // a structured binding cannot be captured before C++20
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

// One file of a MANIFEST.
struct ManifestFile {
  std::string file;  // a plain name in the checkpoint's directory
  int table = -1;
  bool sparse = false;
  bool bases = false;  // the table's GEO bases, not its rows (format v2)
  int64_t dim = 0, state_floats = 0;  // sparse
  std::vector<int64_t> block_sizes;   // dense
  uint64_t bytes = 0;
  std::string checksum;  // hex, of the kind the format names
};

struct Manifest {
  bool v1 = false;  // FNV-1a checksums, no identity
  CheckpointId id;
  int64_t step = -1;
  std::vector<ManifestFile> files;
};

absl::StatusOr<Manifest> ReadManifest(base::Env* env, const std::string& dir) {
  const std::string path = dir + "/MANIFEST";
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, path, 64 << 20));
  auto fail = [&](const absl::Status& s) {
    return absl::DataLossError(absl::StrCat("not a heterps checkpoint manifest: ", s.message()));
  };
  absl::StatusOr<base::JsonObject> root = base::JsonObject::Parse(text, path);
  if (!root.ok()) return fail(root.status());
  Manifest m;
  absl::StatusOr<std::string> format = root->String("format");
  if (!format.ok()) return fail(format.status());
  if (*format != kFormat && *format != kFormatV1) {
    return absl::DataLossError(absl::StrCat(path, ": format \"", *format, "\", this version reads ",
                                            kFormat, " and ", kFormatV1));
  }
  m.v1 = *format == kFormatV1;
  auto read = [&]() -> absl::Status {
    HETERPS_ASSIGN_OR_RETURN(m.step, root->Int("step", 0));
    if (!m.v1) {
      HETERPS_ASSIGN_OR_RETURN(m.id.job, root->String("job"));
      HETERPS_ASSIGN_OR_RETURN(const int64_t shards, root->Int("num_shards", 1, 1 << 20));
      HETERPS_ASSIGN_OR_RETURN(const int64_t shard, root->Int("shard", 0, shards - 1));
      m.id.shard = static_cast<int>(shard);
      m.id.num_shards = static_cast<int>(shards);
    }
    HETERPS_ASSIGN_OR_RETURN(std::vector<base::JsonObject> files, root->Objects("files"));
    for (const base::JsonObject& f : files) {
      ManifestFile e;
      HETERPS_ASSIGN_OR_RETURN(e.file, f.String("file"));
      if (!PlainName(e.file)) return f.Error("file", "not a plain file name");
      HETERPS_ASSIGN_OR_RETURN(const int64_t table, f.Int("table", 0, 1 << 30));
      e.table = static_cast<int>(table);
      HETERPS_ASSIGN_OR_RETURN(const std::string kind, f.String("kind"));
      if (kind != "sparse" && kind != "dense" &&
          (m.v1 || (kind != "sparse-bases" && kind != "dense-bases"))) {
        return f.Error("kind", "none of sparse, dense, sparse-bases and dense-bases");
      }
      e.sparse = absl::StartsWith(kind, "sparse");
      e.bases = absl::EndsWith(kind, "-bases");
      if (e.sparse) {
        HETERPS_ASSIGN_OR_RETURN(e.dim, f.Int("dim", 1, 1 << 20));
        if (!e.bases) {
          HETERPS_ASSIGN_OR_RETURN(e.state_floats, f.Int("state_floats", 0, 1 << 24));
        }
      } else {
        HETERPS_ASSIGN_OR_RETURN(e.block_sizes, f.Ints("block_sizes"));
      }
      HETERPS_ASSIGN_OR_RETURN(e.bytes, f.Uint("bytes"));
      HETERPS_ASSIGN_OR_RETURN(e.checksum, f.String(m.v1 ? "fnv64" : "xxh3_64"));
      m.files.push_back(std::move(e));
    }
    return absl::OkStatus();
  };
  if (absl::Status s = read(); !s.ok()) return fail(s);
  return m;
}

std::string Describe(const CheckpointId& id) {
  return absl::StrCat(id.job.empty() ? "no job id" : absl::StrCat("job ", id.job), ", shard ",
                      id.shard, " of ", id.num_shards);
}

// A checkpoint directory whose MANIFEST and files have been verified.
struct VerifiedDir {
  std::string dir;
  Manifest manifest;
  std::vector<bool> load;  // per file: a table this load fills
};

// Pass 1 over one source: the checkpoint is `id`'s of `step`, every file whole and intact
// (streamed, never held whole), every sparse table as the manifest describes it, every dense table
// that `tables` holds likewise. A dense table `tables` does not hold is an error unless
// `foreign_dense` (re-sharding: it is another new shard's). Counts what it found of `tables`.
absl::StatusOr<VerifiedDir> Verify(base::Env* env, const std::string& dir, int64_t step,
                                   const CheckpointId& id, const CheckpointTables& tables,
                                   bool foreign_dense, std::map<int, int>* sparse_seen,
                                   std::map<int, int>* dense_seen) {
  VerifiedDir v;
  v.dir = dir;
  HETERPS_ASSIGN_OR_RETURN(v.manifest, ReadManifest(env, dir));
  const Manifest& m = v.manifest;
  if (m.step != step) {
    return absl::DataLossError(absl::StrCat(dir, "/MANIFEST: step ", m.step, ", but this is ",
                                            "the checkpoint of step ", step));
  }
  if (m.v1 && (!id.job.empty() || id.num_shards != 1)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": a ", kFormatV1, " checkpoint names no job or shard; ", Describe(id),
                     " needs a checkpoint that does"));
  }
  if (!m.v1 && (m.id.job != id.job || m.id.shard != id.shard || m.id.num_shards != id.num_shards)) {
    return absl::FailedPreconditionError(
        absl::StrCat(dir, ": the checkpoint of ", Describe(m.id), ", not of ", Describe(id)));
  }
  for (const ManifestFile& f : m.files) {
    const std::string path = dir + "/" + f.file;
    uint64_t size = 0;
    Checksum checksum(m.v1);
    {
      HETERPS_ASSIGN_OR_RETURN(Reader reader, Reader::Open(env, path));
      HETERPS_RETURN_IF_ERROR(reader.Digest(&size, &checksum));
    }
    if (size != f.bytes) {
      return absl::DataLossError(
          absl::StrCat(path, ": ", size, " bytes, the manifest says ", f.bytes, " (truncated?)"));
    }
    if (checksum.Hex() != f.checksum) {
      return absl::DataLossError(absl::StrCat(path, ": checksum mismatch: the file is corrupt"));
    }
    bool load = true;
    if (f.sparse) {
      auto it = tables.sparse.find(f.table);
      if (it == tables.sparse.end() || it->second->dim() != f.dim ||
          (!f.bases && StateFloats(it->second->options().optimizer.kind) * it->second->dim() !=
                           f.state_floats)) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, ": sparse table ", f.table, " of dim ", f.dim, " and ",
                         f.state_floats, " optimizer floats per row has no match here"));
      }
      if (!f.bases) ++(*sparse_seen)[f.table];
    } else {
      auto it = tables.dense.find(f.table);
      load = it != tables.dense.end();
      if (!load && !foreign_dense) {
        return absl::FailedPreconditionError(
            absl::StrCat(path, ": dense table ", f.table, " has no match here"));
      }
      if (load) {
        bool match = static_cast<int>(f.block_sizes.size()) == it->second->num_blocks();
        for (size_t b = 0; match && b < f.block_sizes.size(); ++b) {
          match = f.block_sizes[b] == it->second->block_size(static_cast<int>(b));
        }
        if (!match) {
          return absl::FailedPreconditionError(
              absl::StrCat(path, ": dense table ", f.table, " has no match here"));
        }
        if (!f.bases) ++(*dense_seen)[f.table];
      }
    }
    v.load.push_back(load);
  }
  return v;
}

// Pass 2 over one source: the sparse rows `keep` accepts, the dense tables verified for loading.
absl::Status LoadVerified(base::Env* env, const VerifiedDir& v, const CheckpointTables& tables,
                          const std::function<bool(uint64_t)>& keep) {
  for (size_t i = 0; i < v.manifest.files.size(); ++i) {
    if (!v.load[i] || v.manifest.files[i].bases) continue;
    const ManifestFile& f = v.manifest.files[i];
    HETERPS_ASSIGN_OR_RETURN(Reader r, Reader::Open(env, v.dir + "/" + f.file));
    if (f.sparse) {
      SparseTable& table = *tables.sparse.at(f.table);
      int32_t dim = 0, state = 0;
      HETERPS_RETURN_IF_ERROR(r.Get(&dim, 1));
      HETERPS_RETURN_IF_ERROR(r.Get(&state, 1));
      if (dim != f.dim || state != f.state_floats) {
        return absl::DataLossError(absl::StrCat(v.dir, "/", f.file, ": rows of ", dim, " + ", state,
                                                " floats, the manifest says ", f.dim, " + ",
                                                f.state_floats));
      }
      const size_t row_bytes = 3 * sizeof(int64_t) + (dim + state) * sizeof(float);
      RowData row;
      row.value.resize(dim);
      row.state.resize(state);
      for (;;) {
        HETERPS_ASSIGN_OR_RETURN(const bool done, r.done());
        if (done) break;
        uint64_t key = 0;
        HETERPS_RETURN_IF_ERROR(r.Get(&key, 1));
        if (keep != nullptr && !keep(key)) {
          HETERPS_RETURN_IF_ERROR(r.Skip(row_bytes - sizeof(key)));
          continue;
        }
        HETERPS_RETURN_IF_ERROR(r.Get(&row.steps, 1));
        HETERPS_RETURN_IF_ERROR(r.Get(&row.accesses, 1));
        HETERPS_RETURN_IF_ERROR(r.Get(row.value.data(), row.value.size()));
        HETERPS_RETURN_IF_ERROR(r.Get(row.state.data(), row.state.size()));
        HETERPS_RETURN_IF_ERROR(table.Insert(key, row));
      }
    } else {
      DenseTable& table = *tables.dense.at(f.table);
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

// Pass 3 over one source, after every source's rows: the bases of the tables it tracked (the
// sparse bases `keep` accepts), RestoreBases already called on each.
absl::Status LoadBases(base::Env* env, const VerifiedDir& v, const CheckpointTables& tables,
                       const std::function<bool(uint64_t)>& keep) {
  for (size_t i = 0; i < v.manifest.files.size(); ++i) {
    const ManifestFile& f = v.manifest.files[i];
    if (!v.load[i] || !f.bases) continue;
    const std::string path = v.dir + "/" + f.file;
    HETERPS_ASSIGN_OR_RETURN(Reader r, Reader::Open(env, path));
    if (f.sparse) {
      SparseTable& table = *tables.sparse.at(f.table);
      int32_t dim = 0;
      HETERPS_RETURN_IF_ERROR(r.Get(&dim, 1));
      if (dim != f.dim) {
        return absl::DataLossError(
            absl::StrCat(path, ": bases of ", dim, " floats, the manifest says ", f.dim));
      }
      std::vector<float> base(dim);
      for (;;) {
        HETERPS_ASSIGN_OR_RETURN(const bool done, r.done());
        if (done) break;
        uint64_t key = 0;
        HETERPS_RETURN_IF_ERROR(r.Get(&key, 1));
        HETERPS_RETURN_IF_ERROR(r.Get(base.data(), base.size()));
        if (keep == nullptr || keep(key)) table.SetBase(key, base);
      }
    } else {
      DenseTable& table = *tables.dense.at(f.table);
      for (int b = 0; b < table.num_blocks(); ++b) {
        uint8_t tracked = 0;
        HETERPS_RETURN_IF_ERROR(r.Get(&tracked, 1));
        std::vector<float> base(tracked != 0 ? table.block_size(b) : 0);
        HETERPS_RETURN_IF_ERROR(r.Get(base.data(), base.size()));
        HETERPS_RETURN_IF_ERROR(table.SetBase(b, base));
      }
    }
  }
  return absl::OkStatus();
}

// Verifies every source (dirs[i] is shard i of dirs.size() of id.job when re-sharding, `id`
// itself otherwise), then loads them: every sparse table from every source (when re-sharding, its
// rows of shard id.shard of id.num_shards), every dense table of `tables` from the one source that
// has it. Nothing changes before every source is verified.
absl::StatusOr<int64_t> LoadSources(base::Env* env, const std::vector<std::string>& dirs,
                                    int64_t step, const CheckpointId& id, bool resharding,
                                    const CheckpointTables& tables) {
  std::map<int, int> sparse_seen, dense_seen;
  std::vector<VerifiedDir> verified;
  for (size_t i = 0; i < dirs.size(); ++i) {
    CheckpointId source = id;
    if (resharding) {
      source.shard = static_cast<int>(i);
      source.num_shards = static_cast<int>(dirs.size());
    }
    HETERPS_ASSIGN_OR_RETURN(VerifiedDir v, Verify(env, dirs[i], step, source, tables, resharding,
                                                   &sparse_seen, &dense_seen));
    verified.push_back(std::move(v));
  }
  const std::string where = dirs.size() == 1 ? dirs[0] + "/MANIFEST" : dirs[0] + " and the others";
  for (const auto& [table_id, table] : tables.sparse) {
    if (sparse_seen[table_id] != static_cast<int>(dirs.size())) {
      return absl::DataLossError(
          absl::StrCat(where, ": sparse table ", table_id, " is not in every source, once"));
    }
  }
  for (const auto& [table_id, table] : tables.dense) {
    if (dense_seen[table_id] != 1) {
      return absl::DataLossError(absl::StrCat(where, ": dense table ", table_id, " is in ",
                                              dense_seen[table_id], " sources, not one"));
    }
  }
  std::function<bool(uint64_t)> keep;
  if (resharding) {
    keep = [shard = id.shard, shards = id.num_shards](uint64_t key) {
      return ServerOf(key, shards) == shard;
    };
  }
  for (const auto& [table_id, table] : tables.sparse) HETERPS_RETURN_IF_ERROR(table->Clear());
  for (const VerifiedDir& v : verified) HETERPS_RETURN_IF_ERROR(LoadVerified(env, v, tables, keep));
  // The tracked tables' bases: exactly the checkpoint's (loading a row may have tracked it).
  for (const VerifiedDir& v : verified) {
    for (size_t i = 0; i < v.manifest.files.size(); ++i) {
      const ManifestFile& f = v.manifest.files[i];
      if (!v.load[i] || !f.bases) continue;
      if (f.sparse) tables.sparse.at(f.table)->RestoreBases();
    }
  }
  for (const VerifiedDir& v : verified) HETERPS_RETURN_IF_ERROR(LoadBases(env, v, tables, keep));
  return step;
}

}  // namespace

absl::StatusOr<int64_t> LoadCheckpointResharded(base::Env* env,
                                                const std::vector<std::string>& roots, int64_t step,
                                                const CheckpointId& id,
                                                const CheckpointTables& tables) {
  if (roots.empty() || id.num_shards < 1 || id.shard < 0 || id.shard >= id.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("re-sharding to shard ", id.shard, " of ",
                                                   id.num_shards, " from ", roots.size(),
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
  return LoadSources(env, dirs, step, id, /*resharding=*/true, tables);
}

}  // namespace heterps::ps
