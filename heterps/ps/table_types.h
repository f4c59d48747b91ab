// What the parameter servers' clients and the servers share: the options a table is created
// with and the shapes whole rows and dense ranges travel in (ps_client.h's calls), apart from the
// tables themselves (sparse_table.h, dense_table.h), so that a client needs no server header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "heterps/ps/optimizer.h"

namespace heterps::ps {

struct SparseTableOptions {
  int dim = 16;                     // floats per row value
  OptimizerOptions optimizer;       // applied on push
  uint64_t seed = 0;                // initializer seed
  float init_range = 0.01f;         // initial values uniform in [-init_range, init_range]
  int lock_shards = 16;             // lock shards; each holds at most 2^24 - 1 resident rows
  int64_t memory_budget_bytes = 0;  // 0: unlimited; else resident rows are kept within it
};

// Whole rows of several keys, as a client that applies the optimizer itself moves them (the GPU
// embedding tier): row i's value at values[i * dim], its state at state[i * StateFloats * dim].
struct RowBatch {
  std::vector<float> values;
  std::vector<float> state;
  std::vector<int64_t> steps;  // updates applied
};

struct DenseTableOptions {
  std::vector<int64_t> block_sizes;  // floats per block, each > 0
  OptimizerOptions optimizer;        // applied on push
  uint64_t seed = 0;                 // initializer seed: block b, index i start at a value that
  float init_range = 0.01f;          //   depends only on (seed, b, i), in [-init_range, init_range]
  std::vector<float> init_ranges;    // per block, overriding init_range (e.g. Glorot ranges)
};

// A range of a dense block with its optimizer state, for a client that applies the optimizer
// itself (a synchronous stage's replicas; docs/runtime.md, "Dense parameters on the replicas").
struct DenseSlice {
  std::vector<float> value;  // the block's floats [offset, offset + count)
  // Each state array's same range, one after the other: StateFloats(kind) * count floats (Adam:
  // m's range, then v's).
  std::vector<float> state;
  int64_t steps = 0;  // the block's update count
};

// InvalidArgument unless `floats` is `keys` rows of `dim` floats; `op` ("pull",
// "push") names the call in the message. (Defined in sparse_table.cc.)
absl::Status CheckRowFloats(absl::string_view op, size_t floats, size_t keys, int dim);

// The contributions a server holds for the next commit, as they came: per (table, part) the rows
// (keys may repeat where a part sent a table twice), per (table, block, part) the dense sum.
struct PendingParts {
  struct Sparse {
    int table = 0, part = 0;
    std::vector<uint64_t> keys;
    std::vector<float> grads;
  };
  struct Dense {
    int table = 0, block = 0, part = 0;
    std::vector<double> grads;
  };
  std::vector<Sparse> sparse;  // by table, then part
  std::vector<Dense> dense;    // by table, block, then part
};

}  // namespace heterps::ps
