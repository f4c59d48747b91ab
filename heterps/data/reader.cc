#include "heterps/data/reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/example_file.h"
#include "heterps/data/line_source.h"

namespace heterps::data {

struct BatchReader::Impl {
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

  // Reads a file of the binary form (example_file.h) into batches: `take` says which records are
  // this reader's, `fits` whether a record's keys fit in the batch. False when reading must stop
  // (finished with an error, or the reader is being destroyed).
  template <typename Take, typename Fits>
  bool ReadExamples(std::unique_ptr<ByteSource> bytes, Take& take, Fits& fits, Batch& batch) {
    absl::StatusOr<std::unique_ptr<ExampleSource>> in =
        ExampleSource::Open(std::move(bytes), options.schema);
    if (!in.ok()) {
      Finish(in.status());
      return false;
    }
    while (true) {
      absl::StatusOr<bool> more = (*in)->Next();
      if (!more.ok()) {  // as a text file's read error: the batch begun is not handed over
        Finish(more.status());
        return false;
      }
      if (!*more) return true;
      if (!take()) continue;
      if (!fits((*in)->keys(), absl::StrCat((*in)->path(), ": record ", (*in)->record()))) {
        return false;
      }
      (*in)->AppendTo(&batch);
      if (batch.size == options.batch_size && !Deliver(batch)) return false;
    }
  }

  void Parse() {
    Batch batch;
    int64_t number = 0;   // across files, for the held-out split
    int64_t mine = 0;     // lines of this part, for sharding
    bool failed = false;  // a read error, already finished with
    absl::string_view line;
    Example example;
    absl::StatusOr<LineParser> parser = LineParser::Create(options.schema);
    // Counts a data line (or record) and says whether it is this reader's.
    auto take = [&]() -> bool {
      const bool eval =
          options.eval_every > 0 && number % options.eval_every == options.eval_every - 1;
      ++number;
      if (eval != (options.part == ReaderOptions::Part::kEval)) return false;
      const int64_t at = mine++;
      if (options.cycle > 0) {
        const int64_t position = at % options.cycle;
        return position >= options.cycle_begin && position < options.cycle_end;
      }
      return at % options.world == options.rank;
    };
    // Whether `more` keys fit in the batch (else finished with an error at `where`).
    auto fits = [&](size_t more, const std::string& where) -> bool {
      if (batch.keys.size() + more <= static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
        return true;
      }
      Finish(absl::InvalidArgumentError(absl::StrCat(
          where,
          ": more than 2^31 ids in one batch: lower the batch size or the columns' max_ids")));
      return false;
    };
    for (const std::string& path : options.files) {
      absl::StatusOr<bool> binary = IsExampleFile(path);
      absl::StatusOr<std::unique_ptr<ByteSource>> bytes =
          binary.ok() ? ByteSource::Open(path) : binary.status();
      if (!bytes.ok()) {
        Finish(bytes.status());
        return;
      }
      if (*binary) {
        if (!ReadExamples(*std::move(bytes), take, fits, batch)) return;
        continue;
      }
      LineSource in(*std::move(bytes));
      int64_t line_in_file = 0;
      // The next line into `line`; false at the end of the file or at an error (then finished).
      auto next = [&]() -> bool {
        absl::StatusOr<bool> more = in.Next(&line);
        if (more.ok()) return *more;
        Finish(absl::Status(
            more.status().code(),
            absl::StrCat(more.status().message(), " (after line ", line_in_file, ")")));
        failed = true;
        return false;
      };
      if (options.schema.header) {
        ++line_in_file;
        if (!next()) {
          if (failed) return;
          continue;  // an empty file
        }
        parser = line.find_first_not_of('\r') == std::string::npos
                     ? absl::InvalidArgumentError(
                           "header: the line is empty, and the data section declares a header")
                     : LineParser::Create(options.schema, line);
      }
      if (!parser.ok()) {
        Finish(absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_in_file, ": ", parser.status().message())));
        return;
      }
      while (next()) {
        ++line_in_file;
        if (line.find_first_not_of('\r') == std::string::npos) continue;  // an empty line
        if (!take()) continue;
        if (absl::Status s = parser->Parse(line, &example); !s.ok()) {
          std::string message = absl::StrCat(path, ":", line_in_file, ": ", s.message());
          if (line_in_file == 1 && parser->LooksLikeHeader(line)) {
            absl::StrAppend(&message,
                            " (the line looks like a header: declare `header: true` in the "
                            "model spec's data section)");
          }
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
        if (!fits(example.keys.size(), absl::StrCat(path, ":", line_in_file))) return;
        batch.Add(example);
        if (batch.size == options.batch_size && !Deliver(batch)) return;
      }
      if (failed) return;
    }
    if (batch.size > 0 && !Deliver(batch)) return;
    Finish(absl::OkStatus());
  }
};

