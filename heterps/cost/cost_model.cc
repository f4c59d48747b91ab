#include "heterps/cost/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "heterps/base/status_macros.h"

namespace heterps::cost {
namespace {

constexpr double kKeyBytes = 8;

// The analytic OCT(l, t) of DESIGN.md section 3.
double AnalyticSeconds(const LayerCost& c, const config::ResourceType& t, double batch) {
  return t.overhead * c.ops + batch * (3 * c.fwd_flops / t.flops + c.mem_bytes / t.mem_bandwidth +
                                       2 * c.rows / t.lookup_rate);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::string DataName(const Workload& workload) {
  return workload.data_source.empty() ? std::string("the data")
                                      : absl::StrCat("the data (", workload.data_source, ")");
}

std::string ResidencyBreach(absl::string_view what, absl::string_view region,
                            const Workload& workload, absl::string_view away_from) {
  return absl::StrCat(
      what, " is in region '", region.empty() ? absl::string_view("(none)") : region, "', but ",
      DataName(workload), " is kept in region '", workload.data_region,
      "' and nothing derived from it may leave it",
      away_from.empty()
          ? std::string()
          : absl::StrCat(" before layer '", away_from, "' (activations may cross from there on)"));
}

int FirstLayerAwayFromData(const config::ModelSpec& model) {
  const int num_layers = static_cast<int>(model.layers.size());
  int last_embedding = -1;
  for (int l = 0; l < num_layers; ++l) {
    if (model.layers[l].kind == config::LayerKind::kEmbedding) last_embedding = l;
  }
  bool raw_dense = false;  // the dense stream holds raw features
  for (int l = 0; l < num_layers; ++l) {
    const config::LayerSpec& layer = model.layers[l];
    if (layer.kind == config::LayerKind::kInput) raw_dense = layer.dense_features > 0;
    if (layer.kind == config::LayerKind::kFc ||
        (layer.kind == config::LayerKind::kCustom && layer.params > 0)) {
      raw_dense = false;
    }
    if (l >= last_embedding && !raw_dense && l + 1 < num_layers) return l + 1;
  }
  return num_layers;
}

absl::Status CheckDataRegion(const config::ClusterSpec& cluster, const Workload& workload) {
  const std::vector<std::string> regions = cluster.Regions();
  if (workload.data_region.empty() ||
      std::find(regions.begin(), regions.end(), workload.data_region) != regions.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(DataName(workload), " is kept in region '", workload.data_region,
                   "', where cluster '", cluster.name, "' (", cluster.source, ") has no type; ",
                   regions.empty() ? std::string("its types name no region")
                                   : absl::StrCat("its regions: ", absl::StrJoin(regions, ", "))));
}

absl::StatusOr<CostModel> CostModel::Create(const config::ModelSpec& model,
                                            const config::ClusterSpec& cluster,
                                            const Workload& workload, const Profile* profile) {
  if (!(workload.throughput_limit > 0) || !std::isfinite(workload.throughput_limit)) {
    return absl::InvalidArgumentError(
        absl::StrCat("throughput limit must be a positive number of samples/s, got ",
                     workload.throughput_limit));
  }
  if (!(workload.samples > 0) || !std::isfinite(workload.samples)) {
    return absl::InvalidArgumentError(
        absl::StrCat("samples must be a positive number, got ", workload.samples));
  }
  CostModel cm;
  cm.model_ = model;
  cm.cluster_ = cluster;
  cm.workload_ = workload;
  cm.batch_ = static_cast<double>(model.batch_size);
  cm.layers_ = DeriveLayerCosts(model, cm.batch_);
  const int num_layers = cm.num_layers();
  std::vector<std::vector<double>> oct(cm.num_types(), std::vector<double>(num_layers));
  for (int t = 0; t < cm.num_types(); ++t) {
    for (int l = 0; l < num_layers; ++l) {
      oct[t][l] = AnalyticSeconds(cm.layers_[l], cluster.types[t], cm.batch_);
    }
  }
  cm.profiled_.assign(cm.num_types(), std::vector<bool>(num_layers, false));
  cm.tier_.assign(cm.num_types(), TierEntry());
  if (!(workload.access_skew >= 0) || !std::isfinite(workload.access_skew)) {
    return absl::InvalidArgumentError(
        absl::StrCat("access skew must be a number >= 0, got ", workload.access_skew));
  }
  if (workload.ps_state_floats < 0 || workload.ps_state_floats > 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer state floats per value must be 0, 1 or 2, got ", workload.ps_state_floats));
  }
  if (workload.first_stage_max_units < 0 || workload.first_stage_through < -1 ||
      workload.first_stage_through >= num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("the first stage's rules: at most ", workload.first_stage_max_units,
                     " units (must be >= 0), through layer ", workload.first_stage_through,
                     " (must be -1 .. ", num_layers - 1, ")"));
  }
  HETERPS_RETURN_IF_ERROR(CheckDataRegion(cluster, workload));
  cm.away_from_ = workload.activations_may_cross && !workload.data_region.empty()
                      ? FirstLayerAwayFromData(model)
                      : num_layers;
  HETERPS_RETURN_IF_ERROR(cm.IndexLinks());
  if (profile != nullptr) HETERPS_RETURN_IF_ERROR(cm.ApplyProfile(*profile));
  cm.BuildPrefixSums(oct);
  cm.BuildPsModel();
  return cm;
}

namespace {

// A shard keeps at most this share of its unit's memory for rows: the rest is the process, the
// pending updates of a synchronous step, and the system.
constexpr double kPsMemoryShare = 0.8;

// Z(x): the Zipf(a) popularity mass of a table's x hottest rows, up to a constant (the integral
// approximation of sum_{i<=x} i^-a, exact in the limit). Non-decreasing in x.
double ZipfMass(double x, double a) {
  x = std::max(x, 1.0);
  if (std::abs(a - 1) < 1e-9) return 1 + std::log(x);
  return 1 + (std::pow(x, 1 - a) - 1) / (1 - a);
}

}  // namespace

void CostModel::BuildPsModel() {
  if (!workload_.price_parameter_servers) return;
  for (int t = 0; t < num_types(); ++t) {
    if (cluster_.types[t].kind != config::DeviceKind::kCpu) continue;
    prices_ps_ = true;
    if (InDataRegion(t)) ps_types_.push_back(t);
  }
  if (!prices_ps_) return;
  for (int l = 0; l < num_layers(); ++l) {
    const config::LayerSpec& spec = model_.layers[l];
    ps_dense_bytes_ += 8 * layers_[l].dense_params;
    if (spec.kind != config::LayerKind::kEmbedding) continue;
    const double row_floats = spec.dim * (1.0 + workload_.ps_state_floats);
    table_bytes_ += static_cast<double>(spec.rows) * spec.slots * (kKeyBytes + 4 * row_floats);
    ps_tables_.push_back({static_cast<double>(spec.rows), layers_[l].rows});
    ps_lookups_ += layers_[l].rows;
    ps_sparse_bytes_ += batch_ * layers_[l].rows * (2 * layers_[l].row_bytes + 2 * kKeyBytes);
  }
  // Every (type, shards) the servers can run as within the limit, and the relaxed frontier.
  const double e_max = max_bottleneck_seconds();
  std::vector<PsPoint> points;
  for (int t : ps_types_) {
    for (int64_t n = 1; n <= std::min<int64_t>(cluster_.types[t].units, kMaxPsShards); ++n) {
      const PsServers ps = Ps(t, n);
      if (ps.seconds_per_batch <= e_max) {
        points.push_back({ps.seconds_per_batch, ps.usd_per_hour, t, n});
      }
    }
  }
  // Ascending ET_ps; at equal ET_ps, the cheaper first.
  std::sort(points.begin(), points.end(), [](const PsPoint& a, const PsPoint& b) {
    return a.seconds != b.seconds ? a.seconds < b.seconds : a.rate < b.rate;
  });
  for (const PsPoint& p : points) {
    ps_candidates_.push_back(p.seconds);
    if (ps_frontier_.empty() || p.rate < ps_frontier_.back().rate) ps_frontier_.push_back(p);
  }
  ps_candidates_.erase(std::unique(ps_candidates_.begin(), ps_candidates_.end()),
                       ps_candidates_.end());
}

bool CostModel::HostsPs(int t) const {
  return std::find(ps_types_.begin(), ps_types_.end(), t) != ps_types_.end();
}

PsServers CostModel::Ps(int t, int64_t n) const {
  const config::ResourceType& type = cluster_.types[t];
  PsServers ps;
  ps.type = t;
  ps.shards = n;
  ps.usd_per_hour = static_cast<double>(n) * type.price_per_hour;
  const double share = table_bytes_ / static_cast<double>(n);
  ps.memory_bytes = std::min(share, kPsMemoryShare * type.memory);
  ps.ssd_bytes = share - ps.memory_bytes;
  if (ps.ssd_bytes > type.ssd_bytes * (1 + 1e-12)) {
    ps.seconds_per_batch = kInfinity;
    return ps;
  }
  // Each table keeps its hottest rows in memory, in proportion to its size.
  const double hot =
      table_bytes_ > 0 ? ps.memory_bytes * static_cast<double>(n) / table_bytes_ : 1.0;
  double cold_lookups = 0;  // per sample
  if (hot < 1) {
    ps.hit_rate = 0;
    const double a = workload_.access_skew;
    for (const PsTable& table : ps_tables_) {
      const double share_hot = ZipfMass(hot * table.rows, a) / ZipfMass(table.rows, a);
      ps.hit_rate += table.lookups / ps_lookups_ * share_hot;
      cold_lookups += table.lookups * (1 - share_hot);
    }
  }
  const double per_shard = batch_ / static_cast<double>(n);
  ps.seconds_per_batch =
      2 * type.latency + per_shard * 2 * ps_lookups_ / type.lookup_rate +
      (cold_lookups > 0 ? per_shard * cold_lookups / type.ssd_read_rate : 0.0) +
      (ps_sparse_bytes_ + ps_dense_bytes_) / static_cast<double>(n) / type.network;
  return ps;
}

int64_t CostModel::MinPsShards(int t, double e, int64_t max_shards) const {
  max_shards = std::min({max_shards, cluster_.types[t].units, kMaxPsShards});
  if (max_shards < 1 || !(Ps(t, max_shards).seconds_per_batch <= e)) return 0;
  int64_t lo = 1, hi = max_shards;  // ET_ps is non-increasing in the shards
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (Ps(t, mid).seconds_per_batch <= e) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

const CostModel::PsPoint* CostModel::FrontierAt(double e) const {
  // The last point at or below e: its rate is the least of every (type, shards) whose ET_ps <= e.
  auto it = std::upper_bound(ps_frontier_.begin(), ps_frontier_.end(), e,
                             [](double v, const PsPoint& p) { return v < p.seconds; });
  return it == ps_frontier_.begin() ? nullptr : &*std::prev(it);
}

double CostModel::CheapestPsRate(double e) const {
  if (!prices_ps()) return 0;
  const PsPoint* p = FrontierAt(e);
  return p == nullptr ? kInfinity : p->rate;
}

PsServers CostModel::CheapestPs(double e, absl::Span<const int64_t> used) const {
  PsServers best;
  if (!prices_ps()) return best;
  // Usually the cheapest servers of all fit beside the stages.
  const PsPoint* p = FrontierAt(e);
  if (p == nullptr) return best;
  if (used.empty() || used[p->type] + p->shards <= cluster_.types[p->type].units) {
    return Ps(p->type, p->shards);
  }
  best.usd_per_hour = kInfinity;
  for (int t : ps_types_) {
    const int64_t left = cluster_.types[t].units - (used.empty() ? 0 : used[t]);
    const int64_t n = MinPsShards(t, e, left);
    if (n == 0) continue;
    const PsServers ps = Ps(t, n);
    if (ps.usd_per_hour < best.usd_per_hour ||
        (ps.usd_per_hour == best.usd_per_hour && ps.seconds_per_batch < best.seconds_per_batch)) {
      best = ps;
    }
  }
  if (best.type < 0) best.usd_per_hour = 0;
  return best;
}

absl::Status CostModel::ApplyProfile(const Profile& profile) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("profile: ", what));
  };
  if (profile.model != model_.name) {
    return bad(absl::StrCat("taken on model '", profile.model, "', not '", model_.name, "'"));
  }
  if (profile.batch_size != model_.batch_size) {
    return bad(absl::StrCat("taken with batch size ", profile.batch_size, ", but the model's is ",
                            model_.batch_size));
  }
  measured_.assign(cluster_.types.size(), std::vector<double>(layers_.size(), 0.0));
  for (size_t i = 0; i < profile.entries.size(); ++i) {
    const ProfileEntry& e = profile.entries[i];
    int l = model_.FindLayer(e.layer);
    int t = cluster_.FindType(e.type);
    std::string where = absl::StrCat("entries[", i, "]");
    if (l < 0) return bad(absl::StrCat(where, ".layer: no layer '", e.layer, "' in the model"));
    if (t < 0) return bad(absl::StrCat(where, ".type: no type '", e.type, "' in the cluster"));
    if (profiled_[t][l]) {
      return bad(absl::StrCat(where, ": a second measurement of ", e.layer, " on ", e.type));
    }
    profiled_[t][l] = true;
    measured_[t][l] = e.seconds_per_batch;
  }
  // A type of the same hardware as a measured one (another price or market for the same
  // machine) is measured too: like is compared with like, not a measurement with a datasheet.
  // `lend(has, copy)`: copy(t, u) for each type t that lacks what `has` says and the first type
  // u of the same hardware (as the spec gives it) that has it.
  const std::vector<config::ResourceType> specified = cluster_.types;
  const auto lend = [&](const auto& has, const auto& copy) {
    for (size_t t = 0; t < specified.size(); ++t) {
      for (size_t u = 0; u < specified.size() && !has(t); ++u) {
        if (u != t && has(u) && config::SameHardware(specified[t], specified[u])) copy(t, u);
      }
    }
  };
  lend(
      [&](size_t t) {
        return std::find(profiled_[t].begin(), profiled_[t].end(), true) != profiled_[t].end();
      },
      [&](size_t t, size_t u) {
        profiled_[t] = profiled_[u];
        measured_[t] = measured_[u];
      });
  std::vector<bool> measured(cluster_.types.size(), false);
  for (size_t i = 0; i < profile.network.size(); ++i) {
    const NetworkEntry& w = profile.network[i];
    const int t = cluster_.FindType(w.type);
    if (t < 0) {
      return bad(absl::StrCat("network[", i, "].type: no type '", w.type, "' in the cluster"));
    }
    if (!(w.bytes_per_second > 0) || !(w.seconds_per_message >= 0)) {
      return bad(absl::StrCat("network[", i, "]: the rate must be > 0 and the latency >= 0"));
    }
    cluster_.types[t].network = w.bytes_per_second;
    cluster_.types[t].latency = w.seconds_per_message;
    measured[t] = true;
    network_.push_back(w);
  }
  lend([&](size_t t) { return measured[t]; },
       [&](size_t t, size_t u) {
         cluster_.types[t].network = cluster_.types[u].network;
         cluster_.types[t].latency = cluster_.types[u].latency;
         measured[t] = true;
       });
  for (size_t i = 0; i < profile.tier.size(); ++i) {
    const TierEntry& e = profile.tier[i];
    const int t = cluster_.FindType(e.type);
    if (t < 0)
      return bad(absl::StrCat("tier[", i, "].type: no type '", e.type, "' in the cluster"));
    if (!(e.lookups_per_batch > 0) || !(e.loaded_rows_per_batch >= 0) ||
        !(e.passed_rows_per_batch >= 0) ||
        !(e.loaded_rows_per_batch + e.passed_rows_per_batch <= e.lookups_per_batch)) {
      return bad(absl::StrCat("tier[", i,
                              "]: the lookups must be > 0 and the loaded and passed "
                              "rows from 0 to the lookups together"));
    }
    if (tier_[t].lookups_per_batch > 0) {
      return bad(absl::StrCat("tier[", i, "]: a second tier entry for ", e.type));
    }
    tier_[t] = e;
    tier_entries_.push_back(e);
  }
  lend([&](size_t t) { return tier_[t].lookups_per_batch > 0; },
       [&](size_t t, size_t u) { tier_[t] = tier_[u]; });
  return absl::OkStatus();
}

