// How many parameter-server shards a job needs when the user does not say: a cost calculation
// over the model's tables, the optimizer's state and the plan's throughput.
//
// Thread safety: a pure function.
#pragma once

#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"

namespace heterps::cost {

struct PsSizing {
  // Floats of optimizer state per value float (SGD 0, Adagrad 1, Adam 2: ps::StateFloats).
  int state_floats = 1;
  double throughput = 0;  // samples/s the plan predicts (0: unknown, lookups not counted)
};

// Enough shards for every embedding table's rows (key, value and optimizer state) to take at
// most half of one unit's memory per shard, and for the lookups of `sizing.throughput` (every
// row pulled and pushed once per sample, ids_per_slot ids per slot) to take at most half of one
// unit's random-row rate per shard; `type` is the type that runs the embedding layers, or null
// when unknown. At least 1, at most 64.
int SizeParameterServers(const config::ModelSpec& model, const config::ResourceType* type,
                         const PsSizing& sizing);

}  // namespace heterps::cost
