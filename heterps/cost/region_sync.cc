#include "heterps/cost/region_sync.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/layer_cost.h"

namespace heterps::cost {

namespace {

constexpr double kKeyBytes = 8;
constexpr double kFloatBytes = 4;

// The embedding tables of a layer (one per slot, `copies` of them, alike): each one's rows, the
// bytes a row's delta sends (key and values), and the lookups a sample makes into it.
struct SyncTable {
  double copies = 0, rows = 0, row_bytes = 0, lookups = 0;
};

struct ModelTraffic {
  double dense_bytes = 0;
  std::vector<SyncTable> tables;
};

ModelTraffic TrafficOf(const config::ModelSpec& model) {
  ModelTraffic traffic;
  const std::vector<LayerCost> costs =
      DeriveLayerCosts(model, static_cast<double>(model.batch_size));
  for (size_t l = 0; l < model.layers.size(); ++l) {
    traffic.dense_bytes += kFloatBytes * costs[l].dense_params;
    const config::LayerSpec& spec = model.layers[l];
    if (spec.kind != config::LayerKind::kEmbedding || spec.slots <= 0) continue;
    const double slots = static_cast<double>(spec.slots);
    traffic.tables.push_back({slots, static_cast<double>(spec.rows),
                              kKeyBytes + kFloatBytes * static_cast<double>(spec.dim),
                              costs[l].rows / slots});
  }
  return traffic;
}

// A delta's bytes after `batches` batches (of one region, or of several merged: their lookups
// draw from the same popularity, so the rows they touch together are those of all their draws).
double DeltaOf(const ModelTraffic& traffic, double batch, double batches, double skew) {
  double bytes = traffic.dense_bytes;
  for (const SyncTable& table : traffic.tables) {
    bytes += table.copies * DistinctRows(batches * batch * table.lookups, table.rows, skew) *
             table.row_bytes;
  }
  return bytes;
}

absl::Status CheckJob(const config::ClusterSpec& cluster, const SyncJob& job) {
  if (job.shares.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shares: a job across regions has data in two regions or more, not ", job.shares.size()));
  }
  const std::vector<std::string> regions = cluster.Regions();
  double sum = 0;
  for (size_t i = 0; i < job.shares.size(); ++i) {
    const DataShare& s = job.shares[i];
    if (std::find(regions.begin(), regions.end(), s.region) == regions.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shares: region '", s.region, "' is not a region of cluster ", cluster.name,
          " (its regions: ", regions.empty() ? "none" : absl::StrJoin(regions, ", "), ")"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (job.shares[j].region == s.region) {
        return absl::InvalidArgumentError(
            absl::StrCat("shares: region '", s.region, "' is given twice"));
      }
    }
    if (!(s.share > 0 && s.share <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("shares: the share of region '", s.region,
                                                     "' is ", s.share, "; it must be in (0, 1]"));
    }
    sum += s.share;
  }
  if (std::abs(sum - 1) > 1e-6) {
    return absl::InvalidArgumentError(
        absl::StrCat("shares: the regions' shares add up to ", sum, ", not 1"));
  }
  if (job.sync_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("sync_steps: ", job.sync_steps, "; the regions sync every K >= 1 steps"));
  }
  if (!(job.throughput_limit > 0) || !(job.samples > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("throughput_limit (", job.throughput_limit,
                                                   ") and samples (", job.samples,
                                                   ") must be > 0"));
  }
  if (!(job.access_skew >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("access_skew: ", job.access_skew, "; it must be >= 0"));
  }
  return absl::OkStatus();
}

}  // namespace

double DistinctRows(double lookups, double rows, double skew) {
  const double m = std::max(lookups, 0.0), r = std::floor(std::max(rows, 0.0));
  if (m == 0 || r == 0) return 0;
  const double a = std::max(skew, 0.0);
  // The hottest kSummed rows term by term, the rest as the integral of the same term over
  // [kSummed + 1/2, R + 1/2] (Simpson's rule in ln x, where the term is smooth).
  constexpr double kSummed = 1000;
  constexpr int kIntervals = 512;  // even
  const double summed = std::min(r, kSummed);
  const double from = std::log(summed + 0.5), to = std::log(r + 0.5);
  auto integrate = [&](auto f) {  // of f(x) dx over [from, to], x = e^t
    if (r <= summed) return 0.0;
    const double h = (to - from) / kIntervals;
    double sum = 0;
    for (int i = 0; i <= kIntervals; ++i) {
      const double x = std::exp(from + i * h);
      sum += (i == 0 || i == kIntervals ? 1 : i % 2 == 1 ? 4 : 2) * f(x) * x;
    }
    return sum * h / 3;
  };
  double mass = 0;  // sum_i i^-a over the table
  for (double i = 1; i <= summed; ++i) mass += std::pow(i, -a);
  mass += integrate([&](double x) { return std::pow(x, -a); });
  // Row i is touched with probability 1 - (1 - p_i)^m, p_i = i^-a / mass.
  double touched = 0;
  for (double i = 1; i <= summed; ++i) {
    touched += -std::expm1(m * std::log1p(-std::pow(i, -a) / mass));
  }
  touched += integrate([&](double x) { return -std::expm1(-m * std::pow(x, -a) / mass); });
  return std::min({touched, m, r});
}

