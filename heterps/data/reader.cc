#include "heterps/data/reader.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/example_file.h"
#include "heterps/data/line_source.h"

namespace heterps::data {

namespace {

constexpr size_t kMaxIds = static_cast<size_t>(std::numeric_limits<int32_t>::max());

std::string TooManyIds(const std::string& where) {
  return absl::StrCat(where,
                      ": more than 2^31 ids in one batch: lower the batch size or the columns' "
                      "max_ids");
}

// The message of a bad line: where, what, and a hint where line 1 looks like a header.
std::string BadLine(const std::string& path, int64_t number, absl::string_view line,
                    const LineParser& parser, const absl::Status& status) {
  std::string message = absl::StrCat(path, ":", number, ": ", status.message());
  if (number == 1 && parser.LooksLikeHeader(line)) {
    absl::StrAppend(&message,
                    " (the line looks like a header: declare `header: true` in the model spec's "
                    "data section)");
  }
  return message;
}

// Taken lines of one file, parsed by a parser thread (or records of a binary file, decoded as
// they were read), or the end of the data.
struct Chunk {
  std::string path;
  std::shared_ptr<const LineParser> parser;  // null for records
  std::string text;                          // the lines, one after the other
  std::vector<size_t> ends;                  // where each ends in `text`
  std::vector<int64_t> numbers;              // each line's number in its file (a record's)
  bool records = false;                      // decoded records, no lines
  bool end = false;                          // the end of the data: `status` says how
  absl::Status status;
  // What parsing made of the lines: their samples, in batches of fewer than 2^31 keys (one but
  // where that many ids come together).
  std::vector<Batch> batches = std::vector<Batch>(1);
  std::vector<int64_t> rows;  // per sample, across the batches: its line's (record's) number
  // Skipped lines (kSkip), in order: the number of samples before each, and its message.
  std::vector<std::pair<int64_t, std::string>> bad;
  std::optional<std::string> stop;  // kStop: the first bad line's message, after the samples
  bool parsed = false;

  std::string Where(size_t row) const {
    return records ? absl::StrCat(path, ": record ", rows[row])
                   : absl::StrCat(path, ":", rows[row]);
  }
  // The batch a sample with `keys` keys goes to.
  Batch& For(size_t keys) {
    if (batches.back().keys.size() + keys > kMaxIds && batches.back().size > 0) {
      batches.emplace_back();
    }
    return batches.back();
  }
};

}  // namespace

struct BatchReader::Impl {
  ReaderOptions options;
  std::thread parser;  // parses (one thread), or puts the parser threads' chunks in order

  mutable absl::Mutex mu;
  // Parsed batches, then (at the end or at an error) a final status: OK for the end.
  std::deque<Batch> ready ABSL_GUARDED_BY(mu);
  std::optional<absl::Status> final ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  ReaderStats stats ABSL_GUARDED_BY(mu);

  // With parser_threads > 1: the chunks in flight, in order, and those not yet parsed.
  absl::Mutex pool_mu;
  std::deque<std::shared_ptr<Chunk>> flight ABSL_GUARDED_BY(pool_mu);
  std::deque<std::shared_ptr<Chunk>> todo ABSL_GUARDED_BY(pool_mu);
  bool pool_done ABSL_GUARDED_BY(pool_mu) = false;
  // Set once the batches are over (the end, an error, the destructor): the walk stops at its next
  // line rather than at its next chunk.
  std::atomic<bool> walk_stopped{false};

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

  void Skipped(std::string message) {
    absl::MutexLock lock(&mu);
    ++stats.skipped;
    if (stats.first_bad.size() < 10) stats.first_bad.push_back(std::move(message));
  }

