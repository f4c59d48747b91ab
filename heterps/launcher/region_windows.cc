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
      o_.hub < -1 || o_.hub >= o_.regions ||
      !worker::EagerThresholdValid(o_.threshold, o_.eager_threshold)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "across regions: region ", o_.self, " of ", o_.regions, ", sync steps ", o_.sync_steps,
        " (needs >= 1), delay ", o_.delay, " (0 or 1 windows), threshold ", o_.threshold,
        " (needs >= 0), eager threshold ", o_.eager_threshold, " (0, or above the threshold), ",
        total_steps, " steps, hub ", o_.hub, " (-1 or a region)"));
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
  hello.eager_threshold = o_.eager_threshold;
  hello.hub = o_.hub;
  // The hello names the tables (with no rows): the regions must train the same model.
  hello.deltas.sparse.resize(tables_.sparse.size());
  hello.deltas.dense.resize(tables_.dense.size());
  HETERPS_ASSIGN_OR_RETURN(std::vector<RegionMessage> all,
                           Exchange(hello, absl::Now() + o_.timeout));
  longest_ = 0;
  for (const RegionMessage& m : all) {
    if (m.sync_steps != hello.sync_steps || m.delay != hello.delay ||
        m.threshold != hello.threshold || m.eager_threshold != hello.eager_threshold ||
        m.hub != hello.hub) {
      const auto hub = [this](int h) { return h < 0 ? std::string("none") : Name(h); };
      return absl::FailedPreconditionError(absl::StrCat(
          Name(m.from), " takes a window every ", m.sync_steps, " steps, delay ", m.delay,
          ", threshold ", m.threshold, ", eager threshold ", m.eager_threshold, ", hub ",
          hub(m.hub), "; this region every ", hello.sync_steps, ", delay ", hello.delay,
          ", threshold ", hello.threshold, ", eager threshold ", hello.eager_threshold, ", hub ",
          hub(hello.hub),
          ": every region's --sync-steps, --sync-delay, --sync-threshold, "
          "--sync-eager-threshold and --sync-hub must agree"));
    }
    longest_ = std::max(longest_, m.total_steps);
  }
  begun_ = true;
  Checkpointed(0);  // a failure before the first checkpoint restarts from step 0
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
  auto flight = std::make_unique<InFlight>();
  flight->window = message.window;
  if (const auto kept = kept_.find(message.window); kept != kept_.end()) {
    // A step trained again after a rewind: the window went and came the first time.
    flight->exchanged = kept->second;
    in_flight_ = std::move(flight);
    return absl::OkStatus();
  }
  HETERPS_ASSIGN_OR_RETURN(message.deltas,
                           worker::ExportRegion(servers_, tables_, samples, threshold));
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
  if (in_flight_->thread.joinable()) in_flight_->thread.join();
  const std::unique_ptr<InFlight> flight = std::move(in_flight_);
  if (!flight->exchanged.ok()) {
    exchange_failed_ = flight->exchanged.status();
    return exchange_failed_;
  }
  Keep(flight->window, *flight->exchanged);
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

absl::Status RegionWindows::Boundary(float threshold) {
  // One window in flight at most: the one before is applied before this one is taken (a later
  // export would send its changes again).
  HETERPS_RETURN_IF_ERROR(Apply().status());
  HETERPS_RETURN_IF_ERROR(Take(window_samples_, threshold, /*flush=*/false));
  window_samples_ = 0;
  if (o_.delay == 0) HETERPS_RETURN_IF_ERROR(Apply().status());
  return absl::OkStatus();
}

absl::Status RegionWindows::AfterStep(int64_t step, int64_t samples) {
  window_samples_ += samples;
  run_samples_ += samples;
  const std::optional<float> threshold =
      worker::WindowAfter(step + 1, o_.sync_steps, o_.threshold, o_.eager_threshold);
  return threshold ? Boundary(*threshold) : absl::OkStatus();
}