void CostModel::BuildPrefixSums(const std::vector<std::vector<double>>& analytic) {
  const int num_layers = this->num_layers();
  oct_.assign(num_types(), std::vector<double>(num_layers + 1, 0.0));
  for (int t = 0; t < num_types(); ++t) {
    // Calibrate the type's unmeasured layers by the median measured/analytic ratio.
    std::vector<double> ratios;
    for (int l = 0; l < num_layers; ++l) {
      if (profiled_[t][l]) ratios.push_back(measured_[t][l] / analytic[t][l]);
    }
    double scale = ratios.empty() ? 1.0 : Median(ratios);
    for (int l = 0; l < num_layers; ++l) {
      double seconds = profiled_[t][l] ? measured_[t][l] : analytic[t][l] * scale;
      oct_[t][l + 1] = oct_[t][l] + seconds;
    }
  }
  sparse_bytes_.assign(num_layers + 1, 0.0);
  dense_bytes_.assign(num_layers + 1, 0.0);
  memory_bytes_.assign(num_layers + 1, 0.0);
  pull_keys_bytes_.assign(num_layers + 1, 0.0);
  for (int l = 0; l < num_layers; ++l) {
    const LayerCost& c = layers_[l];
    sparse_bytes_[l + 1] = sparse_bytes_[l] + batch_ * c.rows * (2 * c.row_bytes + 2 * kKeyBytes);
    dense_bytes_[l + 1] = dense_bytes_[l] + 8 * c.dense_params;
    pull_keys_bytes_[l + 1] = pull_keys_bytes_[l] + batch_ * c.rows * kKeyBytes;
    memory_bytes_[l + 1] = memory_bytes_[l] + 8 * c.dense_params + 2 * batch_ * c.act_out_bytes +
                           2 * batch_ * c.rows * c.row_bytes;
  }
}

