// Who is who in a distributed job: the roles a plan needs and the rank of each, so that every
// process, whether started by `heterps train` on this host or by an external launcher (mpirun,
// Slurm) from its rank alone, agrees on its part (docs/runtime.md).
//
//   rank 0                      the coordinator
//   ranks 1 .. P                parameter-server shards 0 .. P-1
//   then, stage by stage        the replicas of each stage (units of the plan's stage)
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heterps/worker/job.h"

namespace heterps::launcher {

struct RoleSlot {
  enum class Kind { kCoordinator, kPs, kWorker };
  Kind kind = Kind::kCoordinator;
  int shard = 0;               // kPs
  int stage = 0, replica = 0;  // kWorker
};

struct JobLayout {
  int ps_shards = 0;
  std::vector<int> replicas;    // per stage
  std::vector<RoleSlot> ranks;  // ranks[r]: what rank r is

  int world() const { return static_cast<int>(ranks.size()); }
  // The rank of stage `stage`'s replica `replica`.
  int WorkerRank(int stage, int replica) const;
  // "ps shard 1", "stage 0 replica 2", "coordinator".
  std::string Name(int rank) const;
};

// The ranks of `job`: its parameter-server shards and every stage's replicas.
JobLayout MakeLayout(const worker::JobSpec& job);

}  // namespace heterps::launcher
