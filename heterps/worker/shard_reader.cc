#include "heterps/worker/shard_reader.h"

#include "heterps/base/status_macros.h"

namespace heterps::worker {

absl::Status ShardReader::Reopen(int64_t epoch) {
  reader_.reset();
  HETERPS_ASSIGN_OR_RETURN(reader_, data::BatchReader::Open(options_));
  epoch_ = epoch;
  offset_ = 0;
  buffer_.Clear();
  at_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<bool> ShardReader::Next(data::Batch* out) {
  if (at_ >= buffer_.size) {
    HETERPS_ASSIGN_OR_RETURN(bool more, reader_->Next(&buffer_));
    at_ = 0;
    if (!more || buffer_.size == 0) {
      buffer_.Clear();  // the pass is over: nothing left to take
      return false;
    }
  }
  if (out != nullptr) out->Append(buffer_, at_);
  ++at_;
  ++offset_;
  return true;
}

absl::StatusOr<int64_t> ShardReader::Take(int64_t epoch, int64_t offset, int64_t count,
                                          data::Batch* out) {
  if (epoch != epoch_ || offset < offset_) HETERPS_RETURN_IF_ERROR(Reopen(epoch));
  while (offset_ < offset) {
    HETERPS_ASSIGN_OR_RETURN(bool more, Next(nullptr));
    if (!more) return 0;
  }
  out->Clear();
  while (out->size < count) {
    HETERPS_ASSIGN_OR_RETURN(bool more, Next(out));
    if (!more) break;
  }
  return out->size;
}

int64_t ShardReader::skipped() const { return reader_ == nullptr ? 0 : reader_->stats().skipped; }

std::string ShardReader::first_bad() const {
  if (reader_ == nullptr) return "";
  const data::ReaderStats stats = reader_->stats();
  return stats.first_bad.empty() ? "" : stats.first_bad.front();
}

}  // namespace heterps::worker
