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

#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/sched/run_plan.h"

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

JobLayout MakeLayout(const sched::RunPlan& plan, int ps_shards);

// Parameter-server shards for a plan, when the user does not say: enough for the embedding
// tables with their optimizer state to take at most half of one unit's memory per shard, and
// for the lookups the plan's throughput needs (every row pulled and pushed once per sample) to
// take at most half of one unit's random-row rate per shard; the units are those of the type
// that runs the embedding layers. At least 1.
int SizeParameterServers(const config::ModelSpec& model, const config::ClusterSpec& cluster,
                         const sched::RunPlan& plan);

}  // namespace heterps::launcher
