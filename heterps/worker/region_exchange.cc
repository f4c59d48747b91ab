#include "heterps/worker/region_exchange.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/worker/stage.h"

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

// The links of `carried` that carried anything, in order of (from, to), into `traffic`.
void Report(const std::map<std::pair<int, int>, RegionTraffic>& carried,
            std::vector<RegionTraffic>* traffic) {
  if (traffic == nullptr) return;
  traffic->clear();
  for (const auto& [pair, t] : carried) {
    if (t.messages > 0) traffic->push_back(t);
  }
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
  Report(carried, traffic);
  return absl::OkStatus();
}

DeltaTables DeltaTablesOf(ps::InProcessPsClient& servers) {
  DeltaTables tables;
  for (const auto& [id, table] : servers.Tables(0).sparse) tables.sparse.push_back(id);
  for (int s = 0; s < servers.num_servers(); ++s) {  // a dense table lives on one server
    for (const auto& [id, table] : servers.Tables(s).dense) {
      for (int b = 0; b < table->num_blocks(); ++b) tables.dense.push_back({id, b});
    }
  }
  return tables;
}

DeltaTables ModelDeltaTables(const config::ModelSpec& spec) {
  DeltaTables tables;
  int embeddings = 0, fc = 0;
  for (const config::LayerSpec& layer : spec.layers) {
    if (layer.kind == config::LayerKind::kEmbedding) tables.sparse.push_back(embeddings++);
    if (layer.kind == config::LayerKind::kFc) tables.dense.push_back({kDenseTable, fc++});
  }
  return tables;
}

absl::StatusOr<RegionExport> ExportRegion(ps::PsClient* region, const DeltaTables& tables,
                                          int64_t samples, float threshold) {
  if (samples < 0) {
    return absl::InvalidArgumentError(absl::StrCat("a region's samples: ", samples, " < 0"));
  }
  RegionExport out;
  out.samples = samples;
  for (int table : tables.sparse) {
    RegionExport::Sparse& s = out.sparse.emplace_back();
    s.table = table;
    if (samples == 0) continue;
    HETERPS_RETURN_IF_ERROR(region->ExportWindow(table, threshold, &s.keys, &s.deltas));
    if (!s.keys.empty()) s.dim = static_cast<int>(s.deltas.size() / s.keys.size());
  }
  for (const auto& [table, block] : tables.dense) {
    RegionExport::Dense& d = out.dense.emplace_back();
    d.table = table;
    d.block = block;
    if (samples == 0) continue;
    HETERPS_RETURN_IF_ERROR(region->ExportDenseWindow(table, block, threshold, &d.delta));
  }
  return out;
}

absl::StatusOr<DeltaWindow> MergeExports(absl::Span<const RegionExport> exports) {
  const int n = static_cast<int>(exports.size());
  int64_t total = 0;
  for (int r = 0; r < n; ++r) {
    const RegionExport& e = exports[r];
    if (e.samples < 0) {
      return absl::InvalidArgumentError(absl::StrCat("region ", r, "'s samples: ", e.samples, " < 0"));
    }
    bool same = e.sparse.size() == exports[0].sparse.size() &&
                e.dense.size() == exports[0].dense.size();
    for (size_t t = 0; same && t < e.sparse.size(); ++t) {
      same = e.sparse[t].table == exports[0].sparse[t].table &&
             e.sparse[t].deltas.size() == e.sparse[t].keys.size() * e.sparse[t].dim;
    }
    for (size_t b = 0; same && b < e.dense.size(); ++b) {
      same = e.dense[b].table == exports[0].dense[b].table &&
             e.dense[b].block == exports[0].dense[b].block;
    }
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "region ", r, "'s window holds other tables or blocks than region 0's (",
          e.sparse.size(), " tables and ", e.dense.size(), " blocks against ",
          exports[0].sparse.size(), " and ", exports[0].dense.size(), ")"));
    }
    total += e.samples;
  }
  if (total == 0) return absl::InvalidArgumentError("no region trained a sample in the window");
  DeltaWindow window;
  for (const RegionExport& e : exports) window.weights.push_back(static_cast<double>(e.samples) / total);
  for (size_t b = 0; n > 0 && b < exports[0].dense.size(); ++b) {
    DeltaWindow::Dense d;
    d.table = exports[0].dense[b].table;
    d.block = exports[0].dense[b].block;
    size_t size = 0;
    for (int r = 0; r < n; ++r) {
      d.own.push_back(exports[r].dense[b].delta);
      size = std::max(size, d.own[r].size());
    }
    if (size == 0) continue;
    std::vector<double> sum(size, 0.0);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < d.own[r].size(); ++i) sum[i] += window.weights[r] * d.own[r][i];
    }
    d.merged.assign(sum.begin(), sum.end());
    window.dense.push_back(std::move(d));
  }
  for (size_t t = 0; n > 0 && t < exports[0].sparse.size(); ++t) {
    DeltaWindow::Sparse w;
    w.table = exports[0].sparse[t].table;
    for (int r = 0; r < n; ++r) {
      const RegionExport::Sparse& e = exports[r].sparse[t];
      w.keys.insert(w.keys.end(), e.keys.begin(), e.keys.end());
      if (!e.keys.empty()) w.dim = e.dim;
    }
    if (w.keys.empty()) continue;
    std::sort(w.keys.begin(), w.keys.end());
    w.keys.erase(std::unique(w.keys.begin(), w.keys.end()), w.keys.end());
    for (int r = 0; r < n; ++r) {
      const RegionExport::Sparse& e = exports[r].sparse[t];
      if (!e.keys.empty() && e.dim != w.dim) {
        return absl::InvalidArgumentError(absl::StrCat("region ", r, "'s rows of table ", w.table,
                                                       " have ", e.dim, " floats, not ", w.dim));
      }
    }
    const size_t floats = w.keys.size() * w.dim;
    std::vector<double> sum(floats, 0.0);
    for (int r = 0; r < n; ++r) {
      const RegionExport::Sparse& e = exports[r].sparse[t];
      std::vector<float>& own = w.own.emplace_back(floats, 0.0f);
      w.rows.push_back(static_cast<int64_t>(e.keys.size()));
      for (size_t i = 0; i < e.keys.size(); ++i) {
        const size_t at = static_cast<size_t>(
            std::lower_bound(w.keys.begin(), w.keys.end(), e.keys[i]) - w.keys.begin());
        std::copy_n(e.deltas.begin() + i * w.dim, w.dim, own.begin() + at * w.dim);
      }
      // Every key of every region, in region order: the same sums wherever they are formed.
      for (size_t i = 0; i < floats; ++i) sum[i] += window.weights[r] * own[i];
    }
    w.merged.assign(sum.begin(), sum.end());
    window.sparse.push_back(std::move(w));
  }
  return window;
}

