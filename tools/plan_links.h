// What a distributed job whose plan spans regions sent across the cluster's links between
// regions, measured (docs/regions.md, "A pipeline cut at a region boundary"): for each ordered
// pair of regions, the bytes per step by kind (the activations to the next stage, their
// gradients back, the embedding rows' and the dense blocks' calls to the parameter servers),
// against the cost model's prediction for the same plan, and the egress they cost at the
// cluster's prices. The summary's table and the metrics' "links" entry.
//
//   const PlanLinks links = MeasurePlanLinks(job, result, cluster, profile);
//   summary += PlanLinksSummary(links);  // nothing without links
//
// Where the stages' and the servers' regions are one (or the cluster names none), there are no
// links. The servers' region: their type's in the plan, else the data's (--data-region: the
// servers receive its ids), else none (their calls are then not placed on any link, and the
// summary says so).
//
// Thread safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/cost/profile.h"
#include "heterps/launcher/job_result.h"
#include "heterps/worker/job.h"
#include "nlohmann/json.hpp"

namespace heterps::tools {

struct LinkTraffic {
  std::string from, to;
  // Measured bytes per step (messages' serialized bytes, while training): the activations
  // sent forward across it, their gradients sent back, the calls to the parameter servers that
  // carry keys (keys and gradients out, rows back) and the rest's (the dense blocks, commits,
  // checkpoints).
  double activations = 0, gradients = 0, rows = 0, dense = 0;
  double predicted = -1;         // the cost model's bytes per batch for the link; -1: not priced
  double egress_per_byte = 0;    // USD, the cluster's price for the link
  double bytes() const { return activations + gradients + rows + dense; }
  // Its egress over `steps` steps at the measured bytes per step.
  double egress_usd(int64_t steps) const {
    return bytes() * static_cast<double>(steps) * egress_per_byte;
  }
};

struct PlanLinks {
  std::vector<LinkTraffic> links;  // the pairs with traffic, in the order of cluster.Regions()
  int64_t steps = 0;               // the job's, which the egress is for
  std::string data_region;         // the plan's (empty: none)
  std::string servers_region;      // empty: not known (their calls are on no link)
  std::string predicted_error;     // why the cost model gave no prediction; empty if it did
  // The job's egress: each link's measured bytes per step over `steps`, at its price.
  double egress_usd() const;
  // Bytes of the calls that carry keys (the embedding rows' pulls and pushes, their exports,
  // imports and windows) across any link per step: the data's ids leave its region this way (0
  // under a data region, whose servers and reading stage stay in it).
  double rows_crossed() const;
};

// The links of `job`'s plan and what the last segment's stages sent across them (`result`).
// Errors: none but the cost model's, which leave `predicted` at -1 (predicted_error says why).
PlanLinks MeasurePlanLinks(const worker::JobSpec& job, const launcher::JobResult& result,
                           const config::ClusterSpec& cluster,
                           const std::optional<cost::Profile>& profile);

// The summary's lines: a table of each link's bytes per step by kind, the prediction, and the
// egress, then whether the data's ids stayed in its region. Empty without links.
std::string PlanLinksSummary(const PlanLinks& links);
// The metrics' "links" entry: [{"from", "to", "bytes_per_step", "activations_bytes_per_step",
// "gradients_bytes_per_step", "rows_bytes_per_step", "dense_bytes_per_step",
// "predicted_bytes_per_batch" (null: not priced), "egress_usd"}].
nlohmann::ordered_json PlanLinksJson(const PlanLinks& links);

// All three for `heterps train`: the links' lines appended to `summary`, and "links" and
// "egress_usd" (the job's, 0 without links) set in `metrics`.
void ReportPlanLinks(const worker::JobSpec& job, const launcher::JobResult& result,
                     const config::ClusterSpec& cluster,
                     const std::optional<cost::Profile>& profile, std::string* summary,
                     nlohmann::ordered_json* metrics);

}  // namespace heterps::tools
