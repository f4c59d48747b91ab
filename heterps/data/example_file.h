// A data set in binary form: the examples a layout's lines become (labels, transformed dense
// features, hashed keys), written once by `heterps convert` so that every later read parses
// nothing. The reader (reader.h) tells such a file from text by its first bytes, as it tells
// compression, so that `--data day_0.hpx` works wherever `--data day_0.tsv` does.
//
//   HETERPS_ASSIGN_OR_RETURN(auto writer, ExampleWriter::Create("day_0.hpx", schema));
//   HETERPS_RETURN_IF_ERROR(writer->Add(batch));   // any number of batches
//   HETERPS_RETURN_IF_ERROR(writer->Close());
//
//   HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> bytes, ByteSource::Open("day_0.hpx"));
//   HETERPS_ASSIGN_OR_RETURN(auto in, ExampleSource::Open(std::move(bytes), schema));
//   while (true) {
//     HETERPS_ASSIGN_OR_RETURN(bool more, in->Next());
//     if (!more) break;
//     in->AppendTo(&batch);                        // or skip it: the next Next() moves on
//   }
//
// The format (little-endian; docs/data.md):
//   header, 40 bytes: magic "\x89HPX\r\n\x1a\n", u32 version (1), u32 dense features, u32 slots,
//     u32 flags (bit 0: records carry per-slot key counts, a multi-hot layout), u64 the layout's
//     fingerprint (LayoutFingerprint), u64 XXH3-64 of the 32 bytes before;
//   chunks: u32 records (> 0), u32 payload bytes (at most 64 MiB; about 1 MiB but the last),
//     u64 XXH3-64 of the payload, the payload: the
//     records one after the other, each f32 label, f32 dense[features], then either u64 keys[slots]
//     (one-hot layouts) or u32 counts[slots] and u64 keys[sum of counts];
//   the end: a chunk of 0 records whose 8-byte payload is the u64 count of all records.
// Written through a ByteSink, so that a name ending in .gz or .zst compresses it (the reader
// decompresses before it looks at the magic). A file without its end, a checksum that does not
// match, sizes that do not add up or a record that overruns its chunk is DataLoss naming the file
// (no allocation is larger than a chunk may be); a layout other than the one the file was
// converted with is FailedPrecondition naming the file.
//
// Thread safety: one thread at a time per object; LayoutFingerprint and IsExampleFile are
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heterps/data/byte_sink.h"
#include "heterps/data/line_source.h"
#include "heterps/data/reader.h"
#include "heterps/data/schema.h"

namespace heterps::data {

// What a layout makes of a line, hashed: which field each label, dense, sparse and multi-hot
// column reads (its name where the layout has a header, its position among all the columns where
// it has none), and its role, transform, integer rule, id format, separator, max_ids, buckets and
// threshold, in order. Not the delimiter or quoting, which change how a line is split but not
// what it becomes. Stable across runs, hosts and versions.
uint64_t LayoutFingerprint(const Schema& schema);

// Whether the content of `path` (decompressed) starts with the binary form's magic. The errors of
// ByteSource::Open and Read.
absl::StatusOr<bool> IsExampleFile(const std::string& path, base::Env* env = base::DefaultEnv());

struct ConvertOptions {
  std::vector<std::string> files;  // text (or binary) data files, read in order
  Schema schema = CriteoSchema();
  std::string out;  // the binary file; .gz or .zst compress it
  BadLinePolicy bad_lines = BadLinePolicy::kStop;
  int parser_threads = 1;                       // ReaderOptions::parser_threads
  std::function<void(int64_t lines)> progress;  // data lines read so far, now and then
  base::Env* env = base::DefaultEnv();          // the files are read and written through it
};

struct ConvertSummary {
  int64_t records = 0;  // written
  ReaderStats read;     // what the reader saw (skipped lines, the first of them)
};

// Writes the examples of `options.files` (all of them, in order: one reader of world 1, no
// held-out split) to `options.out` in the binary form. Under kStop a bad line fails the whole
// conversion with the reader's message and leaves `out` as it was; under kSkip it is counted and
// left out (the binary file's records are then numbered without it). The reader's and the
// writer's errors.
absl::StatusOr<ConvertSummary> ConvertToExamples(const ConvertOptions& options);

class ExampleWriter {
 public:
  // Creates `path` (atomically, as ByteSink does) for examples of `schema`'s layout.
  static absl::StatusOr<std::unique_ptr<ExampleWriter>> Create(const std::string& path,
                                                               const Schema& schema,
                                                               base::Env* env = base::DefaultEnv());

