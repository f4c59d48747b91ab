// The client-side work every PsClient shares: a batch's distinct keys grouped by the server that
// holds them (base::ServerOf), and where each position of the batch finds its key.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "heterps/base/mix_key.h"
#include "heterps/ps/table_types.h"

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

// A batch's keys and their rows (`dim` floats each) grouped by server, in batch order, repeats
// kept: what a call that adds rather than applies sends each server (AddDeltas).
struct ServerRows {
  std::vector<uint64_t> keys;
  std::vector<float> rows;
};
std::vector<ServerRows> SplitRows(absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                                  int dim, int num_servers);

// `more` (one server's pending parts) merged into `into`: one entry per table and part (and
// block), the servers' keys one after another (they are disjoint), as ExportPending answers.
void MergePendingParts(PendingParts more, PendingParts* into);

}  // namespace heterps::ps
