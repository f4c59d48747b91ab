#include "heterps/data/line_source.h"

#include <glob.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "heterps/base/status_macros.h"

namespace heterps::data {

namespace {

// The file under a source, read through the Env: the bytes Peek looked at first, then the rest.
class File {
 public:
  explicit File(std::unique_ptr<base::SequentialFile> file) : file_(std::move(file)) {}

  // The first `n` bytes (fewer in a shorter file), which Read then returns first. Once, before
  // any Read.
  absl::StatusOr<absl::string_view> Peek(size_t n) {
    peeked_.resize(n);
    size_t got = 0;
    while (got < n) {
      HETERPS_ASSIGN_OR_RETURN(const size_t more, ReadFile(peeked_.data() + got, n - got));
      if (more == 0) break;
      got += more;
    }
    peeked_.resize(got);
    return absl::string_view(peeked_);
  }

  // Up to `size` bytes; 0 only at the end of the file.
  absl::StatusOr<size_t> Read(char* buffer, size_t size) {
    if (used_ < peeked_.size()) {
      const size_t n = std::min(size, peeked_.size() - used_);
      std::memcpy(buffer, peeked_.data() + used_, n);
      used_ += n;
      return n;
    }
    return ReadFile(buffer, size);
  }

 private:
  absl::StatusOr<size_t> ReadFile(char* buffer, size_t size) {
    absl::StatusOr<size_t> n = file_->Read(size, buffer);
    // The file is there but its bytes cannot be had: their loss, not a pass to retry.
    if (!n.ok()) return absl::DataLossError(n.status().message());
    return n;
  }

  std::unique_ptr<base::SequentialFile> file_;
  std::string peeked_;
  size_t used_ = 0;
};

class PlainSource : public ByteSource {
 public:
  PlainSource(std::string path, File file) : ByteSource(std::move(path)), file_(std::move(file)) {}

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    return file_.Read(buffer, size);
  }
  Compression compression() const override { return Compression::kNone; }

 private:
  File file_;
};

// Compressed input read through a buffer of its own.
class CompressedSource : public ByteSource {
 protected:
  CompressedSource(std::string path, File file, size_t in_bytes)
      : ByteSource(std::move(path)), file_(std::move(file)), in_(in_bytes) {}

  // Refills the input when it is used up; false at the end of the file.
  absl::StatusOr<bool> Fill() {
    if (in_begin_ < in_end_) return true;
    if (at_end_) return false;
    in_begin_ = 0;
    HETERPS_ASSIGN_OR_RETURN(in_end_, file_.Read(in_.data(), in_.size()));
    if (in_end_ == 0) {
      at_end_ = true;
      return false;
    }
    return true;
  }

  absl::Status Truncated() const {
    return absl::DataLossError(absl::StrCat(
        path(), ": ends inside a ", CompressionName(compression()), " stream (truncated?)"));
  }
  absl::Status Corrupt(absl::string_view why) const {
    return absl::DataLossError(
        absl::StrCat(path(), ": ", CompressionName(compression()), " data is corrupt: ", why));
  }

  File file_;
  std::vector<char> in_;
  size_t in_begin_ = 0, in_end_ = 0;
  bool at_end_ = false;
};

class GzipSource : public CompressedSource {
 public:
  GzipSource(std::string path, File file)
      : CompressedSource(std::move(path), std::move(file), 1 << 18) {
    // 16 + MAX_WBITS: a gzip wrapper, its CRC and length checked.
    ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
  }
  ~GzipSource() override { inflateEnd(&z_); }

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    if (!ok_) return Corrupt("zlib could not start (out of memory?)");
    size_t produced = 0;
    while (produced == 0) {
      absl::StatusOr<bool> more = Fill();
      if (!more.ok()) return more.status();
      if (!*more && !in_member_) return size_t{0};
      // At the end of the file inflate still runs once, with no input: it may hold output back.
      z_.next_in = reinterpret_cast<Bytef*>(in_.data() + in_begin_);
      z_.avail_in = static_cast<uInt>(in_end_ - in_begin_);
      z_.next_out = reinterpret_cast<Bytef*>(buffer);
      z_.avail_out = static_cast<uInt>(std::min<size_t>(size, 1u << 30));
      const int rc = inflate(&z_, Z_NO_FLUSH);
      in_begin_ = in_end_ - z_.avail_in;
      produced = reinterpret_cast<char*>(z_.next_out) - buffer;
      in_member_ = true;
      if (!*more && produced == 0 && rc != Z_STREAM_END) return Truncated();
      if (rc == Z_STREAM_END) {
        // Another member may follow (concatenated gzip files are one stream).
        inflateReset(&z_);
        in_member_ = false;
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return Corrupt(z_.msg != nullptr ? z_.msg : absl::StrCat("zlib error ", rc));
      }
    }
    return produced;
  }
  Compression compression() const override { return Compression::kGzip; }

 private:
  z_stream z_{};
  bool ok_ = false;
  bool in_member_ = false;  // inside a member that has not ended
};

class ZstdSource : public CompressedSource {
 public:
  ZstdSource(std::string path, File file)
      : CompressedSource(std::move(path), std::move(file), ZSTD_DStreamInSize()),
        z_(ZSTD_createDCtx()) {}
  ~ZstdSource() override { ZSTD_freeDCtx(z_); }

