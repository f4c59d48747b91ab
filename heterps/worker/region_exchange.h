// Regions in lockstep (docs/regions.md, "Two exchanges, two meanings"): each region trains its
// share of every step (a fixed range of the step's blocks) against its own parameter servers,
// sending them its blocks' gradients as their block tree's parts (ps/block_tree.h); before the
// commit, every region's servers take the other regions' parts, so that each region commits the
// whole step, and every region's parameters are those of one job holding every region's blocks,
// bit for bit, whatever the optimizer. The regions' dense parameters must then be the servers'
// too (dense_on_servers): a stage's replicas that hold them (worker/dense_group.h) exchange their
// sums among themselves, and those sums never become parts that another region could take.
//
//   ... every region's stages: Accumulate(their step's parts) on that region's servers ...
//   HETERPS_RETURN_IF_ERROR(ExchangeParts(regions, cost::SyncTopology::kPeerToPeer, 0, &traffic));
//   for (ps::PsClient* r : regions) HETERPS_RETURN_IF_ERROR(r->Commit());
//
// Thread safety: one call at a time per set of regions; the clients' own rules otherwise.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "heterps/cost/region_sync.h"
#include "heterps/ps/ps_client.h"

namespace heterps::worker {

// What one ordered pair of regions carried: the parts' keys (8 bytes each), their gradients (4
// bytes a float) and dense sums (8 bytes a float), and the messages (one per table and part, and
// per dense block and part).
struct RegionTraffic {
  int from = 0, to = 0;
  int64_t bytes = 0, messages = 0;
};

// Hands every region the pending parts the other regions hold for the step (PsClient::
// ExportPending, all taken before any is added; then AccumulateSparse and AccumulateDense with the
// same parts). Peer to peer: every region's parts go to every other. Hub (`hub`, an index into
// `regions`): every other region's parts go to the hub, and the hub sends each other region the
// parts of every region but that one's own. Either way every region ends holding every part.
// `traffic` (unless null) gets one entry per ordered pair that carried anything, in order of
// (from, to). Errors: a region's, prefixed "region r: "; a hub out of range (InvalidArgument).
// A failure leaves some regions with parts added: the step cannot be committed (the job goes
// back to its last checkpoint).
absl::Status ExchangeParts(absl::Span<ps::PsClient* const> regions, cost::SyncTopology topology,
                           int hub, std::vector<RegionTraffic>* traffic);

}  // namespace heterps::worker
