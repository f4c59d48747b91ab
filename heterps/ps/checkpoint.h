// Consistent snapshots of parameter-server tables on disk.
//
// A checkpoint of step S is the directory <root>/ckpt-<S> holding one file per table (every row
// of both tiers for a sparse table: key, update and access counts, value and optimizer state;
// every block for a dense table) and MANIFEST, which names the checkpoint (job, shard, number of
// shards, step) and lists each file with its size and XXH3-64 checksum. It is written under a
// temporary name, flushed, renamed into place, and only then named in <root>/LATEST (itself
// replaced by rename). A failure at any point (a full disk, an
// unwritable directory) returns an error naming the path and leaves the previous checkpoint and
// LATEST as they were. A table that tracks its changes between regions (TrackDeltas) also writes
// its bases (sparse-<id>.bases: each tracked row's key and base; dense-<id>.bases: each block's
// base, where it has one): the tables loaded from it track again from the same bases, so their
// next window across regions is the one the saved tables would have sent.
//
// Loading verifies every file's size and checksum, that the tables match the manifest (kinds,
// dims, blocks), and that the checkpoint is the one asked for (its job, shard, number of shards and
// step; any disagreement is an error), before it changes any table: a truncated, corrupted,
// swapped or relabelled checkpoint is an error and nothing is half-loaded. Names read from LATEST
// and from a MANIFEST are plain names inside their directory; anything else is refused.
// Checkpoints of the previous format (heterps-checkpoint-v1: FNV-1a checksums, no identity) load
// when the identity asked for is that of a one-job, unnamed checkpoint (CheckpointId{}).
//
// The tables must not change while a checkpoint is saved or loaded (the coordinator pauses
// training at a mini-batch boundary). Every file operation goes through `env` (base/env.h), so
// that tests fail any of them on purpose.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heterps/base/env.h"
#include "heterps/ps/dense_table.h"
#include "heterps/ps/sparse_table.h"

namespace heterps::ps {

struct CheckpointTables {
  std::map<int, SparseTable*> sparse;  // by table id
  std::map<int, DenseTable*> dense;
};

// Whose checkpoint it is: written into every MANIFEST and checked on every load.
struct CheckpointId {
  std::string job;  // the job's id; empty for tables outside a job (tests, tools)
  int shard = 0;    // this shard of `num_shards`
  int num_shards = 1;
};

// OK when `job` can name a job's checkpoints: 1 to 64 of [A-Za-z0-9_-].
absl::Status CheckJobId(const std::string& job);

// Writes <root>/ckpt-<step> and points <root>/LATEST at it. Creates <root> if needed, and removes
// the temporary directories of saves that were killed part-way (one process saves into a root).
absl::Status SaveCheckpoint(base::Env* env, const std::string& root, int64_t step,
                            const CheckpointTables& tables, const CheckpointId& id = {});

// Loads the checkpoint LATEST names into `tables` (which must be the same tables: ids, kinds,
// shapes; sparse tables are emptied first) and returns its step. NotFound if there is none;
// FailedPrecondition if it is another job's or shard's; DataLoss if it is damaged or its MANIFEST
// disagrees with its name.
absl::StatusOr<int64_t> LoadLatestCheckpoint(base::Env* env, const std::string& root,
                                             const CheckpointTables& tables,
                                             const CheckpointId& id = {});
// The same for <root>/ckpt-<step>: a job whose shards checkpoint one by one restores the last
// step every shard completed. NotFound if there is none.
absl::StatusOr<int64_t> LoadCheckpoint(base::Env* env, const std::string& root, int64_t step,
                                       const CheckpointTables& tables, const CheckpointId& id = {});

// Step `step` of a job whose tables were on roots.size() shards (the checkpoint root of each,
// shard 0 first), loaded into the tables of shard `shard` of `num_shards` of a job laid out
// anew: the sparse rows whose key belongs to this shard (MixKey(key) % num_shards, as the clients
// place keys), and each dense table of `tables` from the old shard that held it. Every source is
// verified whole before anything loads, and must be shard i of roots.size() of job `job`. A
// checkpoint re-sharded N -> M -> N holds what it held.
absl::StatusOr<int64_t> LoadCheckpointResharded(base::Env* env,
                                                const std::vector<std::string>& roots, int64_t step,
                                                const CheckpointId& id,
                                                const CheckpointTables& tables);

// A digest of every parameter the tables hold: each sparse row's key, value, optimizer state and
// update count, each dense block's values, state and update count. It does not depend on the
// order of the rows, on which tier holds them, or on how keys are spread over shards (the digests
// of a job's shards add up, modulo 2^64, to the digest of the same rows in one table), so that two
// runs can be checked for ending with the same parameters, bit for bit.
absl::StatusOr<uint64_t> DigestTables(const CheckpointTables& tables);

// Removes all but the `keep` checkpoints of the highest steps under `root`.
absl::Status PruneCheckpoints(base::Env* env, const std::string& root, int keep);

}  // namespace heterps::ps