RegionExport MergeOnly(const DeltaWindow& window, const RegionExport& shape) {
  RegionExport out;
  for (const RegionExport::Sparse& s : shape.sparse) {
    RegionExport::Sparse& m = out.sparse.emplace_back();
    m.table = s.table;
    m.dim = s.dim;
    for (const DeltaWindow::Sparse& w : window.sparse) {
      if (w.table != s.table) continue;
      m.dim = w.dim;
      m.keys = w.keys;
      m.deltas = w.merged;
    }
  }
  for (const RegionExport::Dense& d : shape.dense) {
    RegionExport::Dense& m = out.dense.emplace_back();
    m.table = d.table;
    m.block = d.block;
    for (const DeltaWindow::Dense& w : window.dense) {
      if (w.table == d.table && w.block == d.block) m.delta = w.merged;
    }
  }
  return out;
}

absl::StatusOr<DeltaWindow> WindowFromMerge(const RegionExport& merge, const RegionExport& own,
                                            int self, int regions) {
  if (self < 0 || self >= regions || merge.sparse.size() != own.sparse.size() ||
      merge.dense.size() != own.dense.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the hub's merge holds ", merge.sparse.size(), " tables and ", merge.dense.size(),
        " blocks, this region's window ", own.sparse.size(), " and ", own.dense.size()));
  }
  DeltaWindow window;
  for (size_t b = 0; b < merge.dense.size(); ++b) {
    const RegionExport::Dense& m = merge.dense[b];
    const RegionExport::Dense& mine = own.dense[b];
    if (m.table != mine.table || m.block != mine.block ||
        (!mine.delta.empty() && mine.delta.size() != m.delta.size())) {
      return absl::InvalidArgumentError(absl::StrCat("the hub's merge of block ", b,
                                                     " does not fit this region's"));
    }
    if (m.delta.empty()) continue;  // no region sent it
    DeltaWindow::Dense& d = window.dense.emplace_back();
    d.table = m.table;
    d.block = m.block;
    d.merged = m.delta;
    d.own.resize(regions);
    d.own[self] = mine.delta;
  }
  for (size_t t = 0; t < merge.sparse.size(); ++t) {
    const RegionExport::Sparse& m = merge.sparse[t];
    const RegionExport::Sparse& mine = own.sparse[t];
    if (m.table != mine.table || m.deltas.size() != m.keys.size() * m.dim ||
        (!mine.keys.empty() && mine.dim != m.dim)) {
      return absl::InvalidArgumentError(absl::StrCat("the hub's merge of table ", m.table,
                                                     " does not fit this region's"));
    }
    if (m.keys.empty()) continue;  // no region sent rows of it
    DeltaWindow::Sparse& w = window.sparse.emplace_back();
    w.table = m.table;
    w.dim = m.dim;
    w.keys = m.keys;
    w.merged = m.deltas;
    w.own.resize(regions);
    w.rows.assign(regions, 0);
    w.rows[self] = static_cast<int64_t>(mine.keys.size());
    std::vector<float>& part = w.own[self];
    part.assign(w.keys.size() * w.dim, 0.0f);
    for (size_t i = 0; i < mine.keys.size(); ++i) {
      const auto at = std::lower_bound(w.keys.begin(), w.keys.end(), mine.keys[i]);
      if (at == w.keys.end() || *at != mine.keys[i]) {
        return absl::InvalidArgumentError(absl::StrCat("the hub's merge of table ", m.table,
                                                       " lacks this region's key ", mine.keys[i]));
      }
      std::copy_n(mine.deltas.begin() + i * w.dim, w.dim,
                  part.begin() + static_cast<size_t>(at - w.keys.begin()) * w.dim);
    }
  }
  return window;
}

