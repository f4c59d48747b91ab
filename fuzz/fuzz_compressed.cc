// The training data's byte sources (data/line_source.h) on any file: plain, gzip or zstd by its
// first bytes, read to the end line by line as the reader does. A damaged or truncated stream is
// an error naming the file, never a crash or an endless loop.

#include <filesystem>
#include <string>

#include "fuzz/fuzz_target.h"
#include "heterps/base/file.h"
#include "heterps/data/line_source.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string* path = new std::string(heterps::fuzz::ScratchPath("compressed"));
  if (!heterps::base::WriteFileAtomically(*path, heterps::fuzz::Text(data, size)).ok()) return 0;
  auto source = heterps::data::ByteSource::Open(*path);
  if (!source.ok()) return 0;
  heterps::data::LineSource lines(std::move(*source), 256);
  for (;;) {
    absl::string_view line;
    absl::StatusOr<bool> more = lines.Next(&line);
    if (!more.ok() || !*more) break;
  }
  return 0;
}