bool CostModel::TierFeeds(int first, int t) const {
  return workload_.gpu_tier && first == 0 && t >= 0 && tier_[t].lookups_per_batch > 0;
}

bool CostModel::HoldsDense(int first, int last, int t) const {
  return TierFeeds(first, t) && workload_.tier_holds_dense && last == num_layers() - 1 &&
         tier_[t].dense_held;
}

CostModel::TierBytes CostModel::TierRowBytes(int first, int last, int t) const {
  // Per looked-up row: its key (8 B) and its value (4 d B) in the model's prefix sums.
  const double keys = pull_keys_bytes_[last + 1] - pull_keys_bytes_[first];
  const double values = (sparse_bytes_[last + 1] - sparse_bytes_[first] - 2 * keys) / 2;
  const TierEntry& e = tier_[t];
  const double loaded = e.loaded_rows_per_batch / e.lookups_per_batch;
  const double passed = e.passed_rows_per_batch / e.lookups_per_batch;
  const double row = 1 + workload_.ps_state_floats;  // value and state floats per value float
  TierBytes bytes;
  // A load sends its key and receives the row; its write-back sends both.
  bytes.sent = loaded * (2 * keys + row * values) + passed * (2 * keys + values);
  bytes.received = loaded * row * values + passed * values;
  return bytes;
}