absl::Status RegionWindows::Finish() {
  // The longer regions' windows: this region's steps since its last window, then none.
  for (int64_t s = total_ + 1; s <= longest_; ++s) {
    const std::optional<float> threshold =
        worker::WindowAfter(s, o_.sync_steps, o_.threshold, o_.eager_threshold);
    if (threshold) HETERPS_RETURN_IF_ERROR(Boundary(*threshold));
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

namespace {

// What a window kept for a rewind holds: its keys and floats, bytes.
int64_t KeptBytes(const worker::DeltaWindow& window) {
  size_t bytes = 0;
  for (const worker::DeltaWindow::Sparse& t : window.sparse) {
    bytes += t.keys.size() * sizeof(uint64_t) + t.merged.size() * sizeof(float);
    for (const std::vector<float>& own : t.own) bytes += own.size() * sizeof(float);
  }
  for (const worker::DeltaWindow::Dense& d : window.dense) {
    bytes += d.merged.size() * sizeof(float);
    for (const std::vector<float>& own : d.own) bytes += own.size() * sizeof(float);
  }
  return static_cast<int64_t>(bytes);
}

}  // namespace

void RegionWindows::Keep(int64_t window, const Exchanged& exchanged) {
  if (dropped_ || kept_.count(window) > 0) return;
  const int64_t bytes = KeptBytes(exchanged.window);
  if (kept_bytes_ + bytes > o_.keep_bytes) {
    kept_.clear();
    kept_bytes_ = 0;
    dropped_ = true;
    return;
  }
  kept_.emplace(window, exchanged);
  kept_bytes_ += bytes;
}

void RegionWindows::Checkpointed(int64_t step) {
  mark_.step = step;
  mark_.next_window = next_window_;
  mark_.in_flight = in_flight_ != nullptr ? in_flight_->window : -1;
  mark_.window_samples = window_samples_;
  mark_.run_samples = run_samples_;
  {
    absl::MutexLock lock(&mu_);
    mark_.windows = windows_;
    mark_.traffic = traffic_;
  }
  // A rewind to this mark takes the window in flight again, and those after it.
  const int64_t first = mark_.in_flight >= 0 ? mark_.in_flight : next_window_;
  kept_.erase(kept_.begin(), kept_.lower_bound(first));
  if (dropped_) {
    kept_.clear();  // what was kept since the drop covers only part of the windows
    dropped_ = false;
  }
  kept_bytes_ = 0;
  for (const auto& [window, exchanged] : kept_) kept_bytes_ += KeptBytes(exchanged.window);
}

absl::Status RegionWindows::Recoverable() const {
  if (!exchange_failed_.ok()) return exchange_failed_;
  if (dropped_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "across regions: the windows exchanged since the checkpoint of step ", mark_.step,
        " outgrew ", o_.keep_bytes >> 20,
        " MB, and were not kept for a restart (checkpoint more often: --checkpoint-every)"));
  }
  return absl::OkStatus();
}

absl::Status RegionWindows::Rewind(ps::PsClient* servers, int64_t step) {
  if (!begun_) return absl::FailedPreconditionError("across regions: a rewind before the hello");
  if (in_flight_ != nullptr) {
    if (in_flight_->thread.joinable()) in_flight_->thread.join();
    const std::unique_ptr<InFlight> flight = std::move(in_flight_);
    if (!flight->exchanged.ok()) {
      exchange_failed_ = flight->exchanged.status();
    } else {
      Keep(flight->window, *flight->exchanged);
    }
  }
  HETERPS_RETURN_IF_ERROR(Recoverable());
  if (step != mark_.step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "across regions: this attempt resumed at step ", step, ", but the windows stand at the "
        "checkpoint of step ", mark_.step, " (the windows since went to the other regions)"));
  }
  servers_ = servers;
  HETERPS_RETURN_IF_ERROR(servers_->TrackDeltas());
  next_window_ = mark_.next_window;
  window_samples_ = mark_.window_samples;
  run_samples_ = mark_.run_samples;
  {
    absl::MutexLock lock(&mu_);
    windows_ = mark_.windows;
    traffic_ = mark_.traffic;
  }
  if (mark_.in_flight >= 0) {
    const auto kept = kept_.find(mark_.in_flight);
    if (kept == kept_.end()) {
      return absl::InternalError(absl::StrCat("across regions: window ", mark_.in_flight,
                                              ", in flight at the checkpoint of step ", step,
                                              ", was not kept"));
    }
    in_flight_ = std::make_unique<InFlight>();
    in_flight_->window = mark_.in_flight;
    in_flight_->exchanged = kept->second;
  }
  return absl::OkStatus();
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
