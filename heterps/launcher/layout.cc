#include "heterps/launcher/layout.h"

#include "absl/strings/str_cat.h"

namespace heterps::launcher {

int JobLayout::WorkerRank(int stage, int replica) const {
  int rank = 1 + ps_shards;
  for (int s = 0; s < stage; ++s) rank += replicas[s];
  return rank + replica;
}

std::string JobLayout::Name(int rank) const {
  if (rank < 0 || rank >= world()) return absl::StrCat("rank ", rank);
  const RoleSlot& slot = ranks[rank];
  switch (slot.kind) {
    case RoleSlot::Kind::kCoordinator:
      return "coordinator";
    case RoleSlot::Kind::kPs:
      return absl::StrCat("ps shard ", slot.shard);
    case RoleSlot::Kind::kWorker:
      return absl::StrCat("stage ", slot.stage, " replica ", slot.replica);
  }
  return "?";
}

JobLayout MakeLayout(const worker::JobSpec& job) {
  JobLayout layout;
  layout.ps_shards = job.settings.ps_shards;
  layout.ranks.push_back({RoleSlot::Kind::kCoordinator});
  for (int s = 0; s < layout.ps_shards; ++s) layout.ranks.push_back({RoleSlot::Kind::kPs, s});
  for (int stage = 0; stage < job.stages(); ++stage) {
    layout.replicas.push_back(job.replicas(stage));
    for (int r = 0; r < job.replicas(stage); ++r) {
      layout.ranks.push_back({RoleSlot::Kind::kWorker, 0, stage, r});
    }
  }
  return layout;
}

}  // namespace heterps::launcher