  absl::StatusOr<size_t> Read(char* buffer, size_t size) override {
    if (z_ == nullptr) return Corrupt("zstd could not start (out of memory?)");
    ZSTD_outBuffer out{buffer, size, 0};
    while (out.pos == 0) {
      absl::StatusOr<bool> more = Fill();
      if (!more.ok()) return more.status();
      if (!*more && !in_frame_) return size_t{0};
      // At the end of the file the decoder still runs once, with no input: it may hold output.
      ZSTD_inBuffer in{in_.data(), in_end_, in_begin_};
      const size_t rc = ZSTD_decompressStream(z_, &out, &in);
      in_begin_ = in.pos;
      if (ZSTD_isError(rc)) return Corrupt(ZSTD_getErrorName(rc));
      in_frame_ = rc != 0;  // 0: a frame ended and all of it is out
      if (!*more && out.pos == 0 && in_frame_) return Truncated();
    }
    return out.pos;
  }
  Compression compression() const override { return Compression::kZstd; }

 private:
  ZSTD_DCtx* z_;
  bool in_frame_ = false;
};

}  // namespace

absl::string_view CompressionName(Compression compression) {
  switch (compression) {
    case Compression::kGzip:
      return "gzip";
    case Compression::kZstd:
      return "zstd";
    case Compression::kNone:
      break;
  }
  return "none";
}

absl::StatusOr<std::unique_ptr<ByteSource>> ByteSource::Open(const std::string& path,
                                                             base::Env* env) {
  if (env->IsDirectory(path)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory"));
  }
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<base::SequentialFile> in, env->NewSequentialFile(path));
  File file(std::move(in));
  // The first bytes tell the compression; the source reads them again.
  HETERPS_ASSIGN_OR_RETURN(const absl::string_view head, file.Peek(4));
  if (absl::StartsWith(head, "\x1f\x8b")) {
    return std::unique_ptr<ByteSource>(new GzipSource(path, std::move(file)));
  }
  if (head == absl::string_view("\x28\xb5\x2f\xfd", 4)) {
    return std::unique_ptr<ByteSource>(new ZstdSource(path, std::move(file)));
  }
  return std::unique_ptr<ByteSource>(new PlainSource(path, std::move(file)));
}

LineSource::LineSource(std::unique_ptr<ByteSource> source, size_t buffer_bytes)
    : source_(std::move(source)), buffer_(std::max<size_t>(buffer_bytes, 16)) {}

absl::StatusOr<bool> LineSource::Next(absl::string_view* line) {
  HETERPS_ASSIGN_OR_RETURN(const bool more, NextRaw(line));
  // A UTF-8 byte-order mark (as some editors and spreadsheet exports write) is not data: left on,
  // it would make the first header name or the first label unreadable.
  if (more && first_) {
    first_ = false;
    absl::ConsumePrefix(line, "\xEF\xBB\xBF");
  }
  return more;
}

absl::StatusOr<bool> LineSource::NextRaw(absl::string_view* line) {
  carry_.clear();
  while (true) {
    if (begin_ < end_) {
      const char* start = buffer_.data() + begin_;
      const char* nl = static_cast<const char*>(std::memchr(start, '\n', end_ - begin_));
      if (nl != nullptr) {
        begin_ = nl + 1 - buffer_.data();
        if (carry_.empty()) {
          *line = absl::string_view(start, nl - start);
        } else {
          carry_.append(start, nl - start);
          *line = carry_;
        }
        return true;
      }
      carry_.append(start, end_ - begin_);
      begin_ = end_ = 0;
    }
    if (eof_) break;
    absl::StatusOr<size_t> n = source_->Read(buffer_.data(), buffer_.size());
    if (!n.ok()) return n.status();
    if (*n == 0) eof_ = true;
    begin_ = 0;
    end_ = *n;
  }
  if (carry_.empty()) return false;
  *line = carry_;  // the last line, without a '\n'
  return true;
}

absl::StatusOr<std::vector<std::string>> ExpandDataPaths(const std::vector<std::string>& args) {
  if (args.empty()) return absl::InvalidArgumentError("no data files given");
  std::vector<std::string> files;
  auto directory = [](const std::string& path) { return base::DefaultEnv()->IsDirectory(path); };
  for (const std::string& arg : args) {
    if (arg.find_first_of("*?[") == std::string::npos) {
      if (directory(arg)) {
        return absl::InvalidArgumentError(absl::StrCat(
            arg, ": is a directory: name its files, or a glob such as ", arg, "/*.gz"));
      }
      files.push_back(arg);
      continue;
    }
    glob_t matches{};
    const int rc = ::glob(arg.c_str(), 0, nullptr, &matches);
    size_t added = 0;
    if (rc == 0) {
      for (size_t i = 0; i < matches.gl_pathc; ++i) {
        std::string path = matches.gl_pathv[i];
        if (directory(path)) continue;
        files.push_back(std::move(path));
        ++added;
      }
    }
    globfree(&matches);
    if (rc == GLOB_NOSPACE || rc == GLOB_ABORTED) {
      return absl::UnavailableError(absl::StrCat("\"", arg, "\": the glob could not be read"));
    }
    if (added == 0) return absl::NotFoundError(absl::StrCat("no file matches \"", arg, "\""));
  }
  return files;
}

}  // namespace heterps::data