StageTraffic CostModel::Traffic(int first, int last, int t) const {
  // Activations in and their gradients out at the front boundary; the reverse at the back. Each
  // exchange is two messages per batch; so are the row pull and push, and the weight pull and
  // gradient push.
  double bytes = 0, messages = 0;
  if (first > 0) {
    bytes += batch_ * (layers_[first].act_in_bytes + layers_[first].grad_in_bytes);
    messages += 2;
  }
  if (last + 1 < num_layers()) {
    bytes += batch_ * (layers_[last].act_out_bytes + layers_[last].grad_out_bytes);
    messages += 2;
  }
  // A GPU tier's stage: its misses loaded and written back, or passed through, where the servers
  // would send every row and take every gradient.
  double sparse = sparse_bytes_[last + 1] - sparse_bytes_[first];
  if (TierFeeds(first, t)) {
    const TierBytes tier = TierRowBytes(first, last, t);
    sparse = tier.sent + tier.received;
  }
  const double dense =
      HoldsDense(first, last, t) ? 0 : dense_bytes_[last + 1] - dense_bytes_[first];
  messages += (sparse > 0 ? 2 : 0) + (dense > 0 ? 2 : 0);
  return {bytes + sparse + dense, messages};
}

StageTime CostModel::Stage(int first, int last, int t) const {
  StageTime time;
  time.compute = oct_[t][last + 1] - oct_[t][first];
  const StageTraffic traffic = Traffic(first, last, t);
  const config::ResourceType& type = cluster_.types[t];
  time.comm = traffic.bytes / type.network + traffic.messages * type.latency;
  return time;
}

