#include "heterps/worker/region_exchange.h"

#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"

namespace heterps::worker {
namespace {

absl::Status InRegion(int r, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("region ", r, ": ", status.message()));
}

// Adds `parts` to `into`'s pending updates, as accumulating pushes of the same parts.
absl::Status AddParts(ps::PsClient* into, const ps::PendingParts& parts) {
  std::vector<ps::Ticket> tickets;
  for (const ps::PendingParts::Sparse& p : parts.sparse) {
    tickets.push_back(into->AccumulateSparse(p.table, p.keys, p.grads, p.part));
  }
  for (const ps::PendingParts::Dense& p : parts.dense) {
    tickets.push_back(into->AccumulateDense(p.table, p.block, p.grads, p.part));
  }
  absl::Status status;
  for (ps::Ticket t : tickets) status.Update(into->Wait(t));
  return status;
}

int64_t Bytes(const ps::PendingParts& parts) {
  int64_t bytes = 0;
  for (const ps::PendingParts::Sparse& p : parts.sparse) {
    bytes +=
        static_cast<int64_t>(p.keys.size() * sizeof(uint64_t) + p.grads.size() * sizeof(float));
  }
  for (const ps::PendingParts::Dense& p : parts.dense) {
    bytes += static_cast<int64_t>(p.grads.size() * sizeof(double));
  }
  return bytes;
}

int64_t Messages(const ps::PendingParts& parts) {
  return static_cast<int64_t>(parts.sparse.size() + parts.dense.size());
}

}  // namespace

absl::Status ExchangeParts(absl::Span<ps::PsClient* const> regions, cost::SyncTopology topology,
                           int hub, std::vector<RegionTraffic>* traffic) {
  const int n = static_cast<int>(regions.size());
  if (topology == cost::SyncTopology::kHub && (hub < 0 || hub >= n)) {
    return absl::InvalidArgumentError(absl::StrCat("hub ", hub, " of ", n, " regions"));
  }
  std::vector<ps::PendingParts> parts(n);
  for (int r = 0; r < n; ++r)
    HETERPS_RETURN_IF_ERROR(InRegion(r, regions[r]->ExportPending(&parts[r])));
  std::map<std::pair<int, int>, RegionTraffic> carried;
  const auto send = [&](int from, int to, const ps::PendingParts& what) {
    RegionTraffic& t = carried[{from, to}];
    t.from = from;
    t.to = to;
    t.bytes += Bytes(what);
    t.messages += Messages(what);
  };
  for (int to = 0; to < n; ++to) {
    for (int from = 0; from < n; ++from) {
      if (from == to) continue;
      HETERPS_RETURN_IF_ERROR(InRegion(to, AddParts(regions[to], parts[from])));
      if (topology == cost::SyncTopology::kPeerToPeer || from == hub || to == hub) {
        send(from, to, parts[from]);
      } else {
        send(hub, to, parts[from]);  // through the hub, which got them once (to == hub)
      }
    }
  }
  if (traffic != nullptr) {
    traffic->clear();
    for (const auto& [pair, t] : carried) {
      if (t.messages > 0) traffic->push_back(t);
    }
  }
  return absl::OkStatus();
}

}  // namespace heterps::worker
