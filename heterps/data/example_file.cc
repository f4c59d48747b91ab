#include "heterps/data/example_file.h"

#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/xxhash.h"

namespace heterps::data {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the binary form is little-endian");

constexpr char kMagic[8] = {'\x89', 'H', 'P', 'X', '\r', '\n', '\x1a', '\n'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 40;
constexpr size_t kChunkHeaderBytes = 16;
constexpr size_t kChunkPayload = 1 << 20;  // a chunk ends once its payload reaches this
// No chunk's payload is larger (a record never is): a reader allocates no more for one.
constexpr size_t kMaxChunkPayload = size_t{64} << 20;
constexpr uint32_t kCountsFlag = 1;

template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T Get(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

// Bytes of a record with `keys` keys (per-slot counts where the layout carries them).
size_t RecordBytes(int dense, int slots, bool counts, size_t keys) {
  return sizeof(float) * (1 + dense) + (counts ? sizeof(uint32_t) * slots : 0) +
         sizeof(uint64_t) * keys;
}

bool HasCounts(const Schema& schema) {
  for (int s = 0; s < schema.slots(); ++s) {
    if (schema.multi_hot(s)) return true;
  }
  return false;
}

}  // namespace

uint64_t LayoutFingerprint(const Schema& schema) {
  std::string text = "heterps layout 1";
  for (const Column& c : schema.columns) {
    // Which field a column reads: with a header, the one its name names; without, its position
    // (ignored columns count).
    if (schema.header && c.role == ColumnRole::kIgnore) continue;
    absl::StrAppend(&text, ";", ColumnRoleName(c.role));
    if (schema.header) absl::StrAppend(&text, ",name=", c.name.size(), ":", c.name);
    switch (c.role) {
      case ColumnRole::kLabel:
        absl::StrAppend(&text, ",threshold=", c.threshold.has_value() ? "" : "none");
        if (c.threshold.has_value()) Put(&text, *c.threshold);
        break;
      case ColumnRole::kDense:
        absl::StrAppend(&text, ",integer=", c.integer,
                        ",transform=", static_cast<int>(c.transform));
        break;
      case ColumnRole::kMultiHot:
        absl::StrAppend(&text, ",separator=", static_cast<int>(c.separator),
                        ",max_ids=", c.max_ids);
        [[fallthrough]];
      case ColumnRole::kSparse:
        absl::StrAppend(&text, ",ids=", static_cast<int>(c.ids), ",buckets=", c.buckets);
        break;
      case ColumnRole::kIgnore:
        break;
    }
  }
  return XXH3_64bits(text.data(), text.size());
}

absl::StatusOr<bool> IsExampleFile(const std::string& path, base::Env* env) {
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> bytes, ByteSource::Open(path, env));
  char head[sizeof(kMagic)];
  size_t got = 0;
  while (got < sizeof(head)) {
    HETERPS_ASSIGN_OR_RETURN(const size_t n, bytes->Read(head + got, sizeof(head) - got));
    if (n == 0) return false;
    got += n;
  }
  return std::memcmp(head, kMagic, sizeof(kMagic)) == 0;
}

// --- ExampleWriter ---

ExampleWriter::ExampleWriter(std::unique_ptr<ByteSink> sink, const Schema& schema)
    : sink_(std::move(sink)),
      dense_(schema.dense_features()),
      slots_(schema.slots()),
      counts_(HasCounts(schema)) {}

absl::StatusOr<std::unique_ptr<ExampleWriter>> ExampleWriter::Create(const std::string& path,
                                                                     const Schema& schema,
                                                                     base::Env* env) {
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSink> sink, ByteSink::Create(path, env));
  std::unique_ptr<ExampleWriter> writer(new ExampleWriter(std::move(sink), schema));
  std::string header(kMagic, sizeof(kMagic));
  Put<uint32_t>(&header, kVersion);
  Put<uint32_t>(&header, static_cast<uint32_t>(writer->dense_));
  Put<uint32_t>(&header, static_cast<uint32_t>(writer->slots_));
  Put<uint32_t>(&header, writer->counts_ ? kCountsFlag : 0);
  Put<uint64_t>(&header, LayoutFingerprint(schema));
  Put<uint64_t>(&header, XXH3_64bits(header.data(), header.size()));
  HETERPS_RETURN_IF_ERROR(writer->sink_->Append(header));
  return writer;
}

