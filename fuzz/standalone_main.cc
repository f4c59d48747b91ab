// The driver a fuzz target runs with when it is not built with libFuzzer: every file of the
// directories (or files) on the command line, then `--mutations N` (default 2000) deterministic
// mutations of each (bit flips, byte changes, truncations, insertions of interesting bytes,
// duplicated spans, splices with another seed). Prints what it ran; a crash is the target's own
// (the process dies with the sanitizer's report), and the input that caused it is in
// <target>.crash beside the working directory's files, to be added to the corpus.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"

namespace {

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs one input, keeping a copy where a crash would leave it.
void Run(const std::string& input, const std::string& crash_path) {
  {
    std::ofstream out(crash_path, std::ios::binary | std::ios::trunc);
    out << input;
  }
  // A copy of exactly `size` bytes, so that the sanitizers see reads past the end.
  std::vector<uint8_t> copy(input.begin(), input.end());
  LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
}

std::string Mutate(const std::string& seed, const std::vector<std::string>& seeds,
                   std::mt19937_64& rng) {
  static const char* kInteresting[] = {"\xff",
                                       "\x00",
                                       "\r",
                                       "\n",
                                       "\t",
                                       ",",
                                       ":",
                                       "-1",
                                       "1e309",
                                       "nan",
                                       "\"",
                                       "{",
                                       "[",
                                       "]",
                                       "}",
                                       "0x",
                                       "99999999999999999999",
                                       "\xc3",
                                       "- "};
  std::string s = seed;
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 6) {
      case 0:  // flip a bit
        if (!s.empty()) s[at % s.size()] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:  // a random byte
        if (!s.empty()) s[at % s.size()] = static_cast<char>(rng());
        break;
      case 2:  // truncate
        s.resize(at);
        break;
      case 3: {  // insert an interesting token
        const char* token = kInteresting[rng() % std::size(kInteresting)];
        s.insert(at, std::string(token, std::max<size_t>(1, std::strlen(token))));
        break;
      }
      case 4: {  // duplicate a span
        if (s.empty()) break;
        const size_t from = rng() % s.size(), n = 1 + rng() % std::min<size_t>(64, s.size() - from);
        s.insert(at, s.substr(from, n));
        break;
      }
      case 5: {  // splice with another seed
        const std::string& other = seeds[rng() % seeds.size()];
        s = s.substr(0, at) + other.substr(other.empty() ? 0 : rng() % other.size());
        break;
      }
    }
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  long mutations = 2000;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mutations") == 0 && i + 1 < argc) {
      mutations = std::atol(argv[++i]);
      continue;
    }
    const std::filesystem::path path(argv[i]);
    if (std::filesystem::is_directory(path)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(path)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
      std::sort(files.begin(), files.end());  // the same order, so the same mutations
      for (const auto& f : files) seeds.push_back(ReadAll(f));
    } else if (std::filesystem::is_regular_file(path)) {
      seeds.push_back(ReadAll(path));
    } else {
      std::fprintf(stderr, "%s: %s: no such file or directory\n", argv[0], argv[i]);
      return 2;
    }
  }
  if (seeds.empty()) seeds.push_back("");
  const std::string crash = std::filesystem::path(argv[0]).filename().string() + ".crash";
  std::mt19937_64 rng(20261123);
  for (const std::string& seed : seeds) Run(seed, crash);
  for (long m = 0; m < mutations; ++m) {
    Run(Mutate(seeds[m % seeds.size()], seeds, rng), crash);
  }
  std::remove(crash.c_str());
  std::printf("%s: %zu seeds and %ld mutations, no crash\n", argv[0], seeds.size(), mutations);
  return 0;
}
