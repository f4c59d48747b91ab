// The client-side work every PsClient shares: a batch's distinct keys grouped by the server that
// holds them (base::ServerOf), and where each position of the batch finds its key.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "heterps/base/mix_key.h"

namespace heterps::ps {

using base::MixKey;
using base::ServerOf;

// Distinct keys of a batch, grouped by server, and where each position of the batch finds its
// key: the client-side work every implementation shares. Any thread may call PlanKeys; each keeps
// a scratch table between its calls (base::KeyIndex; at most 4 MiB: a larger batch's table is
// freed when the call returns).
struct KeyPlan {
  std::vector<std::vector<uint64_t>> keys;  // [server]: distinct keys, first-seen order
  std::vector<std::pair<int, int>> where;   // [position]: (server, index in keys[server])
};
KeyPlan PlanKeys(absl::Span<const uint64_t> keys, int num_servers);

}  // namespace heterps::ps
