// Streams data files of a declared layout (schema.h; Criteo's by default) as batches, parsing on a
// thread of its own ahead of the consumer.
//
//   ReaderOptions options;
//   options.files = {"day_0.tsv"};
//   options.rank = 1; options.world = 4;     // this replica's quarter of the lines
//   HETERPS_ASSIGN_OR_RETURN(auto reader, BatchReader::Open(options));
//   Batch batch;
//   while (true) {
//     HETERPS_ASSIGN_OR_RETURN(bool more, reader->Next(&batch));
//     if (!more) break;
//     ...
//   }
//
// Files of the binary form that `heterps convert` writes (example_file.h) are told by their first
// bytes and read as the lines they were converted from, record n being data line n (where the
// conversion skipped no bad line): the same sharding, held-out split and batches, with nothing to
// parse. A list may mix both forms.
//
// Sharding: data lines are numbered from 0 across the files in order; rank r of w parses the lines
// whose number is r modulo w, so the ranks read disjoint parts that together cover everything,
// and every batch but each rank's last is full (or, with a cycle, the lines at given positions of
// every cycle of lines). Files are read sequentially, never held whole.
// Data lines are the lines but the empty ones (nothing, or a lone "\r") and, when the schema has a
// header, each file's first line; a last line without a newline counts.
//
// Held-out data: with eval_every = k > 0, line n is an evaluation line when n % k == k - 1. The
// kTrain part reads the others, the kEval part only those (both then sharded by rank, counting
// only their own lines), so a training run and its evaluation never share a line.
//
// Bad lines: under kStop, Next returns InvalidArgument "<file>:<line>: <field>: <problem>" (the
// line as numbered in its file, from 1) after the batches before it; under kSkip the line is
// counted in stats() (with the first 10 messages) and reading goes on. When the schema declares no
// header and a file's first line fails as one would (its label is not a number), the message says
// so.
//
// Threads: one reading (and parsing, with parser_threads 1), or one reading, parser_threads
// parsing and one putting the batches in order; all stopped and joined by the destructor.
//
// Thread safety: Next and stats may be called from one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/base/env.h"
#include "heterps/data/schema.h"

namespace heterps::data {

enum class BadLinePolicy { kStop, kSkip };

inline constexpr int kMaxParserThreads = 64;  // ReaderOptions::parser_threads

struct ReaderOptions {
  std::vector<std::string> files;
  Schema schema = CriteoSchema();
  int rank = 0;
  int world = 1;
  // With cycle > 0, rank and world are not used: the part's line n is this reader's when n modulo
  // `cycle` lies in [cycle_begin, cycle_end) (a replica's consecutive share of every step).
  int64_t cycle = 0;
  int64_t cycle_begin = 0, cycle_end = 0;
  int batch_size = 2048;
  BadLinePolicy bad_lines = BadLinePolicy::kStop;
  int queue_batches = 4;   // parsed batches kept ready ahead of Next
  // Threads that parse text lines. 1: the reader's own thread parses each line as it reads it.
  // More: it hands the lines it takes in chunks of batch_size to that many parser threads, and a
  // thread puts their samples back in order: the same batches, statistics and errors, at up to
  // that many times the rate (files of the binary form need none). Memory: up to 2 x threads + 2
  // chunks (their text and samples) ahead of the queue_batches ready batches.
  int parser_threads = 1;  // 1 .. kMaxParserThreads
  int64_t eval_every = 0;  // 0: no held-out lines
  enum class Part { kTrain, kEval } part = Part::kTrain;
  base::Env* env = base::DefaultEnv();  // the files are read through it
};

struct ReaderStats {
  int64_t examples = 0;                // lines of this rank parsed into batches
  int64_t skipped = 0;                 // bad lines of this rank skipped (kSkip)
  std::vector<std::string> first_bad;  // the first 10 of them, as "<file>:<line>: ..."
};

// Every how many lines one is held out for a share `eval_fraction` in [0, 0.5]: round(1 / F), at
// least 2; 0 (none held out) when the share is 0.
int64_t EvalEvery(double eval_fraction);

// Data lines in the files (see Sharding; a fast pass that parses nothing), for progress, ETA and
// step counts: with `header`, each file's first line is not one; a file of the binary form counts
// its records. NotFound naming the first file
// that cannot be opened; a file that cannot be read to its end (DataLoss: truncated) is named
// with the last whole line read, "(after line N)", as the reader names it.
absl::StatusOr<int64_t> CountLines(const std::vector<std::string>& files, bool header = false,
                                   base::Env* env = base::DefaultEnv());

// Ids per sample of every slot, averaged over the first `max_lines` (>= 1) data lines of `files`
// read with `schema` (bad lines skipped): what the slots really hold, for the cost model. The
// reader's errors (a file that cannot be opened), or FailedPrecondition when no line parses.
absl::StatusOr<std::vector<double>> MeasureIdsPerSlot(const std::vector<std::string>& files,
                                                      const Schema& schema, int64_t max_lines);

class BatchReader {
 public:
  // Checks the options and that every file opens (NotFound naming the first that does not),
  // then starts parsing.
  static absl::StatusOr<std::unique_ptr<BatchReader>> Open(const ReaderOptions& options);
  ~BatchReader();  // stops the parsing thread

  // The next batch into `batch` (true), or false at the end of the data. Errors: a bad line under
  // kStop, a read error naming the file.
  absl::StatusOr<bool> Next(Batch* batch);

  ReaderStats stats() const;

 private:
  struct Impl;
  explicit BatchReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::data
