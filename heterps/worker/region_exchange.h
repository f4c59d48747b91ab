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
// GEO (K > 1, or a significance threshold): every K steps the regions exchange their parameter
// changes, each region keeping its own optimizer state. A window's deltas are taken from every
// region (TakeDeltaWindow) and merged, each weighted by the samples behind it; every region then
// applies the merge (ApplyDeltaWindow), which takes every region's bases onto the same floats.
// With a delay D the window taken after step (w + 1) K - 1 is applied before step (w + 1 + D) K,
// the steps between training on; the next window is taken only after it is applied. With an
// eager threshold (WindowAfter) a window is also taken after each step between, of the rows whose
// change passes it (Gaia's significance filter between the K-th steps), so that a large change
// crosses at once; a delayed window is then applied one step later, before the next is taken.
//
//   ... K steps of every region, each against its own servers ...
//   HETERPS_ASSIGN_OR_RETURN(DeltaWindow window, TakeDeltaWindow(regions, tables, samples, 0));
//   HETERPS_RETURN_IF_ERROR(ApplyDeltaWindow(regions, window, topology, hub, &traffic));
//
// Thread safety: one call at a time per set of regions; the clients' own rules otherwise.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/region_sync.h"
#include "heterps/ps/in_process_client.h"
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

// The tables a GEO window covers: sparse tables by id, dense blocks by (table, block).
struct DeltaTables {
  std::vector<int> sparse;
  std::vector<std::pair<int, int>> dense;
};

// Every sparse table and dense block `servers` hold.
DeltaTables DeltaTablesOf(ps::InProcessPsClient& servers);
// The tables CreateModelTables (stage.h) makes for `spec`: DeltaTablesOf servers that hold them.
DeltaTables ModelDeltaTables(const config::ModelSpec& spec);

// One window's deltas from every region and their merge.
struct DeltaWindow {
  struct Sparse {
    int table = 0, dim = 0;
    std::vector<uint64_t> keys;  // every row any region sent, sorted
    std::vector<float> merged;   // keys.size() * dim
    // Per region: what it sent of each key (zeros where it sent nothing), and its rows sent.
    std::vector<std::vector<float>> own;
    std::vector<int64_t> rows;
  };
  struct Dense {
    int table = 0, block = 0;
    std::vector<float> merged;
    std::vector<std::vector<float>> own;  // per region; empty where it sent nothing
  };
  std::vector<Sparse> sparse;  // the tables some region sent rows of
  std::vector<Dense> dense;    // the blocks some region sent
  std::vector<double> weights;  // per region: its samples over all regions'
};

// One region's changes of a window, as it sends them to the others (ExportRegion): the samples
// it trained in the window, and per sparse table and dense block of the window's DeltaTables, in
// their order, the rows (distinct keys, `dim` floats each) and the block's delta whose change passes
// the threshold (none, empty, where nothing did or the region trained no sample).
struct RegionExport {
  struct Sparse {
    int table = 0, dim = 0;
    std::vector<uint64_t> keys;
    std::vector<float> deltas;  // keys.size() * dim
  };
  struct Dense {
    int table = 0, block = 0;
    std::vector<float> delta;  // empty: nothing sent
  };
  int64_t samples = 0;
  std::vector<Sparse> sparse;
  std::vector<Dense> dense;
};

// `region`'s changes that pass `threshold` (PsClient::ExportWindow, ExportDenseWindow: 0 sends
// every changed row); the bases stay where they are until the window is applied. A region of no
// samples sends nothing: its changes (held back below the threshold) stay for a window it has
// weight in, rather than merged at weight 0 and lost. Errors: InvalidArgument for negative
// samples; the client's.
absl::StatusOr<RegionExport> ExportRegion(ps::PsClient* region, const DeltaTables& tables,
                                          int64_t samples, float threshold);

// The merge of every region's export (`exports` in region order, each of the same tables and
// blocks): a key's (a block's) merge is the sum over the regions, in region order, in double, of
// weight_q times region q's delta (nothing where q sent nothing), rounded to float once, with
// weight_q = samples_q / the samples of all regions (Paddle GEO's 1 / regions is biased where
// regions hold unequal data). The same floats wherever it is formed from the same exports.
// Errors: InvalidArgument for exports of other tables than each other's, or no sample in all.
absl::StatusOr<DeltaWindow> MergeExports(absl::Span<const RegionExport> exports);

// Every region's export (ExportRegion, every one taken before any merge: a failed export leaves
// every base in place) and their merge (MergeExports). Errors: InvalidArgument for samples not one
// per region, negative, or all zero; a region's, prefixed "region r: ".
absl::StatusOr<DeltaWindow> TakeDeltaWindow(absl::Span<ps::PsClient* const> regions,
                                            const DeltaTables& tables,
                                            absl::Span<const int64_t> samples, float threshold);

// Through a hub, across processes (launcher/region_windows.h): the hub forms the window
// (MergeExports) and sends every other region the merge alone, shaped as an export of the same
// tables and blocks as `shape` (a region's export of the window, in its order): each table's
// window keys with their merged rows, each block's merged delta (empty where no region sent
// any); `samples` the window's over every region.
RegionExport MergeOnly(const DeltaWindow& window, const RegionExport& shape);
// A region's window again from the hub's merge (MergeOnly) and its own export: the same keys,
// merge and own part as MergeExports gives it (`self` of `regions`; the other regions' parts
// are left empty, so only ApplyRegionWindow(.., self) may use it). InvalidArgument where the
// two do not fit (other tables, or a key of its own the merge lacks).
absl::StatusOr<DeltaWindow> WindowFromMerge(const RegionExport& merge, const RegionExport& own,
                                            int self, int regions);

// Region `r` applies the window's merge with what it sent (PsClient::ApplyWindow,
// ApplyDenseWindow): its rows and blocks end on the window's base, to the bit the same in every
// region, plus the changes it has made since the window was taken and those it held back below
// the threshold. Errors: InvalidArgument for `r` out of the window's regions; the client's.
absl::Status ApplyRegionWindow(ps::PsClient* region, const DeltaWindow& window, int r);

// What a window carries between `regions` regions, in order of (from, to): peer to peer, each
// region sends every other its rows (8 bytes a key and 4 a float) and blocks (4 bytes a float),
// one message per table and per block it sent; through a hub, every other region sends the hub
// its own, and the hub sends each other region the merge (the window's every key and block once).
std::vector<RegionTraffic> WindowTraffic(const DeltaWindow& window, int regions,
                                         cost::SyncTopology topology, int hub);

// Every region applies the window (ApplyRegionWindow, in region order); `traffic` (unless null)
// gets its links (WindowTraffic). Errors: a hub out of range (InvalidArgument); a region's,
// prefixed; a failure leaves the regions before it applied (the job goes back to its last
// checkpoint).
absl::Status ApplyDeltaWindow(absl::Span<ps::PsClient* const> regions, const DeltaWindow& window,
                              cost::SyncTopology topology, int hub,
                              std::vector<RegionTraffic>* traffic);

// The threshold of the window taken after `steps` (>= 1) of the longest region's steps, or none:
// after every K-th (`sync_steps`) step a window of the rows passing `threshold`; after the others,
// where `eager` > 0, one of the rows passing `eager` (> threshold: the K-th steps' windows send
// what the eager ones left).
std::optional<float> WindowAfter(int64_t steps, int64_t sync_steps, float threshold, float eager);
// Whether `eager` is one WindowAfter takes: 0 (none), or above `threshold`.
bool EagerThresholdValid(float threshold, float eager);

}  // namespace heterps::worker
