// A parameter-server checkpoint whose MANIFEST (ps/checkpoint.h) is the input: a real checkpoint
// of a sparse and a dense table is written once, then each input replaces its MANIFEST and is
// loaded into the same tables. Whatever the MANIFEST says (names outside the directory, sizes
// and counts that disagree with the files, another job's or shard's name), the load refuses it
// with an error or loads what the files hold; it never reads outside the checkpoint, aborts or
// allocates from a forged size. An empty input stands for the checkpoint's own MANIFEST.

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "fuzz/fuzz_target.h"
#include "heterps/base/env.h"
#include "heterps/base/file.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/dense_table.h"
#include "heterps/ps/sparse_table.h"

namespace {

using heterps::ps::CheckpointId;
using heterps::ps::CheckpointTables;

struct Harness {
  std::string root;
  std::unique_ptr<heterps::ps::SparseTable> sparse;
  std::unique_ptr<heterps::ps::DenseTable> dense;
  CheckpointTables tables;
  CheckpointId id{"fuzzjob", 0, 1};
  std::string manifest;  // as written
};

[[noreturn]] void Die(const absl::Status& status) {
  std::fprintf(stderr, "fuzz_checkpoint: %s\n", std::string(status.message()).c_str());
  std::exit(2);
}

Harness* Start() {
  auto* h = new Harness;
  h->root = heterps::fuzz::ScratchPath("checkpoint");
  heterps::ps::SparseTableOptions sparse;
  sparse.dim = 4;
  auto s = heterps::ps::SparseTable::Create(sparse, nullptr);
  if (!s.ok()) Die(s.status());
  h->sparse = std::move(*s);
  std::vector<uint64_t> keys = {1, 2, 3, 1000, 1u << 31};
  std::vector<float> values(keys.size() * 4);
  if (absl::Status pulled = h->sparse->Pull(keys, absl::MakeSpan(values)); !pulled.ok()) {
    Die(pulled);
  }
  heterps::ps::DenseTableOptions dense;
  dense.block_sizes = {6, 2};
  auto d = heterps::ps::DenseTable::Create(dense);
  if (!d.ok()) Die(d.status());
  h->dense = std::move(*d);
  h->tables.sparse[0] = h->sparse.get();
  h->tables.dense[1] = h->dense.get();
  if (absl::Status saved =
          heterps::ps::SaveCheckpoint(heterps::base::DefaultEnv(), h->root, 5, h->tables, h->id);
      !saved.ok()) {
    Die(saved);
  }
  auto manifest = heterps::base::ReadTextFile(h->root + "/ckpt-5/MANIFEST");
  if (!manifest.ok()) Die(manifest.status());
  h->manifest = *manifest;
  return h;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* h = Start();
  const std::string manifest = h->root + "/ckpt-5/MANIFEST";
  const absl::string_view text = size == 0 ? h->manifest : heterps::fuzz::Text(data, size);
  if (!heterps::base::WriteFileAtomically(manifest, text).ok()) return 0;
  (void)heterps::ps::LoadLatestCheckpoint(heterps::base::DefaultEnv(), h->root, h->tables, h->id);
  return 0;
}
