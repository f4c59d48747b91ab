#include "heterps/cost/ps_sizing.h"

#include <algorithm>
#include <cmath>

namespace heterps::cost {

int SizeParameterServers(const config::ModelSpec& model, const config::ResourceType* type,
                         const PsSizing& sizing) {
  double bytes = 0, rows_per_sample = 0;
  for (const config::LayerSpec& layer : model.layers) {
    if (layer.kind != config::LayerKind::kEmbedding) continue;
    const double floats_per_row = layer.dim * (1.0 + sizing.state_floats);
    bytes += static_cast<double>(layer.rows) * layer.slots * (8 + 4 * floats_per_row);
    rows_per_sample += layer.slots * layer.ids_per_slot;
  }
  if (rows_per_sample == 0 || type == nullptr) return 1;
  double shards = 1;
  if (type->memory > 0) shards = std::max(shards, std::ceil(bytes / (0.5 * type->memory)));
  if (type->lookup_rate > 0 && sizing.throughput > 0) {
    shards = std::max(
        shards, std::ceil(2 * rows_per_sample * sizing.throughput / (0.5 * type->lookup_rate)));
  }
  return static_cast<int>(std::min(shards, 64.0));
}

}  // namespace heterps::cost