  // Appends every sample of `batch` (of the layout's widths: InvalidArgument otherwise).
  absl::Status Add(const Batch& batch);
  // Writes the last chunk and the end, and renames the file into place.
  absl::Status Close();

  int64_t records() const { return records_; }

 private:
  ExampleWriter(std::unique_ptr<ByteSink> sink, const Schema& schema);
  absl::Status Flush();  // the pending chunk, if any
  // A chunk's header (records, payload bytes, the payload's XXH3-64), then the payload.
  absl::Status WriteChunk(uint32_t records, const std::string& payload);

  std::unique_ptr<ByteSink> sink_;
  int dense_ = 0, slots_ = 0;
  bool counts_ = false;  // records carry counts
  std::string chunk_;    // the pending chunk's payload
  uint32_t chunk_records_ = 0;
  int64_t records_ = 0;
};

class ExampleSource {
 public:
  // Reads the header from `bytes` (positioned at the start of the content) and checks it against
  // `schema`: InvalidArgument when the content is not of the binary form, FailedPrecondition when
  // it was converted with another layout or version, DataLoss when it ends inside the header or
  // the header is corrupt.
  static absl::StatusOr<std::unique_ptr<ExampleSource>> Open(std::unique_ptr<ByteSource> bytes,
                                                             const Schema& schema);

  // The records of a file of the binary form, from its chunks' headers (every payload read and
  // checked, no record decoded), whatever its layout. The errors of Open and Next.
  static absl::StatusOr<int64_t> CountRecords(std::unique_ptr<ByteSource> bytes);

  // Moves to the next record (true), or false at the end (after checking the end's count).
  // DataLoss "<path>: ..." for a truncated or corrupt file.
  absl::StatusOr<bool> Next();
  // Appends the current record to `batch` (of the layout's widths, or empty).
  void AppendTo(Batch* batch) const;

  int64_t record() const { return record_; }  // the current record's number in the file, from 1
  int64_t keys() const { return keys_; }      // the current record's keys
  const std::string& path() const { return bytes_->path(); }

 private:
  ExampleSource(std::unique_ptr<ByteSource> bytes, int dense, int slots, bool counts);
  // Reads the header; checks it against `schema` unless null.
  static absl::StatusOr<std::unique_ptr<ExampleSource>> OpenChecked(
      std::unique_ptr<ByteSource> bytes, const Schema* schema);
  // Reads the next chunk (false: the end, its count checked).
  absl::StatusOr<bool> NextChunk();
  absl::Status ReadExactly(char* out, size_t size, const char* what);
  absl::Status Corrupt(const std::string& why) const;

  std::unique_ptr<ByteSource> bytes_;
  int dense_, slots_;
  bool counts_;
  std::string payload_;            // the current chunk's
  size_t at_ = 0;                  // the next record's offset in payload_
  uint32_t left_ = 0;              // records of the chunk not yet reached
  int64_t record_ = 0;             // records reached in the file
  int64_t chunk_offset_ = 0;       // the current chunk's header's byte in the content
  int64_t offset_ = 0;             // bytes read of the content
  bool done_ = false;              // the end was read
  const char* current_ = nullptr;  // the current record
  int64_t keys_ = 0;               // its keys
};

}  // namespace heterps::data