absl::StatusOr<DeltaWindow> TakeDeltaWindow(absl::Span<ps::PsClient* const> regions,
                                            const DeltaTables& tables,
                                            absl::Span<const int64_t> samples, float threshold) {
  const int n = static_cast<int>(regions.size());
  if (static_cast<int>(samples.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(samples.size(), " sample counts for ", n, " regions"));
  }
  std::vector<RegionExport> exports;
  for (int r = 0; r < n; ++r) {
    absl::StatusOr<RegionExport> e = ExportRegion(regions[r], tables, samples[r], threshold);
    if (!e.ok()) return InRegion(r, e.status());
    exports.push_back(*std::move(e));
  }
  return MergeExports(exports);
}

absl::Status ApplyRegionWindow(ps::PsClient* region, const DeltaWindow& window, int r) {
  for (const DeltaWindow::Sparse& w : window.sparse) {
    if (r < 0 || r >= static_cast<int>(w.own.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("region ", r, " applies a window of ", w.own.size(), " regions"));
    }
  }
  for (const DeltaWindow::Dense& d : window.dense) {
    if (r < 0 || r >= static_cast<int>(d.own.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("region ", r, " applies a window of ", d.own.size(), " regions"));
    }
  }
  for (const DeltaWindow::Sparse& w : window.sparse) {
    HETERPS_RETURN_IF_ERROR(region->ApplyWindow(w.table, w.keys, w.merged, w.own[r]));
  }
  for (const DeltaWindow::Dense& d : window.dense) {
    const std::vector<float> zeros(d.own[r].empty() ? d.merged.size() : 0, 0.0f);
    HETERPS_RETURN_IF_ERROR(region->ApplyDenseWindow(d.table, d.block, d.merged,
                                                     d.own[r].empty() ? zeros : d.own[r]));
  }
  return absl::OkStatus();
}

std::vector<RegionTraffic> WindowTraffic(const DeltaWindow& window, int n,
                                         cost::SyncTopology topology, int hub) {
  std::map<std::pair<int, int>, RegionTraffic> carried;
  const auto send = [&](int from, int to, int64_t bytes) {
    RegionTraffic& t = carried[{from, to}];
    t.from = from;
    t.to = to;
    t.bytes += bytes;
    t.messages += 1;
  };
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      if (from == to) continue;
      const bool own = topology == cost::SyncTopology::kPeerToPeer || to == hub;
      if (!own && from != hub) continue;
      // Its own rows and blocks, or (the hub to another region) the merge.
      for (const DeltaWindow::Sparse& w : window.sparse) {
        const int64_t rows = own ? w.rows[from] : static_cast<int64_t>(w.keys.size());
        if (rows > 0) {
          send(from, to, rows * static_cast<int64_t>(sizeof(uint64_t) + sizeof(float) * w.dim));
        }
      }
      for (const DeltaWindow::Dense& d : window.dense) {
        const size_t floats = own ? d.own[from].size() : d.merged.size();
        if (floats > 0) send(from, to, static_cast<int64_t>(floats * sizeof(float)));
      }
    }
  }
  std::vector<RegionTraffic> traffic;
  Report(carried, &traffic);
  return traffic;
}

absl::Status ApplyDeltaWindow(absl::Span<ps::PsClient* const> regions, const DeltaWindow& window,
                              cost::SyncTopology topology, int hub,
                              std::vector<RegionTraffic>* traffic) {
  const int n = static_cast<int>(regions.size());
  if (topology == cost::SyncTopology::kHub && (hub < 0 || hub >= n)) {
    return absl::InvalidArgumentError(absl::StrCat("hub ", hub, " of ", n, " regions"));
  }
  for (const DeltaWindow::Sparse& w : window.sparse) {
    if (static_cast<int>(w.own.size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("a window of ", w.own.size(), " regions applied to ", n));
    }
  }
  for (int r = 0; r < n; ++r) {
    HETERPS_RETURN_IF_ERROR(InRegion(r, ApplyRegionWindow(regions[r], window, r)));
  }
  if (traffic != nullptr) *traffic = WindowTraffic(window, n, topology, hub);
  return absl::OkStatus();
}

std::optional<float> WindowAfter(int64_t steps, int64_t sync_steps, float threshold, float eager) {
  if (steps % sync_steps == 0) return threshold;
  if (eager > 0) return eager;
  return std::nullopt;
}

bool EagerThresholdValid(float threshold, float eager) { return eager == 0 || eager > threshold; }

}  // namespace heterps::worker