  // Walks the files: hands `sink` every data line this reader takes (sharding and the held-out
  // split applied), with its file, number and parser, every record of a binary file it takes,
  // and then the end of the data (End) or the error that stops reading (Error). Returns when the
  // sink says to stop (false from one of its calls) or the data ends.
  template <typename Sink>
  void Walk(Sink& sink) {
    int64_t number = 0;  // across files, for the held-out split
    int64_t mine = 0;    // lines of this part, for sharding
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
    // The parser of the file's lines (null where it cannot be made: `parser_error` says why).
    std::shared_ptr<const LineParser> parser;
    absl::Status parser_error;
    auto make_parser = [&](absl::StatusOr<LineParser> made) {
      parser = made.ok() ? std::make_shared<const LineParser>(*std::move(made)) : nullptr;
      parser_error = made.status();
    };
    make_parser(LineParser::Create(options.schema));
    for (const std::string& path : options.files) {
      absl::StatusOr<bool> binary = IsExampleFile(path, options.env);
      absl::StatusOr<std::unique_ptr<ByteSource>> bytes =
          binary.ok() ? ByteSource::Open(path, options.env) : binary.status();
      if (!bytes.ok()) return sink.Error(bytes.status());
      if (*binary) {
        absl::StatusOr<std::unique_ptr<ExampleSource>> in =
            ExampleSource::Open(*std::move(bytes), options.schema);
        if (!in.ok()) return sink.Error(in.status());
        while (true) {
          absl::StatusOr<bool> more = (*in)->Next();
          if (!more.ok()) return sink.Error(more.status());
          if (!*more) break;
          if (take() && !sink.Record(**in)) return;
        }
        if (!sink.FileEnd()) return;
        continue;
      }
      LineSource in(*std::move(bytes));
      int64_t line_in_file = 0;
      absl::string_view line;
      absl::Status error;
      // The next line into `line`; false at the end of the file or at an error (in `error`).
      auto next = [&]() -> bool {
        absl::StatusOr<bool> more = in.Next(&line);
        if (more.ok()) return *more;
        error =
            absl::Status(more.status().code(),
                         absl::StrCat(more.status().message(), " (after line ", line_in_file, ")"));
        return false;
      };
      if (options.schema.header) {
        ++line_in_file;
        if (!next()) {
          if (!error.ok()) return sink.Error(error);
          continue;  // an empty file
        }
        make_parser(line.find_first_not_of('\r') == std::string::npos
                        ? absl::InvalidArgumentError(
                              "header: the line is empty, and the data section declares a header")
                        : LineParser::Create(options.schema, line));
      }
      if (parser == nullptr) {
        return sink.Error(absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_in_file, ": ", parser_error.message())));
      }
      while (next()) {
        ++line_in_file;
        if (line.find_first_not_of('\r') == std::string::npos) continue;  // an empty line
        if (take() && !sink.Text(path, line_in_file, line, parser)) return;
      }
      if (!error.ok()) return sink.Error(error);
      if (!sink.FileEnd()) return;
    }
    sink.End();
  }

  // One thread: parses each line as it is read.
  struct Direct {
    explicit Direct(Impl& impl) : impl(impl) {}
    Impl& impl;
    Batch batch;
    Example example;

    bool Fits(size_t more, const std::string& where) {
      if (batch.keys.size() + more <= kMaxIds) return true;
      impl.Finish(absl::InvalidArgumentError(TooManyIds(where)));
      return false;
    }
    bool Full() { return batch.size < impl.options.batch_size || impl.Deliver(batch); }
    bool Text(const std::string& path, int64_t number, absl::string_view line,
              const std::shared_ptr<const LineParser>& parser) {
      if (absl::Status s = parser->Parse(line, &example); !s.ok()) {
        std::string message = BadLine(path, number, line, *parser, s);
        if (impl.options.bad_lines == BadLinePolicy::kStop) {
          if (batch.size > 0 && !impl.Deliver(batch)) return false;
          impl.Finish(absl::InvalidArgumentError(message));
          return false;
        }
        impl.Skipped(std::move(message));
        return true;
      }
      if (!Fits(example.keys.size(), absl::StrCat(path, ":", number))) return false;
      batch.Add(example);
      return Full();
    }
    bool Record(const ExampleSource& in) {
      if (!Fits(in.keys(), absl::StrCat(in.path(), ": record ", in.record()))) return false;
      in.AppendTo(&batch);
      return Full();
    }
    bool FileEnd() { return true; }
    // As a text file's read error: the batch begun is not handed over.
    void Error(absl::Status status) { impl.Finish(std::move(status)); }
    void End() {
      if (batch.size > 0 && !impl.Deliver(batch)) return;
      impl.Finish(absl::OkStatus());
    }
  };

  // Several threads: the lines go in chunks to the parser threads (Parse), and the chunks come
  // back in order (Assemble).
  struct Chunked {
    explicit Chunked(Impl& impl) : impl(impl) {}
    Impl& impl;
    std::shared_ptr<Chunk> chunk;  // being filled

    size_t ChunkLines() const { return static_cast<size_t>(impl.options.batch_size); }
    bool Hand() {
      if (chunk == nullptr) return true;
      if (chunk->records || chunk->end) chunk->parsed = true;
      absl::MutexLock lock(&impl.pool_mu);
      impl.pool_mu.Await(absl::Condition(
          +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->pool_mu) {
            return impl->pool_done ||
                   impl->flight.size() < 2 * static_cast<size_t>(impl->options.parser_threads) + 2;
          },
          &impl));
      if (impl.pool_done) return false;
      impl.flight.push_back(chunk);
      if (!chunk->parsed) impl.todo.push_back(chunk);
      chunk.reset();
      return true;
    }
    bool Text(const std::string& path, int64_t number, absl::string_view line,
              const std::shared_ptr<const LineParser>& parser) {
      if (impl.walk_stopped.load(std::memory_order_relaxed)) return false;
      if (chunk == nullptr) {
        chunk = std::make_shared<Chunk>();
        chunk->path = path;
        chunk->parser = parser;
      }
      chunk->text.append(line.data(), line.size());
      chunk->ends.push_back(chunk->text.size());
      chunk->numbers.push_back(number);
      return chunk->ends.size() < ChunkLines() || Hand();
    }
    bool Record(const ExampleSource& in) {
      if (impl.walk_stopped.load(std::memory_order_relaxed)) return false;
      if (chunk == nullptr) {
        chunk = std::make_shared<Chunk>();
        chunk->path = in.path();
        chunk->records = true;
      }
      in.AppendTo(&chunk->For(in.keys()));
      chunk->rows.push_back(in.record());
      return chunk->rows.size() < ChunkLines() || Hand();
    }
    bool FileEnd() { return Hand(); }
    void Error(absl::Status status) {
      if (!Hand()) return;
      chunk = std::make_shared<Chunk>();
      chunk->end = true;
      chunk->status = std::move(status);
      Hand();
    }
    void End() { Error(absl::OkStatus()); }
  };

  // A parser thread: parses chunks until the pool is done.
  void ParseChunks() {
    Example example;
    while (true) {
      std::shared_ptr<Chunk> chunk;
      {
        absl::MutexLock lock(&pool_mu);
        pool_mu.Await(absl::Condition(
            +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->pool_mu) {
              return impl->pool_done || !impl->todo.empty();
            },
            this));
        if (pool_done) return;
        chunk = std::move(todo.front());
        todo.pop_front();
      }
      size_t begin = 0;
      for (size_t i = 0; i < chunk->ends.size(); ++i) {
        const absl::string_view line(chunk->text.data() + begin, chunk->ends[i] - begin);
        begin = chunk->ends[i];
        if (absl::Status s = chunk->parser->Parse(line, &example); !s.ok()) {
          std::string message = BadLine(chunk->path, chunk->numbers[i], line, *chunk->parser, s);
          if (options.bad_lines == BadLinePolicy::kStop) {
            chunk->stop = std::move(message);
            break;
          }
          chunk->bad.emplace_back(static_cast<int64_t>(chunk->rows.size()), std::move(message));
          continue;
        }
        chunk->For(example.keys.size()).Add(example);
        chunk->rows.push_back(chunk->numbers[i]);
      }
      absl::MutexLock lock(&pool_mu);
      chunk->parsed = true;
    }
  }

  // Hands the parsed chunks' samples over in order, in batches; false when reading must stop.
  bool Assemble(Chunk& chunk, Batch& batch) {
    // The skipped lines before sample `row`, counted as one thread counts them.
    size_t next_bad = 0;
    auto skipped_before = [&](int64_t row) {
      for (; next_bad < chunk.bad.size() && chunk.bad[next_bad].first <= row; ++next_bad) {
        Skipped(std::move(chunk.bad[next_bad].second));
      }
    };
    if (chunk.end) {
      if (!chunk.status.ok()) {
        Finish(chunk.status);
        return false;
      }
      if (batch.size > 0 && !Deliver(batch)) return false;
      Finish(absl::OkStatus());
      return false;
    }
    int64_t row = 0;  // across the chunk's batches
    for (Batch& from : chunk.batches) {
      if (batch.size == 0 && from.size == options.batch_size && chunk.batches.size() == 1) {
        skipped_before(row + from.size - 1);
        batch = std::move(from);  // whole: no copy
        row += batch.size;
        if (!Deliver(batch)) return false;
        continue;
      }
      for (int64_t r = 0; r < from.size; ++r, ++row) {
        skipped_before(row);
        const size_t keys =
            from.slots > 0 ? from.KeyEnd(r, from.slots - 1) - from.KeyBegin(r, 0) : 0;
        if (batch.keys.size() + keys > kMaxIds) {
          Finish(absl::InvalidArgumentError(TooManyIds(chunk.Where(row))));
          return false;
        }
        batch.Append(from, r);
        if (batch.size == options.batch_size && !Deliver(batch)) return false;
      }
    }
    skipped_before(row);
    if (chunk.stop.has_value()) {
      if (batch.size > 0 && !Deliver(batch)) return false;
      Finish(absl::InvalidArgumentError(*chunk.stop));
      return false;
    }
    return true;
  }

  void Parse() {
    if (options.parser_threads <= 1) {
      Direct direct(*this);
      Walk(direct);
      return;
    }
    std::thread walker([this] {
      Chunked chunked(*this);
      Walk(chunked);
    });
    std::vector<std::thread> parsers;
    for (int i = 0; i < options.parser_threads; ++i)
      parsers.emplace_back([this] { ParseChunks(); });
    Batch batch;
    while (true) {
      std::shared_ptr<Chunk> chunk;
      {
        // The next chunk in order, once parsed; pool_done: the reader is being destroyed.
        absl::MutexLock lock(&pool_mu);
        pool_mu.Await(absl::Condition(
            +[](Impl* impl) ABSL_EXCLUSIVE_LOCKS_REQUIRED(impl->pool_mu) {
              return impl->pool_done || (!impl->flight.empty() && impl->flight.front()->parsed);
            },
            this));
        if (pool_done) break;
        chunk = std::move(flight.front());
        flight.pop_front();
      }
      if (!Assemble(*chunk, batch)) break;
    }
    walk_stopped = true;
    {
      absl::MutexLock lock(&pool_mu);
      pool_done = true;
    }
    walker.join();
    for (std::thread& t : parsers) t.join();
  }
};

BatchReader::BatchReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

BatchReader::~BatchReader() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->stopping = true;
  }
  impl_->walk_stopped = true;
  {
    absl::MutexLock lock(&impl_->pool_mu);
    impl_->pool_done = true;
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
  if (options.parser_threads < 1 || options.parser_threads > kMaxParserThreads) {
    return absl::InvalidArgumentError(
        absl::StrCat("parser threads ", options.parser_threads, " outside 1..", kMaxParserThreads));
  }
  for (const std::string& path : options.files) {
    HETERPS_RETURN_IF_ERROR(ByteSource::Open(path, options.env).status());
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

absl::StatusOr<int64_t> CountLines(const std::vector<std::string>& files, bool header,
                                   base::Env* env) {
  int64_t lines = 0;
  std::vector<char> buffer(1 << 20);
  for (const std::string& path : files) {
    HETERPS_ASSIGN_OR_RETURN(const bool binary, IsExampleFile(path, env));
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ByteSource> in, ByteSource::Open(path, env));
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