absl::Status ExampleWriter::Add(const Batch& batch) {
  if (batch.size == 0) return absl::OkStatus();
  if (batch.dense_width != dense_ || batch.slots != slots_) {
    return absl::InvalidArgumentError(
        absl::StrCat(sink_->path(), ": a batch of ", batch.dense_width, " dense features and ",
                     batch.slots, " slots, where the layout has ", dense_, " and ", slots_));
  }
  for (int64_t r = 0; r < batch.size; ++r) {
    const int64_t begin = slots_ > 0 ? batch.KeyBegin(r, 0) : 0;
    const int64_t end = slots_ > 0 ? batch.KeyEnd(r, slots_ - 1) : 0;
    if (!counts_ && end - begin != slots_) {
      return absl::InvalidArgumentError(absl::StrCat(
          sink_->path(), ": a sample with several ids in a slot, where the layout is one-hot"));
    }
    const size_t bytes = RecordBytes(dense_, slots_, counts_, static_cast<size_t>(end - begin));
    if (bytes > kMaxChunkPayload) {
      return absl::InvalidArgumentError(absl::StrCat(sink_->path(), ": a sample of ", bytes,
                                                     " bytes, more than the ", kMaxChunkPayload,
                                                     " a chunk holds: lower the columns' max_ids"));
    }
    if (chunk_.size() + bytes > kMaxChunkPayload) HETERPS_RETURN_IF_ERROR(Flush());
    Put<float>(&chunk_, batch.labels[r]);
    chunk_.append(reinterpret_cast<const char*>(batch.dense.data() + r * dense_),
                  sizeof(float) * dense_);
    if (counts_) {
      for (int s = 0; s < slots_; ++s) {
        Put<uint32_t>(&chunk_, static_cast<uint32_t>(batch.KeyEnd(r, s) - batch.KeyBegin(r, s)));
      }
    }
    chunk_.append(reinterpret_cast<const char*>(batch.keys.data() + begin),
                  sizeof(uint64_t) * (end - begin));
    ++chunk_records_;
    ++records_;
    if (chunk_.size() >= kChunkPayload) HETERPS_RETURN_IF_ERROR(Flush());
  }
  return absl::OkStatus();
}

absl::Status ExampleWriter::WriteChunk(uint32_t records, const std::string& payload) {
  std::string head;
  Put<uint32_t>(&head, records);
  Put<uint32_t>(&head, static_cast<uint32_t>(payload.size()));
  Put<uint64_t>(&head, XXH3_64bits(payload.data(), payload.size()));
  HETERPS_RETURN_IF_ERROR(sink_->Append(head));
  return sink_->Append(payload);
}

absl::Status ExampleWriter::Flush() {
  if (chunk_records_ == 0) return absl::OkStatus();
  HETERPS_RETURN_IF_ERROR(WriteChunk(chunk_records_, chunk_));
  chunk_.clear();
  chunk_records_ = 0;
  return absl::OkStatus();
}

absl::Status ExampleWriter::Close() {
  HETERPS_RETURN_IF_ERROR(Flush());
  std::string end;
  Put<uint64_t>(&end, static_cast<uint64_t>(records_));
  HETERPS_RETURN_IF_ERROR(WriteChunk(0, end));  // the end: a chunk of no records, their count
  return sink_->Close();
}

absl::StatusOr<ConvertSummary> ConvertToExamples(const ConvertOptions& options) {
  ReaderOptions read;
  read.files = options.files;
  read.schema = options.schema;
  read.bad_lines = options.bad_lines;
  read.parser_threads = options.parser_threads;
  read.batch_size = 4096;
  read.env = options.env;
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> reader, BatchReader::Open(read));
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ExampleWriter> writer,
                           ExampleWriter::Create(options.out, options.schema, options.env));
  Batch batch;
  while (true) {
    HETERPS_ASSIGN_OR_RETURN(const bool more, reader->Next(&batch));
    if (!more) break;
    HETERPS_RETURN_IF_ERROR(writer->Add(batch));
    if (options.progress) {
      const ReaderStats stats = reader->stats();
      options.progress(stats.examples + stats.skipped);
    }
  }
  HETERPS_RETURN_IF_ERROR(writer->Close());
  return ConvertSummary{writer->records(), reader->stats()};
}

// --- ExampleSource ---

ExampleSource::ExampleSource(std::unique_ptr<ByteSource> bytes, int dense, int slots, bool counts)
    : bytes_(std::move(bytes)), dense_(dense), slots_(slots), counts_(counts) {}

