// The price of training across regions with the data kept where it is (docs/cost_model.md,
// "Training across regions"), as the runtime trains it (docs/regions.md): each region trains on
// its own share of the samples with a plan of its own, every region's step taking its share
// f_r B of the job's batch B (so every region takes the same N / B steps), and every K steps
// the regions exchange the parameter deltas of those steps (Paddle's GEO mode, with regions for
// trainers, weighted by the samples behind them). What crosses is deltas only; this prices those
// bytes: how long each link takes to carry a window against the time K of the job's steps take,
// and the egress they cost.
//
//   SyncJob job{.shares = {{"us-east-1", 0.6}, {"eu-west-1", 0.4}}, .sync_steps = 100,
//               .throughput_limit = 1e6, .samples = 4.4e9};
//   HETERPS_ASSIGN_OR_RETURN(SyncPrice sync, CheapestSync(model, cluster, job));
//   // sync.egress_usd: the job's egress; sync.keeps_up(): every link carries its syncs in time
//
// Thread safety: functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"

namespace heterps::cost {

// The distinct rows that `lookups` (m) independent draws from a table of `rows` (R) rows touch,
// expected, where the i-th hottest row is drawn with probability p_i = i^-a / sum_j j^-a
// (Zipf(a), a = `skew`; 0: uniform): sum_i 1 - (1 - p_i)^m, term by term for the hottest 1000
// rows and as the integral of the same term beyond (within 1% of the sum; the tests check it).
// Never more than min(m, R). Each argument >= 0.
double DistinctRows(double lookups, double rows, double skew);

// Bytes of one region's delta after `batches` batches of the model's batch size: every dense
// parameter (4 bytes) and, per embedding table (a layer's slot), the rows those batches touched
// with their keys (8 + 4 d each). `batches` > 0.
double DeltaBytes(const config::ModelSpec& model, double batches, double skew);

// One data source's region and its share of the job's samples.
struct DataShare {
  std::string region;
  double share = 0;  // in (0, 1]; a job's shares add up to 1
};

struct SyncJob {
  std::vector<DataShare> shares;  // two or more, distinct regions of the cluster
  int64_t sync_steps = 0;         // K >= 1: a window after each K of the job's steps
  double throughput_limit = 0;    // TL, samples/s: region r trains at f_r TL
  double samples = 0;             // N: region r reads N f_r of them, f_r B a step
  double access_skew = 1.0;       // the rows' popularity (Workload::access_skew)
  // Windows after the other steps too (an eager threshold, worker::WindowAfter), each priced at
  // its bound: all that its step changed (a row passes only once its own step has moved it).
  // Every window, the K-th steps' included, then has one step to cross: it is applied before the
  // next is taken.
  bool eager = false;
};

// Hub: every other region sends its delta to the hub and receives the merge of the others'
// (the hub's included); peer to peer: every region sends its delta to every other.
enum class SyncTopology { kHub, kPeerToPeer };

// One ordered pair of regions' syncs over the job, one a window (every K of the job's steps, or
// with SyncJob::eager, `eager`, a flow of the windows after the K - 1 steps between).
// `cadence`: the region whose training waits for it (the sender of a delta, or the region a
// hub's merge goes to).
struct SyncFlow {
  std::string from, to, cadence;
  bool eager = false;
  double bytes_per_sync = 0;
  double syncs = 0;                  // over the job: N / (B K); eager: N (K - 1) / (B K)
  double syncs_per_step = 0;         // 1 / K; eager: (K - 1) / K
  double seconds_per_sync = 0;       // bytes / W + one-way latency
  // K B / TL: what K of the job's steps take at the limit; with SyncJob::eager, B / TL.
  double seconds_between_syncs = 0;
  double egress_usd = 0;             // syncs x bytes x the link's egress price
  // The share of the time between syncs the link is busy with them: above 1 it cannot keep up.
  double load() const { return seconds_per_sync / seconds_between_syncs; }
};

struct SyncPrice {
  SyncTopology topology = SyncTopology::kPeerToPeer;
  std::string hub;              // kHub: the hub region
  std::vector<SyncFlow> flows;  // every ordered pair that carries syncs
  double bytes = 0;             // over the job, all flows
  double egress_usd = 0;        // over the job, all flows
  // The flow with the highest load (-1: none).
  int busiest() const;
  bool keeps_up() const;     // every flow's load <= 1
  std::string name() const;  // "peer to peer" or "hub us-east-1"
};

// The syncs of `job` in `topology` (kHub: with the hub `hub`, one of the job's regions).
// InvalidArgument for a job that breaks SyncJob's rules (naming the field and the value), a
// region the cluster does not have, or a pair of regions with no link.
absl::StatusOr<SyncPrice> PriceSync(const config::ModelSpec& model,
                                    const config::ClusterSpec& cluster, const SyncJob& job,
                                    SyncTopology topology, const std::string& hub = "");

// Of peer to peer and a hub in each of the job's regions, the least egress among those that keep
// up (equal egress: peer to peer, then the hubs in the job's order); where none keeps up, the
// one whose busiest flow has the least load. Errors as PriceSync.
absl::StatusOr<SyncPrice> CheapestSync(const config::ModelSpec& model,
                                       const config::ClusterSpec& cluster, const SyncJob& job);

}  // namespace heterps::cost
