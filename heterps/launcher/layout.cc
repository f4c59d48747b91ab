#include "heterps/launcher/layout.h"

#include <algorithm>
#include <cmath>

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

JobLayout MakeLayout(const sched::RunPlan& plan, int ps_shards) {
  JobLayout layout;
  layout.ps_shards = ps_shards;
  layout.ranks.push_back({RoleSlot::Kind::kCoordinator});
  for (int s = 0; s < ps_shards; ++s) layout.ranks.push_back({RoleSlot::Kind::kPs, s});
  for (size_t stage = 0; stage < plan.stages.size(); ++stage) {
    const int units = static_cast<int>(std::max<int64_t>(1, plan.stages[stage].units));
    layout.replicas.push_back(units);
    for (int r = 0; r < units; ++r) {
      layout.ranks.push_back({RoleSlot::Kind::kWorker, 0, static_cast<int>(stage), r});
    }
  }
  return layout;
}

int SizeParameterServers(const config::ModelSpec& model, const config::ClusterSpec& cluster,
                         const sched::RunPlan& plan) {
  double bytes = 0, rows_per_sample = 0;
  int embedding_layer = -1;
  for (size_t l = 0; l < model.layers.size(); ++l) {
    const config::LayerSpec& layer = model.layers[l];
    if (layer.kind != config::LayerKind::kEmbedding) continue;
    // Key, value and Adagrad's accumulator per row, every row of every slot's table.
    bytes += static_cast<double>(layer.rows) * layer.slots * (8 + 8.0 * layer.dim);
    rows_per_sample += layer.slots * layer.ids_per_slot;
    if (embedding_layer < 0) embedding_layer = static_cast<int>(l);
  }
  if (embedding_layer < 0) return 1;
  const config::ResourceType* type = nullptr;
  for (const sched::RunStage& stage : plan.stages) {
    if (embedding_layer >= stage.first && embedding_layer <= stage.last) {
      const int t = cluster.FindType(stage.type);
      if (t >= 0) type = &cluster.types[t];
    }
  }
  if (type == nullptr) return 1;
  double shards = 1;
  if (type->memory > 0) shards = std::max(shards, std::ceil(bytes / (0.5 * type->memory)));
  if (type->lookup_rate > 0 && plan.throughput > 0) {
    shards = std::max(shards,
                      std::ceil(2 * rows_per_sample * plan.throughput / (0.5 * type->lookup_rate)));
  }
  return static_cast<int>(std::min(shards, 64.0));
}

}  // namespace heterps::launcher
