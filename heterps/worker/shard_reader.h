// A replica's lines of the training (or held-out) data, taken by position: pass `epoch`, samples
// from `offset` on, so that a replica restarted from a checkpoint reads on from where the
// checkpoint's step left off, and never skips or repeats a line.
//
//   ShardReader reader(options);                     // options.rank = replica, .world = replicas
//   HETERPS_ASSIGN_OR_RETURN(int64_t got, reader.Take(epoch, offset, 512, &batch));
//
// The replica's lines are those data::BatchReader gives it (its options: rank `rank` of `world`,
// line i of the part to replica i mod world; or, for a distributed job's training lines, a cycle:
// the replica's consecutive blocks of every step, JobSpec::Reader). Taking the next samples in
// order streams; a position behind the current one, or in another pass, reopens the files and skips
// forward.
//
// Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "heterps/data/reader.h"

namespace heterps::worker {

class ShardReader {
 public:
  explicit ShardReader(const data::ReaderOptions& options) : options_(options) {}

  // Up to `count` samples from position (epoch, offset) into `out` (replacing its contents); the
  // number taken, fewer only at the end of the pass. Errors: the reader's (a bad line under
  // kStop, a file that cannot be read).
  absl::StatusOr<int64_t> Take(int64_t epoch, int64_t offset, int64_t count, data::Batch* out);

  // Bad lines skipped in the current pass, and the first of them ("" if none).
  int64_t skipped() const;
  std::string first_bad() const;

 private:
  absl::Status Reopen(int64_t epoch);
  // The next sample of the current pass into `out`; false at its end.
  absl::StatusOr<bool> Next(data::Batch* out);

  data::ReaderOptions options_;
  std::unique_ptr<data::BatchReader> reader_;
  int64_t epoch_ = -1, offset_ = 0;  // the position of the next sample
  data::Batch buffer_;               // read, not yet taken: samples at_ .. size - 1
  int at_ = 0;
};

}  // namespace heterps::worker
