// The links between regions (docs/cost_model.md, "Links between regions"): what a plan sends
// across them and what that takes and costs. Part of CostModel (cost_model.h).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/cost/cost_model.h"

namespace heterps::cost {

absl::Status CostModel::IndexLinks() {
  regions_ = cluster_.Regions();
  const int r = num_regions();
  region_of_.assign(cluster_.types.size(), -1);
  for (size_t t = 0; t < cluster_.types.size(); ++t) {
    const auto it = std::find(regions_.begin(), regions_.end(), cluster_.types[t].region);
    if (it != regions_.end()) region_of_[t] = static_cast<int>(it - regions_.begin());
  }
  link_of_.assign(static_cast<size_t>(r) * r, -1);
  for (int a = 0; a < r; ++a) {
    for (int b = 0; b < r; ++b) {
      if (a == b) continue;
      const config::RegionLink* link = cluster_.FindLink(regions_[a], regions_[b]);
      if (link == nullptr) {
        // A spec read from a file has every link (config::ParseClusterSpec); one built in code
        // may lack one.
        return absl::InvalidArgumentError(absl::StrCat(
            "cluster '", cluster_.name, "' has no link from region '", regions_[a], "' to '",
            regions_[b], "' (links: bandwidth_gbps, latency_ms, egress_per_gb)"));
      }
      link_of_[a * r + b] = static_cast<int>(link - cluster_.links.data());
    }
  }
  return absl::OkStatus();
}

bool WanLoad::empty() const {
  return std::all_of(bytes.begin(), bytes.end(), [](double v) { return v == 0; }) &&
         std::all_of(messages.begin(), messages.end(), [](double v) { return v == 0; });
}

WanLoad CostModel::NoWanLoad() const {
  const size_t pairs = regions_.size() * regions_.size();
  return {std::vector<double>(pairs, 0.0), std::vector<double>(pairs, 0.0)};
}

void CostModel::AddBoundaryLoad(int last, int t, int u, WanLoad* load) const {
  const int a = region_of_[t], b = region_of_[u];
  if (a == b || a < 0 || b < 0 || last + 1 >= num_layers()) return;
  const int r = num_regions();
  load->bytes[a * r + b] += batch_ * layers_[last].act_out_bytes;   // the activations
  load->bytes[b * r + a] += batch_ * layers_[last].grad_out_bytes;  // their gradients
  load->messages[a * r + b] += 1;
  load->messages[b * r + a] += 1;
}

void CostModel::AddServerLoad(int first, int last, int t, int ps_type, WanLoad* load) const {
  if (ps_type < 0) return;
  const int a = region_of_[t], c = region_of_[ps_type];
  if (a == c || a < 0 || c < 0) return;
  const int r = num_regions();
  // sparse_bytes_ counts per looked-up row 2 row bytes + 2 keys: the pull's key and the push's
  // key and gradient go out, the pulled row comes back; a GPU tier's stage moves its misses alone.
  const double sparse = sparse_bytes_[last + 1] - sparse_bytes_[first];
  const double keys = pull_keys_bytes_[last + 1] - pull_keys_bytes_[first];
  const double back = (sparse - 2 * keys) / 2;  // B r 4d: the pulled rows
  TierBytes rows{sparse - back, back};
  if (TierFeeds(first, t)) rows = TierRowBytes(first, last, t);
  const double dense =  // 4 w each way, where the weights go through the servers every step
      HoldsDense(first, last, t) || !workload_.dense_through_servers
          ? 0
          : (dense_bytes_[last + 1] - dense_bytes_[first]) / 2;
  load->bytes[a * r + c] += rows.sent + dense;
  load->bytes[c * r + a] += rows.received + dense;
  const double kinds =  // pull and push of each
      (rows.sent + rows.received > 0 ? 2 : 0) + (dense > 0 ? 2 : 0);
  load->messages[a * r + c] += kinds;
  load->messages[c * r + a] += kinds;
}

double CostModel::LinkTime(const WanLoad& load, size_t i) const {
  const config::RegionLink& link = cluster_.links[link_of_[i]];
  return load.bytes[i] / link.bandwidth + load.messages[i] * link.latency;
}

double CostModel::LinkSeconds(const WanLoad& load) const {
  double slowest = 0;
  for (size_t i = 0; i < link_of_.size(); ++i) {
    if (link_of_[i] < 0 || (load.bytes[i] == 0 && load.messages[i] == 0)) continue;
    slowest = std::max(slowest, LinkTime(load, i));
  }
  return slowest;
}

std::vector<CostModel::LinkUse> CostModel::LinkUses(const WanLoad& load) const {
  std::vector<LinkUse> uses;
  for (size_t i = 0; i < link_of_.size() && i < load.bytes.size(); ++i) {
    if (link_of_[i] < 0 || (load.bytes[i] == 0 && load.messages[i] == 0)) continue;
    const config::RegionLink& link = cluster_.links[link_of_[i]];
    uses.push_back({link.from, link.to, load.bytes[i], load.messages[i], LinkTime(load, i),
                    load.bytes[i] * link.egress_per_byte});
  }
  return uses;
}

std::string CostModel::DescribeSlowestLink(const WanLoad& load) const {
  const std::vector<LinkUse> uses = LinkUses(load);
  const auto slowest =
      std::max_element(uses.begin(), uses.end(),
                       [](const LinkUse& a, const LinkUse& b) { return a.seconds < b.seconds; });
  if (slowest == uses.end()) return "";
  const config::RegionLink& link = *cluster_.FindLink(slowest->from, slowest->to);
  return absl::StrFormat(
      "the link from %s to %s (%.3g MB and %g messages per batch at %g Gbit/s, %g ms one way)",
      link.from, link.to, slowest->bytes / 1e6, slowest->messages, link.bandwidth * 8 / 1e9,
      link.latency * 1e3);
}

double CostModel::EgressUsdPerBatch(const WanLoad& load) const {
  double usd = 0;
  for (size_t i = 0; i < link_of_.size(); ++i) {
    if (link_of_[i] >= 0) usd += load.bytes[i] * cluster_.links[link_of_[i]].egress_per_byte;
  }
  return usd;
}

}  // namespace heterps::cost
