#include "heterps/data/reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace heterps::data {

struct CriteoReader::Impl {
  ReaderOptions options;
  std::thread parser;

  mutable absl::Mutex mu;
  // Parsed batches, then (at the end or at an error) a final status: OK for the end.
  std::deque<Batch> ready ABSL_GUARDED_BY(mu);
  std::optional<absl::Status> final ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  ReaderStats stats ABSL_GUARDED_BY(mu);

  // Hands a full batch over; false when the reader is being destroyed.
  bool Deliver(Batch& batch) {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->mu) {
          return impl->stopping ||
                 static_cast<int>(impl->ready.size()) < impl->options.queue_batches;
        },
        this));
    if (stopping) return false;
    stats.examples += batch.size;
    ready.push_back(std::move(batch));
    batch = Batch();
    return true;
  }

  void Finish(absl::Status status) {
    absl::MutexLock lock(&mu);
    final = std::move(status);
  }

  void Parse() {
    Batch batch;
    int64_t number = 0;  // across files, for the held-out split
    int64_t mine = 0;    // lines of this part, for sharding
    std::string line;
    Example example;
    for (const std::string& path : options.files) {
      std::ifstream in(path, std::ios::binary);
      if (!in) {
        Finish(absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno))));
        return;
      }
      int64_t line_in_file = 0;
      while (std::getline(in, line)) {
        ++line_in_file;
        const bool eval =
            options.eval_every > 0 && number % options.eval_every == options.eval_every - 1;
        ++number;
        if (eval != (options.part == ReaderOptions::Part::kEval)) continue;
        if (mine++ % options.world != options.rank) continue;
        if (absl::Status s = ParseLine(line, &example); !s.ok()) {
          std::string message = absl::StrCat(path, ":", line_in_file, ": ", s.message());
          if (options.bad_lines == BadLinePolicy::kStop) {
            if (batch.size > 0 && !Deliver(batch)) return;
            Finish(absl::InvalidArgumentError(message));
            return;
          }
          absl::MutexLock lock(&mu);
          ++stats.skipped;
          if (stats.first_bad.size() < 10) stats.first_bad.push_back(std::move(message));
          continue;
        }
        batch.Add(example);
        if (batch.size == options.batch_size && !Deliver(batch)) return;
      }
      if (in.bad()) {
        Finish(absl::DataLossError(absl::StrCat(path, ": read failed at line ", line_in_file + 1)));
        return;
      }
    }
    if (batch.size > 0 && !Deliver(batch)) return;
    Finish(absl::OkStatus());
  }
};

CriteoReader::CriteoReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CriteoReader::~CriteoReader() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  if (impl_->parser.joinable()) impl_->parser.join();
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(const ReaderOptions& options) {
  if (options.files.empty()) return absl::InvalidArgumentError("no data files given");
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " of world ",
                                                   options.world, ": need 0 <= rank < world"));
  }
  if (options.batch_size < 1 || options.queue_batches < 1) {
    return absl::InvalidArgumentError("batch_size and queue_batches must be positive");
  }
  for (const std::string& path : options.files) {
    std::ifstream in(path);
    if (!in)
      return absl::NotFoundError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  Impl* raw = impl.get();
  impl->parser = std::thread([raw] { raw->Parse(); });
  return std::unique_ptr<CriteoReader>(new CriteoReader(std::move(impl)));
}

absl::StatusOr<bool> CriteoReader::Next(Batch* batch) {
  absl::MutexLock lock(&impl_->mu);
  impl_->mu.Await(absl::Condition(
      +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->mu) {
        return !impl->ready.empty() || impl->final.has_value();
      },
      impl_.get()));
  if (!impl_->ready.empty()) {
    *batch = std::move(impl_->ready.front());
    impl_->ready.pop_front();
    return true;
  }
  if (!impl_->final->ok()) return *impl_->final;
  return false;
}

ReaderStats CriteoReader::stats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->stats;
}

int64_t EvalEvery(double eval_fraction) {
  return eval_fraction > 0 ? std::max<int64_t>(2, std::llround(1 / eval_fraction)) : 0;
}

absl::StatusOr<int64_t> CountLines(const std::vector<std::string>& files) {
  int64_t lines = 0;
  std::vector<char> buffer(1 << 20);
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    while (in.read(buffer.data(), buffer.size()) || in.gcount() > 0) {
      lines += std::count(buffer.data(), buffer.data() + in.gcount(), '\n');
    }
  }
  return lines;
}

}  // namespace heterps::data
