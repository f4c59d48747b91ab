#include "heterps/data/byte_sink.h"

#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace heterps::data {
namespace {

class PlainSink : public ByteSink {
 public:
  using ByteSink::ByteSink;
  absl::Status Append(absl::string_view bytes) override {
    return Write(bytes.data(), bytes.size());
  }

 protected:
  absl::Status Finish() override { return absl::OkStatus(); }
};

// gzip as gzip(1) writes it: one member, deflate at zlib's default level.
class GzipSink : public ByteSink {
 public:
  GzipSink(std::string path, base::Env* env, std::unique_ptr<base::WritableFile> file)
      : ByteSink(std::move(path), Compression::kGzip, env, std::move(file)), out_(1 << 18) {
    ok_ = deflateInit2(&z_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                       Z_DEFAULT_STRATEGY) == Z_OK;
  }
  ~GzipSink() override {
    if (ok_) deflateEnd(&z_);
  }
  absl::Status Append(absl::string_view bytes) override {
    // zlib counts its input in 32 bits.
    constexpr size_t kPiece = size_t{1} << 30;
    for (size_t at = 0; at < bytes.size(); at += kPiece) {
      if (absl::Status s = Deflate(bytes.substr(at, kPiece), Z_NO_FLUSH); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

 protected:
  absl::Status Finish() override { return Deflate("", Z_FINISH); }

 private:
  absl::Status Deflate(absl::string_view bytes, int flush) {
    if (!ok_) return Failed("zlib could not start (out of memory?)");
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(bytes.data()));
    z_.avail_in = static_cast<uInt>(bytes.size());
    int rc = Z_OK;
    do {
      z_.next_out = out_.data();
      z_.avail_out = static_cast<uInt>(out_.size());
      rc = deflate(&z_, flush);
      if (rc == Z_STREAM_ERROR) return Failed(z_.msg != nullptr ? z_.msg : "stream error");
      if (absl::Status s = Write(out_.data(), out_.size() - z_.avail_out); !s.ok()) return s;
    } while (z_.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    return absl::OkStatus();
  }

  z_stream z_{};
  bool ok_ = false;
  std::vector<Bytef> out_;
};

// zstd as zstd(1) writes it: one frame at level 3, its checksum on.
class ZstdSink : public ByteSink {
 public:
  ZstdSink(std::string path, base::Env* env, std::unique_ptr<base::WritableFile> file)
      : ByteSink(std::move(path), Compression::kZstd, env, std::move(file)),
        z_(ZSTD_createCCtx()),
        out_(ZSTD_CStreamOutSize()) {
    if (z_ != nullptr) ZSTD_CCtx_setParameter(z_, ZSTD_c_checksumFlag, 1);
  }
  ~ZstdSink() override { ZSTD_freeCCtx(z_); }
  absl::Status Append(absl::string_view bytes) override { return Compress(bytes, ZSTD_e_continue); }

 protected:
  absl::Status Finish() override { return Compress("", ZSTD_e_end); }

 private:
  absl::Status Compress(absl::string_view bytes, ZSTD_EndDirective mode) {
    if (z_ == nullptr) return Failed("zstd could not start (out of memory?)");
    ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
    size_t left = 0;
    do {
      ZSTD_outBuffer out{out_.data(), out_.size(), 0};
      left = ZSTD_compressStream2(z_, &out, &in, mode);
      if (ZSTD_isError(left)) return Failed(ZSTD_getErrorName(left));
      if (absl::Status s = Write(out_.data(), out.pos); !s.ok()) return s;
    } while (mode == ZSTD_e_end ? left != 0 : in.pos < in.size);
    return absl::OkStatus();
  }

  ZSTD_CCtx* z_;
  std::vector<char> out_;
};

}  // namespace

Compression CompressionOfName(absl::string_view path) {
  if (absl::EndsWith(path, ".gz")) return Compression::kGzip;
  if (absl::EndsWith(path, ".zst") || absl::EndsWith(path, ".zstd")) return Compression::kZstd;
  return Compression::kNone;
}

std::string UncompressedName(absl::string_view path) {
  for (absl::string_view extension : {".gz", ".zst", ".zstd"}) {
    if (absl::EndsWith(path, extension) && path.size() > extension.size()) {
      return std::string(path.substr(0, path.size() - extension.size()));
    }
  }
  return std::string(path);
}

absl::StatusOr<std::unique_ptr<ByteSink>> ByteSink::Create(const std::string& path,
                                                           base::Env* env) {
  const std::string tmp = absl::StrCat(path, ".tmp-", getpid());
  absl::StatusOr<std::unique_ptr<base::WritableFile>> file = env->NewWritableFile(tmp);
  if (!file.ok()) {
    absl::string_view why = file.status().message();
    absl::ConsumePrefix(&why, tmp + ": ");
    return absl::UnavailableError(absl::StrCat(path, ": ", why));
  }
  switch (CompressionOfName(path)) {
    case Compression::kGzip:
      return std::unique_ptr<ByteSink>(new GzipSink(path, env, *std::move(file)));
    case Compression::kZstd:
      return std::unique_ptr<ByteSink>(new ZstdSink(path, env, *std::move(file)));
    case Compression::kNone:
      break;
  }
  return std::unique_ptr<ByteSink>(new PlainSink(path, Compression::kNone, env, *std::move(file)));
}

ByteSink::ByteSink(std::string path, Compression compression, base::Env* env,
                   std::unique_ptr<base::WritableFile> file)
    : path_(std::move(path)),
      tmp_(absl::StrCat(path_, ".tmp-", getpid())),
      compression_(compression),
      env_(env),
      file_(std::move(file)) {}

ByteSink::~ByteSink() {
  if (file_ == nullptr) return;
  file_.reset();  // closes
  env_->RemoveFile(tmp_).IgnoreError();
}

absl::Status ByteSink::Write(const void* data, size_t size) {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  if (!failed_.ok()) return failed_;
  pending_.append(static_cast<const char*>(data), size);
  return pending_.size() >= (1 << 20) ? Drain() : absl::OkStatus();
}

absl::Status ByteSink::Drain() {
  if (!failed_.ok()) return failed_;
  failed_ = Named(file_->Append(pending_));
  pending_.clear();
  return failed_;
}

absl::Status ByteSink::Named(const absl::Status& status) const {
  absl::string_view why = status.message();
  if (status.ok() || !absl::ConsumePrefix(&why, tmp_ + ": ")) return status;
  return absl::Status(status.code(), absl::StrCat(path_, ": ", why));
}

absl::Status ByteSink::Failed(absl::string_view why) const {
  return absl::InternalError(
      absl::StrCat(path_, ": ", CompressionName(compression_), " compression failed: ", why));
}

absl::Status ByteSink::Close() {
  if (file_ == nullptr) return absl::FailedPreconditionError(absl::StrCat(path_, ": closed"));
  absl::Status status = failed_;  // a failed append left a hole: the file is not renamed
  if (status.ok()) status = Finish();
  if (status.ok()) status = Drain();
  if (status.ok()) status = Named(file_->Sync());
  absl::Status closed = Named(file_->Close());
  file_.reset();
  status.Update(closed);
  if (status.ok()) status = env_->RenameFile(tmp_, path_);
  if (status.ok()) return status;
  env_->RemoveFile(tmp_).IgnoreError();
  return status;
}

}  // namespace heterps::data