absl::StatusOr<std::unique_ptr<ExampleSource>> ExampleSource::Open(
    std::unique_ptr<ByteSource> bytes, const Schema& schema) {
  return OpenChecked(std::move(bytes), &schema);
}

absl::StatusOr<int64_t> ExampleSource::CountRecords(std::unique_ptr<ByteSource> bytes) {
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ExampleSource> in,
                           OpenChecked(std::move(bytes), nullptr));
  while (true) {
    HETERPS_ASSIGN_OR_RETURN(const bool more, in->NextChunk());
    if (!more) return in->record_;
    in->record_ += in->left_;
    in->left_ = 0;
  }
}

absl::StatusOr<std::unique_ptr<ExampleSource>> ExampleSource::OpenChecked(
    std::unique_ptr<ByteSource> bytes, const Schema* schema) {
  std::unique_ptr<ExampleSource> in(new ExampleSource(std::move(bytes), 0, 0, false));
  char header[kHeaderBytes];
  HETERPS_RETURN_IF_ERROR(in->ReadExactly(header, sizeof(kMagic), "the header"));
  if (std::memcmp(header, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(in->path(), ": not a data set in heterps' binary form"));
  }
  HETERPS_RETURN_IF_ERROR(
      in->ReadExactly(header + sizeof(kMagic), kHeaderBytes - sizeof(kMagic), "the header"));
  if (XXH3_64bits(header, kHeaderBytes - sizeof(uint64_t)) !=
      Get<uint64_t>(header + kHeaderBytes - sizeof(uint64_t))) {
    return in->Corrupt("the header is corrupt (its checksum does not match)");
  }
  const uint32_t version = Get<uint32_t>(header + 8);
  if (version != kVersion) {
    return absl::FailedPreconditionError(absl::StrCat(in->path(), ": binary form version ", version,
                                                      ", where this build reads ", kVersion,
                                                      ": convert the data again"));
  }
  const uint32_t dense = Get<uint32_t>(header + 12), slots = Get<uint32_t>(header + 16);
  const uint32_t flags = Get<uint32_t>(header + 20);
  const uint64_t fingerprint = Get<uint64_t>(header + 24);
  if (dense > (1u << 20) || slots > (1u << 20) || (flags & ~kCountsFlag) != 0) {
    return in->Corrupt("the header's widths or flags are not ones a layout has");
  }
  in->dense_ = static_cast<int>(dense);
  in->slots_ = static_cast<int>(slots);
  in->counts_ = (flags & kCountsFlag) != 0;
  if (schema == nullptr) return in;
  if (in->dense_ != schema->dense_features() || in->slots_ != schema->slots()) {
    return absl::FailedPreconditionError(
        absl::StrCat(in->path(), ": converted with a layout of ", dense, " dense features and ",
                     slots, " slots, where the model's data section has ", schema->dense_features(),
                     " and ", schema->slots(), ": convert the data again with this model spec"));
  }
  if (fingerprint != LayoutFingerprint(*schema) || in->counts_ != HasCounts(*schema)) {
    return absl::FailedPreconditionError(absl::StrCat(
        in->path(),
        ": converted with another layout than the model's data section (a column's role, "
        "transform, id format, buckets, max_ids or label threshold differs): convert the data "
        "again with this model spec"));
  }
  return in;
}

absl::Status ExampleSource::Corrupt(const std::string& why) const {
  return absl::DataLossError(absl::StrCat(path(), ": ", why));
}

absl::Status ExampleSource::ReadExactly(char* out, size_t size, const char* what) {
  size_t got = 0;
  while (got < size) {
    HETERPS_ASSIGN_OR_RETURN(const size_t n, bytes_->Read(out + got, size - got));
    if (n == 0) {
      return Corrupt(absl::StrCat("ends inside ", what, " at byte ", offset_ + got,
                                  " (truncated? convert the data again)"));
    }
    got += n;
  }
  offset_ += static_cast<int64_t>(size);
  return absl::OkStatus();
}