double DeltaBytes(const config::ModelSpec& model, double batches, double skew) {
  return DeltaOf(TrafficOf(model), static_cast<double>(model.batch_size), batches, skew);
}

int SyncPrice::busiest() const {
  int best = -1;
  for (size_t i = 0; i < flows.size(); ++i) {
    if (best < 0 || flows[i].load() > flows[best].load()) best = static_cast<int>(i);
  }
  return best;
}

bool SyncPrice::keeps_up() const {
  return std::all_of(flows.begin(), flows.end(), [](const SyncFlow& f) { return f.load() <= 1; });
}

std::string SyncPrice::name() const {
  return topology == SyncTopology::kHub ? absl::StrCat("hub ", hub) : "peer to peer";
}

absl::StatusOr<SyncPrice> PriceSync(const config::ModelSpec& model,
                                    const config::ClusterSpec& cluster, const SyncJob& job,
                                    SyncTopology topology, const std::string& hub) {
  if (absl::Status valid = CheckJob(cluster, job); !valid.ok()) return valid;
  const size_t n = job.shares.size();
  size_t h = n;
  if (topology == SyncTopology::kHub) {
    for (size_t i = 0; i < n; ++i) {
      if (job.shares[i].region == hub) h = i;
    }
    if (h == n) {
      return absl::InvalidArgumentError(
          absl::StrCat("hub: '", hub, "' is not one of the job's data regions"));
    }
  }
  const ModelTraffic traffic = TrafficOf(model);
  const double batch = static_cast<double>(model.batch_size);
  const double k = static_cast<double>(job.sync_steps);
  // Region r's delta: the rows `steps` of its steps of f_r B samples touched.
  const auto own = [&](size_t r, double steps) {
    return DeltaOf(traffic, job.shares[r].share * batch, steps, job.access_skew);
  };
  SyncPrice price;
  price.topology = topology;
  if (topology == SyncTopology::kHub) price.hub = hub;
  // A flow of `bytes` each window, from region `a` to region `b`, for region `c`: of the K-th
  // steps' windows, or of the eager ones between.
  auto add = [&](size_t a, size_t b, size_t c, double bytes, bool eager) -> absl::Status {
    const config::RegionLink* link = cluster.FindLink(job.shares[a].region, job.shares[b].region);
    if (link == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("cluster ", cluster.name, " has no link from ",
                                                     job.shares[a].region, " to ",
                                                     job.shares[b].region));
    }
    SyncFlow flow{job.shares[a].region, job.shares[b].region, job.shares[c].region, eager};
    flow.bytes_per_sync = bytes;
    // Every region takes N / B steps, a window every K of them (eager: after each of the K - 1
    // between), a step every B / TL seconds.
    flow.syncs_per_step = eager ? (k - 1) / k : 1 / k;
    flow.syncs = job.samples / batch * flow.syncs_per_step;
    flow.seconds_per_sync = bytes / link->bandwidth + link->latency;
    flow.seconds_between_syncs = (job.eager ? 1 : k) * batch / job.throughput_limit;
    flow.egress_usd = flow.syncs * bytes * link->egress_per_byte;
    price.bytes += flow.syncs * bytes;
    price.egress_usd += flow.egress_usd;
    price.flows.push_back(std::move(flow));
    return absl::OkStatus();
  };
  // The K-th steps' windows, then (eager) the windows of one step each between them.
  for (const bool eager : {false, true}) {
    if (eager && (!job.eager || job.sync_steps == 1)) break;
    const double steps = eager ? 1 : k;
    for (size_t a = 0; a < n; ++a) {
      if (topology == SyncTopology::kPeerToPeer) {
        for (size_t b = 0; b < n; ++b) {
          if (b != a) HETERPS_RETURN_IF_ERROR(add(a, b, a, own(a, steps), eager));
        }
        continue;
      }
      if (a == h) continue;
      HETERPS_RETURN_IF_ERROR(add(a, h, a, own(a, steps), eager));
      // Back: the other regions' deltas of the same steps, merged: the rows their (1 - f_a) B
      // samples a step touched together.
      const double others = (1 - job.shares[a].share) * batch;
      HETERPS_RETURN_IF_ERROR(
          add(h, a, a, DeltaOf(traffic, others, steps, job.access_skew), eager));
    }
  }
  return price;
}

absl::StatusOr<SyncPrice> CheapestSync(const config::ModelSpec& model,
                                       const config::ClusterSpec& cluster, const SyncJob& job) {
  HETERPS_ASSIGN_OR_RETURN(SyncPrice best,
                           PriceSync(model, cluster, job, SyncTopology::kPeerToPeer));
  for (const DataShare& s : job.shares) {
    HETERPS_ASSIGN_OR_RETURN(SyncPrice hub,
                             PriceSync(model, cluster, job, SyncTopology::kHub, s.region));
    const bool better = best.keeps_up() ? hub.keeps_up() && hub.egress_usd < best.egress_usd
                                        : hub.keeps_up() || hub.flows[hub.busiest()].load() <
                                                                best.flows[best.busiest()].load();
    if (better) best = std::move(hub);
  }
  return best;
}

}  // namespace heterps::cost
