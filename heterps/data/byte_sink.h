// Writing a data file the way its name asks: `train.tsv.gz` gzip (what zcat and gunzip read),
// `train.tsv.zst` or `.zstd` zstd (what zstdcat reads), anything else as plain text. The reading
// side (line_source.h) tells compression by the first bytes, so every file written here reads back.
//
//   HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSink> sink, ByteSink::Create("day_0.tsv.gz"));
//   HETERPS_RETURN_IF_ERROR(sink->Append("1\t5\t...\n"));
//   HETERPS_RETURN_IF_ERROR(sink->Close());
//
// Atomic: the bytes go to `<path>.tmp-<pid>` and Close() flushes, fsyncs and renames it to `path`;
// a sink destroyed without a successful Close() removes its temporary file, so `path` either holds
// the whole file or is as it was.
//
// Errors name the file: Unavailable "<path>: cannot create: <why>", "<path>: write failed: <why>";
// Internal "<path>: <gzip|zstd> compression failed: <the library's reason>".
//
// Thread safety: one thread at a time.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/base/env.h"
#include "heterps/data/line_source.h"

namespace heterps::data {

// The compression a file's name asks for: kGzip for ".gz", kZstd for ".zst" and ".zstd", else
// kNone.
Compression CompressionOfName(absl::string_view path);

// `path` without the extension of its compression ("train.tsv.gz" -> "train.tsv"); `path` itself
// when it names none.
std::string UncompressedName(absl::string_view path);

class ByteSink {
 public:
  // Writes `path` through `env` (its temporary file, the rename). Unavailable naming the path when
  // the temporary file cannot be created.
  static absl::StatusOr<std::unique_ptr<ByteSink>> Create(const std::string& path,
                                                          base::Env* env = base::DefaultEnv());
  virtual ~ByteSink();

  // Appends `bytes` to the content (compressed on this thread, written in large blocks).
  virtual absl::Status Append(absl::string_view bytes) = 0;
  // Ends the stream, flushes, fsyncs and renames; the sink takes no more bytes after it.
  absl::Status Close();

  Compression compression() const { return compression_; }
  const std::string& path() const { return path_; }

 protected:
  ByteSink(std::string path, Compression compression, base::Env* env,
           std::unique_ptr<base::WritableFile> file);
  // Ends the compressed stream (writing what the compressor holds back).
  virtual absl::Status Finish() = 0;
  // Writes raw bytes to the temporary file (gathered into large appends).
  absl::Status Write(const void* data, size_t size);
  absl::Status Failed(absl::string_view why) const;

 private:
  // The bytes Write gathered, appended to the file when they pass a megabyte and at Close. After
  // a failed append every Write, Drain and Close returns that error.
  absl::Status Drain();
  // `status` of the temporary file named after `path_`.
  absl::Status Named(const absl::Status& status) const;

  std::string path_, tmp_;
  Compression compression_;
  base::Env* env_;
  std::unique_ptr<base::WritableFile> file_;  // null after Close()
  std::string pending_;
  absl::Status failed_;
};

}  // namespace heterps::data