absl::StatusOr<bool> ExampleSource::NextChunk() {
  if (done_) return false;
  chunk_offset_ = offset_;
  char head[kChunkHeaderBytes];
  HETERPS_RETURN_IF_ERROR(ReadExactly(head, sizeof(head), "a chunk's header"));
  const uint32_t records = Get<uint32_t>(head);
  const uint32_t bytes = Get<uint32_t>(head + 4);
  const uint64_t hash = Get<uint64_t>(head + 8);
  // Sizes checked before anything is allocated: one-hot records have a fixed size.
  const size_t fixed = RecordBytes(dense_, slots_, counts_, counts_ ? 0 : slots_);
  const bool fits = records == 0
                        ? bytes == sizeof(uint64_t)
                        : bytes <= kMaxChunkPayload &&
                              (counts_ ? bytes >= records * fixed : bytes == records * fixed);
  if (!fits) {
    return Corrupt(absl::StrCat("the chunk at byte ", chunk_offset_, " is corrupt (", records,
                                " records in ", bytes, " bytes)"));
  }
  payload_.resize(bytes);
  HETERPS_RETURN_IF_ERROR(ReadExactly(payload_.data(), bytes, "a chunk"));
  if (XXH3_64bits(payload_.data(), payload_.size()) != hash) {
    return Corrupt(absl::StrCat("the chunk at byte ", chunk_offset_,
                                " is corrupt (its checksum does not match)"));
  }
  at_ = 0;
  if (records > 0) {
    left_ = records;
    return true;
  }
  const uint64_t total = Get<uint64_t>(payload_.data());
  if (total != static_cast<uint64_t>(record_)) {
    return Corrupt(
        absl::StrCat("its end counts ", total, " records, where its chunks hold ", record_));
  }
  char extra;
  HETERPS_ASSIGN_OR_RETURN(const size_t n, bytes_->Read(&extra, 1));
  if (n != 0) return Corrupt(absl::StrCat("has bytes after its end, at byte ", offset_));
  done_ = true;
  return false;
}

absl::StatusOr<bool> ExampleSource::Next() {
  while (left_ == 0) {
    HETERPS_ASSIGN_OR_RETURN(const bool more, NextChunk());
    if (!more) return false;
  }
  const size_t size = payload_.size();
  const size_t fixed = RecordBytes(dense_, slots_, counts_, 0);
  uint64_t keys = slots_;
  if (counts_ && at_ + fixed <= size) {
    const char* counts = payload_.data() + at_ + sizeof(float) * (1 + dense_);
    keys = 0;
    for (int s = 0; s < slots_; ++s) keys += Get<uint32_t>(counts + sizeof(uint32_t) * s);
  }
  const size_t need = RecordBytes(dense_, slots_, counts_, keys);
  if (at_ + need > size) {
    return Corrupt(
        absl::StrCat("record ", record_ + 1, " overruns the chunk at byte ", chunk_offset_));
  }
  current_ = payload_.data() + at_;
  keys_ = static_cast<int64_t>(keys);
  at_ += need;
  ++record_;
  if (--left_ == 0 && at_ != size) {
    return Corrupt(absl::StrCat("the chunk at byte ", chunk_offset_, " has ", size - at_,
                                " bytes after its last record"));
  }
  return true;
}

void ExampleSource::AppendTo(Batch* batch) const {
  // As Batch::Add does with the Example the record was written from.
  const char* const dense = current_ + sizeof(float);
  const char* const counts = dense + sizeof(float) * dense_;
  const char* const keys = counts + (counts_ ? sizeof(uint32_t) * slots_ : 0);
  auto count = [&](int s) -> int32_t {
    return counts_ ? static_cast<int32_t>(Get<uint32_t>(counts + sizeof(uint32_t) * s)) : 1;
  };
  if (batch->size == 0) {
    batch->dense_width = dense_;
    batch->slots = slots_;
  }
  if (counts_ && batch->one_hot()) {
    bool one = true;
    for (int s = 0; s < slots_ && one; ++s) one = count(s) == 1;
    if (!one) batch->MakeRagged();
  }
  ++batch->size;
  batch->labels.push_back(Get<float>(current_));
  const size_t d = batch->dense.size(), k = batch->keys.size();
  batch->dense.resize(d + dense_);
  std::memcpy(batch->dense.data() + d, dense, sizeof(float) * dense_);
  batch->keys.resize(k + keys_);
  std::memcpy(batch->keys.data() + k, keys, sizeof(uint64_t) * keys_);
  if (!batch->one_hot()) {
    for (int s = 0; s < slots_; ++s) batch->offsets.push_back(batch->offsets.back() + count(s));
  }
}

}  // namespace heterps::data
