// The RL scheduler's policy file (sched/rl/lstm_policy.h, LstmPolicy::Load): damaged, truncated or
// forged files are refused, never read past their end or allocated from a forged size. The input
// is a patch over a valid file of a fixed shape (4 features, 3 types, 8 hidden): its length is the
// file's length (0: the whole file) and its bytes are XORed into it, so that a seed of zeros is
// the valid file and every mutation a damaged one.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_target.h"
#include "heterps/base/file.h"
#include "heterps/sched/rl/lstm_policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const heterps::sched::rl::PolicyShape kShape{4, 3, 8};
  static const std::string* path = new std::string(heterps::fuzz::ScratchPath("policy"));
  static const std::string* valid = [] {
    const heterps::sched::rl::LstmPolicy policy(kShape, 7);
    auto saved = policy.Save(*path);
    auto text = heterps::base::ReadTextFile(*path);
    if (!saved.ok() || !text.ok()) {
      std::fprintf(stderr, "fuzz_policy: cannot write %s\n", path->c_str());
      std::exit(2);
    }
    return new std::string(*text);
  }();
  std::string file = *valid;
  if (size > 0) file.resize(size, '\0');
  for (size_t i = 0; i < size; ++i) file[i] = static_cast<char>(file[i] ^ data[i]);
  if (!heterps::base::WriteFileAtomically(*path, file).ok()) return 0;
  (void)heterps::sched::rl::LstmPolicy::Load(*path, kShape);
  return 0;
}