double CostModel::StageMemoryBytes(int first, int last) const {
  return memory_bytes_[last + 1] - memory_bytes_[first] + 2 * batch_ * layers_[first].act_in_bytes;
}

double CostModel::StageSeconds(int first, int last, int t) const {
  if (!CanHold(first, last, t)) return kInfinity;
  return Stage(first, last, t).total();
}

int64_t CostModel::MinUnits(double x, int t, double e) const {
  const config::ResourceType& type = cluster_.types[t];
  const double beta = type.dp_loss;
  if (!std::isfinite(x) || ExecSeconds(x, beta, type.units) > e) return 0;
  // ET(k) <= e  <=>  k >= x (1 - beta) / (e - x beta); start there and correct rounding.
  double guess = e > x * beta ? std::ceil(x * (1 - beta) / (e - x * beta)) : type.units;
  int64_t k = static_cast<int64_t>(std::clamp(guess, 1.0, static_cast<double>(type.units)));
  while (k > 1 && ExecSeconds(x, beta, k - 1) <= e) --k;
  while (ExecSeconds(x, beta, k) > e) ++k;  // terminates: ET(units) <= e
  return k;
}

int64_t CostModel::MaxStageUnits(int first, int t) const {
  const int64_t units = cluster_.types[t].units;
  const int64_t cap = workload_.first_stage_max_units;
  return first == 0 && cap > 0 ? std::min(units, cap) : units;
}

int64_t CostModel::MinStageUnits(int first, int last, double x, int t, double e) const {
  if (first == 0 && last < workload_.first_stage_through) return 0;
  const int64_t k = MinUnits(x, t, e);
  return k > MaxStageUnits(first, t) ? 0 : k;
}

}  // namespace heterps::cost
