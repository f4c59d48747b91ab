#include "heterps/launcher/region_windows.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"

namespace heterps::launcher {

RegionWindows::RegionWindows(const RegionWindowsOptions& options, RegionMailbox& mailbox)
    : o_(options), mailbox_(mailbox) {}

RegionWindows::~RegionWindows() {
  if (in_flight_ != nullptr && in_flight_->thread.joinable()) in_flight_->thread.join();
}

absl::Status RegionWindows::Begin(ps::PsClient* servers, worker::DeltaTables tables,
                                  int64_t total_steps) {
  if (o_.regions < 2 || o_.self < 0 || o_.self >= o_.regions || o_.sync_steps < 1 ||
      o_.delay < 0 || o_.delay > 1 || !(o_.threshold >= 0) || total_steps < 0 ||
      o_.hub < -1 || o_.hub >= o_.regions) {
    return absl::InvalidArgumentError(absl::StrCat(
        "across regions: region ", o_.self, " of ", o_.regions, ", sync steps ", o_.sync_steps,
        " (needs >= 1), delay ", o_.delay, " (0 or 1 windows), threshold ", o_.threshold,
        " (needs >= 0), ", total_steps, " steps, hub ", o_.hub, " (-1 or a region)"));
  }
  servers_ = servers;
  tables_ = std::move(tables);
  total_ = total_steps;
  HETERPS_RETURN_IF_ERROR(servers_->TrackDeltas());
  RegionMessage hello;
  hello.window = 0;
  hello.from = o_.self;
  hello.total_steps = total_steps;
  hello.sync_steps = o_.sync_steps;
  hello.delay = o_.delay;
  hello.threshold = o_.threshold;
  hello.hub = o_.hub;
  // The hello names the tables (with no rows): the regions must train the same model.
  hello.deltas.sparse.resize(tables_.sparse.size());
  hello.deltas.dense.resize(tables_.dense.size());
  HETERPS_ASSIGN_OR_RETURN(std::vector<RegionMessage> all,
                           Exchange(hello, absl::Now() + o_.timeout));
  longest_ = 0;
  for (const RegionMessage& m : all) {
    if (m.sync_steps != hello.sync_steps || m.delay != hello.delay ||
        m.threshold != hello.threshold || m.hub != hello.hub) {
      const auto hub = [this](int h) { return h < 0 ? std::string("none") : Name(h); };
      return absl::FailedPreconditionError(absl::StrCat(
          Name(m.from), " takes a window every ", m.sync_steps, " steps, delay ", m.delay,
          ", threshold ", m.threshold, ", hub ", hub(m.hub), "; this region every ",
          hello.sync_steps, ", delay ", hello.delay, ", threshold ", hello.threshold, ", hub ",
          hub(hello.hub),
          ": every region's --sync-steps, --sync-delay, --sync-threshold and --sync-hub must "
          "agree"));
    }
    longest_ = std::max(longest_, m.total_steps);
  }
  return absl::OkStatus();
}

absl::Status RegionWindows::CheckAgainst(const RegionMessage& got, const RegionMessage& mine,
                                         int from) const {
  if (got.deltas.sparse.size() != mine.deltas.sparse.size() ||
      got.deltas.dense.size() != mine.deltas.dense.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Name(from), "'s window ", mine.window, " covers ", got.deltas.sparse.size(),
        " tables and ", got.deltas.dense.size(), " dense blocks, this region's ",
        mine.deltas.sparse.size(), " and ", mine.deltas.dense.size(),
        ": the regions train different models"));
  }
  if (got.flush != mine.flush) {
    const auto kind = [](bool flush) { return flush ? "of the final flush" : "of a K-th step"; };
    return absl::FailedPreconditionError(absl::StrCat(
        Name(from), "'s window ", mine.window, " is ", kind(got.flush), ", this region's ",
        kind(mine.flush), ": the regions disagree on the windows"));
  }
  // Through a hub only the hub sends merges; peer to peer, no one does.
  const bool merge = o_.hub >= 0 && from == o_.hub;
  if (mine.window > 0 && got.merge != merge) {
    return absl::FailedPreconditionError(absl::StrCat(
        Name(from), "'s window ", mine.window, got.merge ? " is a hub's merge" : " is its own",
        ", where this region expects ", merge ? "the hub's merge" : "its own export",
        ": the regions disagree on the hub"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<RegionMessage>> RegionWindows::Exchange(const RegionMessage& message,
                                                                   absl::Time deadline) {
  for (int to = 0; to < o_.regions; ++to) {
    if (to != o_.self) HETERPS_RETURN_IF_ERROR(mailbox_.Send(to, message, deadline));
  }
  std::vector<RegionMessage> all(o_.regions);
  for (int from = 0; from < o_.regions; ++from) {
    if (from == o_.self) {
      all[from] = message;
      continue;
    }
    HETERPS_ASSIGN_OR_RETURN(all[from], mailbox_.Receive(from, message.window, deadline));
    HETERPS_RETURN_IF_ERROR(CheckAgainst(all[from], message, from));
  }
  return all;
}

absl::StatusOr<RegionWindows::Exchanged> RegionWindows::ExchangeWindow(
    const RegionMessage& message, absl::Time deadline) {
  Exchanged out;
  if (o_.hub < 0) {
    HETERPS_ASSIGN_OR_RETURN(std::vector<RegionMessage> all, Exchange(message, deadline));
    std::vector<worker::RegionExport> exports;
    for (RegionMessage& m : all) exports.push_back(std::move(m.deltas));
    HETERPS_ASSIGN_OR_RETURN(out.window, worker::MergeExports(exports));
    out.traffic =
        worker::WindowTraffic(out.window, o_.regions, cost::SyncTopology::kPeerToPeer, 0);
    return out;
  }
  if (o_.self != o_.hub) {
    HETERPS_RETURN_IF_ERROR(mailbox_.Send(o_.hub, message, deadline));
    HETERPS_ASSIGN_OR_RETURN(RegionMessage merge, mailbox_.Receive(o_.hub, message.window, deadline));
    HETERPS_RETURN_IF_ERROR(CheckAgainst(merge, message, o_.hub));
    absl::StatusOr<worker::DeltaWindow> window =
        worker::WindowFromMerge(merge.deltas, message.deltas, o_.self, o_.regions);
    if (!window.ok()) {
      return absl::Status(window.status().code(),
                          absl::StrCat(Name(o_.hub), "'s window ", message.window, ": ",
                                       window.status().message()));
    }
    out.window = *std::move(window);
    out.traffic = std::move(merge.traffic);
    return out;
  }
  // The hub: every other region's export, the merge, and the merge to each of them.
  std::vector<worker::RegionExport> exports(o_.regions);
  for (int from = 0; from < o_.regions; ++from) {
    if (from == o_.self) {
      exports[from] = message.deltas;
      continue;
    }
    HETERPS_ASSIGN_OR_RETURN(RegionMessage m, mailbox_.Receive(from, message.window, deadline));
    HETERPS_RETURN_IF_ERROR(CheckAgainst(m, message, from));
    exports[from] = std::move(m.deltas);
  }
  HETERPS_ASSIGN_OR_RETURN(out.window, worker::MergeExports(exports));
  out.traffic = worker::WindowTraffic(out.window, o_.regions, cost::SyncTopology::kHub, o_.hub);
  RegionMessage merge = message;
  merge.merge = true;
  merge.traffic = out.traffic;
  merge.deltas = worker::MergeOnly(out.window, message.deltas);
  for (const worker::RegionExport& e : exports) merge.deltas.samples += e.samples;
  for (int to = 0; to < o_.regions; ++to) {
    if (to != o_.self) HETERPS_RETURN_IF_ERROR(mailbox_.Send(to, merge, deadline));
  }
  return out;
}

absl::Status RegionWindows::Take(int64_t samples, float threshold, bool flush) {
  RegionMessage message;
  message.window = next_window_++;
  message.flush = flush;
  message.from = o_.self;
  message.total_steps = total_;
  HETERPS_ASSIGN_OR_RETURN(message.deltas,
                           worker::ExportRegion(servers_, tables_, samples, threshold));
  auto flight = std::make_unique<InFlight>();
  InFlight* f = flight.get();
  const absl::Time deadline = absl::Now() + o_.timeout;
  f->thread = std::thread([this, f, deadline, message = std::move(message)] {
    f->exchanged = ExchangeWindow(message, deadline);
  });
  in_flight_ = std::move(flight);
  return absl::OkStatus();
}

absl::StatusOr<bool> RegionWindows::Apply() {
  if (in_flight_ == nullptr) return false;
  in_flight_->thread.join();
  const std::unique_ptr<InFlight> flight = std::move(in_flight_);
  HETERPS_RETURN_IF_ERROR(flight->exchanged.status());
  const worker::DeltaWindow& window = flight->exchanged->window;
  HETERPS_RETURN_IF_ERROR(worker::ApplyRegionWindow(servers_, window, o_.self));
  const bool sent = !window.sparse.empty() || !window.dense.empty();
  absl::MutexLock lock(&mu_);
  if (sent) ++windows_;
  for (const worker::RegionTraffic& t : flight->exchanged->traffic) {
    worker::RegionTraffic& sum = traffic_[{t.from, t.to}];
    sum.from = t.from;
    sum.to = t.to;
    sum.bytes += t.bytes;
    sum.messages += t.messages;
  }
  return sent;
}

absl::Status RegionWindows::Boundary() {
  // One window in flight at most: the one before is applied before this one is taken (a later
  // export would send its changes again).
  HETERPS_RETURN_IF_ERROR(Apply().status());
  HETERPS_RETURN_IF_ERROR(Take(window_samples_, o_.threshold, /*flush=*/false));
  window_samples_ = 0;
  if (o_.delay == 0) HETERPS_RETURN_IF_ERROR(Apply().status());
  return absl::OkStatus();
}

absl::Status RegionWindows::AfterStep(int64_t step, int64_t samples) {
  window_samples_ += samples;
  run_samples_ += samples;
  if ((step + 1) % o_.sync_steps == 0) return Boundary();
  return absl::OkStatus();
}

absl::Status RegionWindows::Finish() {
  // The longer regions' windows: this region's steps since its last window, then none.
  for (int64_t s = (total_ / o_.sync_steps + 1) * o_.sync_steps; s <= longest_;
       s += o_.sync_steps) {
    HETERPS_RETURN_IF_ERROR(Boundary());
  }
  // The flush: the window in flight, then windows of every change left until one finds none (a
  // window's rounding goes with the next), each weighted by the regions' samples over the run.
  HETERPS_RETURN_IF_ERROR(Apply().status());
  for (int flush = 0;; ++flush) {
    HETERPS_RETURN_IF_ERROR(Take(run_samples_, 0, /*flush=*/true));
    HETERPS_ASSIGN_OR_RETURN(const bool sent, Apply());
    if (!sent) return absl::OkStatus();
    if (flush == 8) {
      return absl::InternalError("across regions: the final flush still sends after 8 windows");
    }
  }
}

std::string RegionWindows::Name(int region) const {
  if (region >= 0 && region < static_cast<int>(o_.names.size())) {
    return absl::StrCat("region '", o_.names[region], "'");
  }
  return absl::StrCat("region ", region);
}

int64_t RegionWindows::windows() const {
  absl::MutexLock lock(&mu_);
  return windows_;
}

std::vector<worker::RegionTraffic> RegionWindows::traffic() const {
  absl::MutexLock lock(&mu_);
  std::vector<worker::RegionTraffic> out;
  for (const auto& [pair, t] : traffic_) out.push_back(t);
  return out;
}

int64_t RegionWindows::longest() const { return longest_; }

}  // namespace heterps::launcher