BatchReader::BatchReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

BatchReader::~BatchReader() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  if (impl_->parser.joinable()) impl_->parser.join();
}

absl::StatusOr<std::unique_ptr<BatchReader>> BatchReader::Open(const ReaderOptions& options) {
  if (options.files.empty()) return absl::InvalidArgumentError("no data files given");
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", options.rank, " of world ",
                                                   options.world, ": need 0 <= rank < world"));
  }
  if (options.batch_size < 1 || options.queue_batches < 1) {
    return absl::InvalidArgumentError("batch_size and queue_batches must be positive");
  }
  for (const std::string& path : options.files) {
    HETERPS_RETURN_IF_ERROR(ByteSource::Open(path).status());
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  Impl* raw = impl.get();
  impl->parser = std::thread([raw] { raw->Parse(); });
  return std::unique_ptr<BatchReader>(new BatchReader(std::move(impl)));
}

absl::StatusOr<bool> BatchReader::Next(Batch* batch) {
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

ReaderStats BatchReader::stats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->stats;
}

int64_t EvalEvery(double eval_fraction) {
  return eval_fraction > 0 ? std::max<int64_t>(2, std::llround(1 / eval_fraction)) : 0;
}

absl::StatusOr<std::vector<double>> MeasureIdsPerSlot(const std::vector<std::string>& files,
                                                      const Schema& schema, int64_t max_lines) {
  ReaderOptions options;
  options.files = files;
  options.schema = schema;
  options.bad_lines = BadLinePolicy::kSkip;
  options.batch_size = static_cast<int>(std::clamp<int64_t>(max_lines, 1, 4096));
  options.queue_batches = 1;
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<BatchReader> reader, BatchReader::Open(options));
  std::vector<double> ids(schema.slots(), 0.0);
  int64_t samples = 0;
  Batch batch;
  // Bad lines count towards max_lines too, so that data of another layout fails fast.
  while (samples + reader->stats().skipped < max_lines) {
    HETERPS_ASSIGN_OR_RETURN(const bool more, reader->Next(&batch));
    if (!more) break;
    const int64_t n = std::min<int64_t>(batch.size, max_lines - samples);
    for (int64_t r = 0; r < n; ++r) {
      for (int s = 0; s < batch.slots; ++s) {
        ids[s] += static_cast<double>(batch.KeyEnd(r, s) - batch.KeyBegin(r, s));
      }
    }
    samples += n;
  }
  if (samples == 0) {
    const ReaderStats stats = reader->stats();
    return absl::FailedPreconditionError(
        stats.first_bad.empty() ? absl::StrCat(files.empty() ? "" : files[0], ": no data lines")
                                : absl::StrCat("no line of the data's first ", stats.skipped,
                                               " parses; the first: ", stats.first_bad.front()));
  }
  for (double& x : ids) x /= static_cast<double>(samples);
  return ids;
}

absl::StatusOr<int64_t> CountLines(const std::vector<std::string>& files, bool header) {
  int64_t lines = 0;
  std::vector<char> buffer(1 << 20);
  for (const std::string& path : files) {
    HETERPS_ASSIGN_OR_RETURN(const bool binary, IsExampleFile(path));
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> in, ByteSource::Open(path));
    if (binary) {
      HETERPS_ASSIGN_OR_RETURN(const int64_t records, ExampleSource::CountRecords(std::move(in)));
      lines += records;
      continue;
    }
    int64_t in_file = 0;      // lines begun, empty or not
    bool content = false;     // the current line has a byte other than "\r"
    bool first_empty = true;  // the file's first line is empty (a header counts either way)
    bool open = false;        // a line is begun and not ended
    while (true) {
      absl::StatusOr<size_t> read = in->Read(buffer.data(), buffer.size());
      if (!read.ok()) {  // as the reader says it (a truncated file)
        return absl::Status(
            read.status().code(),
            absl::StrCat(read.status().message(), " (after line ", in_file - open, ")"));
      }
      const size_t got = *read;
      if (got == 0) break;
      const char* p = buffer.data();
      const char* const end = p + got;
      while (p < end) {
        if (!open) {
          open = true;
          ++in_file;
        }
        const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
        const char* stop = nl == nullptr ? end : nl;
        // Any byte other than '\r' makes the line a data line.
        for (const char* q = p; q < stop && !content; ++q) content = *q != '\r';
        if (nl == nullptr) break;
        if (in_file == 1) first_empty = !content;
        lines += content;
        content = false;
        open = false;
        p = nl + 1;
      }
    }
    if (open) {
      if (in_file == 1) first_empty = !content;
      lines += content;
    }
    if (header && in_file > 0 && !first_empty) --lines;
  }
  return lines;
}

}  // namespace heterps::data
