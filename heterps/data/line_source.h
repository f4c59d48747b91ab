// Data files as people keep them: plain, gzip or zstd compressed, one file or many, named one by
// one or by a glob.
//
//   HETERPS_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandDataPaths({"day_*.gz"}));
//   HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> bytes, ByteSource::Open(files[0]));
//   LineSource lines(std::move(bytes));
//   absl::string_view line;
//   while (true) {
//     HETERPS_ASSIGN_OR_RETURN(bool more, lines.Next(&line));
//     if (!more) break;
//     ...
//   }
//
// Compression is told by a file's first bytes, never by its name: gzip (1f 8b; several members
// one after the other, as `cat a.gz b.gz` or pigz write them, are one stream) and zstd (28 b5 2f
// fd; any number of frames); anything else is read as it is. Reading streams: memory is a fixed
// buffer whatever the file's size, and the decompression runs on the reading thread (the data
// reader's own, not a training thread).
//
// Errors name the file: NotFound "<path>: cannot open: <why>"; InvalidArgument "<path>: is a
// directory"; DataLoss "<path>: <gzip|zstd> data is corrupt: <the library's reason>" or
// "<path>: ends inside a <gzip|zstd> stream (truncated?)", and a read error with its errno text.
//
// Thread safety: one thread at a time per object; ExpandDataPaths is thread-safe.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/base/env.h"

namespace heterps::data {

enum class Compression { kNone, kGzip, kZstd };
absl::string_view CompressionName(Compression compression);  // "none", "gzip", "zstd"

// A file's content, decompressed.
class ByteSource {
 public:
  // `path` through `env`: NotFound when it cannot be opened, InvalidArgument for a directory.
  static absl::StatusOr<std::unique_ptr<ByteSource>> Open(const std::string& path,
                                                          base::Env* env = base::DefaultEnv());
  virtual ~ByteSource() = default;

  // Up to `size` (> 0) bytes of the content into `buffer`: how many, 0 only at the end.
  virtual absl::StatusOr<size_t> Read(char* buffer, size_t size) = 0;

  virtual Compression compression() const = 0;
  const std::string& path() const { return path_; }

 protected:
  explicit ByteSource(std::string path) : path_(std::move(path)) {}

 private:
  std::string path_;
};

// A ByteSource's lines.
class LineSource {
 public:
  explicit LineSource(std::unique_ptr<ByteSource> source, size_t buffer_bytes = 1 << 20);

  // The next line without its '\n' into `line` (valid until the next call), true; false at the
  // end. A last line without a '\n' is a line; an empty file has none; a UTF-8 byte-order mark
  // at the start of the content is dropped. Errors: the source's.
  absl::StatusOr<bool> Next(absl::string_view* line);

  const ByteSource& source() const { return *source_; }

 private:
  std::unique_ptr<ByteSource> source_;
  std::vector<char> buffer_;
  size_t begin_ = 0, end_ = 0;  // unread bytes: buffer_[begin_, end_)
  std::string carry_;           // the start of a line that crosses a refill
  bool eof_ = false;
  bool first_ = true;  // no line returned yet

  absl::StatusOr<bool> NextRaw(absl::string_view* line);
};

// The files `args` name, in order: each argument a file, or a glob pattern (with *, ? or [)
// standing for the files it matches in sorted order. NotFound "no file matches "<pattern>"" for a
// pattern that matches nothing; InvalidArgument for a directory ("<path>: is a directory: name
// its files, or a glob such as <path>/*.gz") or an empty list. A plain name that does not exist
// is returned as it is (opening it says so).
absl::StatusOr<std::vector<std::string>> ExpandDataPaths(const std::vector<std::string>& args);

}  // namespace heterps::data
