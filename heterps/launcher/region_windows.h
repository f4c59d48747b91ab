// One region's part of training across regions (docs/regions.md, "GEO across processes"): each
// region is a job of its own (its coordinator, parameter servers and stages, its data), and its
// coordinator exchanges GEO windows of parameter deltas with the other regions' coordinators
// every K steps. The arithmetic is worker/region_exchange.h's: every region's export of a window
// goes to every other region (peer to peer), and each region merges the exports in region order
// (MergeExports, weighted by the samples behind them) and applies the merge with its own
// (ApplyRegionWindow); the merge is formed from the same exports in every region, so every
// region's bases end on the same floats, as in the run emulated in one process
// (`heterps train --single-process --region-data`), to the bit.
//
// The messages go through a RegionMailbox (rpc/region_gateway.h over gRPC; tests: in process).
//
//   RegionWindows windows(options, mailbox);
//   HETERPS_RETURN_IF_ERROR(windows.Begin(&servers, worker::ModelDeltaTables(spec), total));
//   for (int64_t step = 0; step < total; ++step) {
//     ... the step, committed on this region's servers ...
//     HETERPS_RETURN_IF_ERROR(windows.AfterStep(step, samples));
//   }
//   HETERPS_RETURN_IF_ERROR(windows.Finish());  // every region holds the same parameters now
//
// Through a hub (`hub`), every other region sends the hub its export, the hub merges them and
// sends each region the merge (and what every link carried), and each applies it with its own:
// the same floats as peer to peer, the hub's links carrying what cost::SyncTopology::kHub prices.
//
// The windows: window 0 is the hello (every region's steps in all, exchanged before the first
// step); window w >= 1 is taken after step w K - 1 of the longest region's run (a region whose
// steps are done sends windows of no samples until the longest is done) and applied `delay`
// windows later (0: at once; 1: before step (w + 1) K, its exchange running while the region
// trains on, so a slow or cut link stalls nothing until then). With an eager threshold a window is
// also taken after each step between (worker::WindowAfter), each applied before the next is taken:
// delayed, the step after its taking. After the last, the flush:
// windows of every change left (threshold 0), weighted by each region's samples over the run,
// until one sends nothing.
//
// Recovery within the run (docs/regions.md, "Recovery"): a failed attempt of this region's job
// (a killed shard) restarts from its last checkpoint, whose servers' state holds their bases
// (ps/checkpoint.h); Checkpointed marks where the windows stood at that step, and the windows
// exchanged since are kept here, so that the steps trained again take the same windows from
// what they kept, without sending or receiving anything: the other regions only wait longer for
// this region's next window (up to their timeout) and never hear of the restart.
//
//   windows.Checkpointed(step);                 // after the checkpoint of `step` was written
//   ... an attempt fails; the next resumes from the checkpoint of `step` ...
//   HETERPS_RETURN_IF_ERROR(windows.Rewind(&new_servers, step));
//
// Thread safety: one thread calls Begin, AfterStep, Finish, Checkpointed and Rewind; the figures
// may be read from any thread. An exchange in flight runs on a thread of its own, which the
// destructor joins.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "heterps/ps/ps_client.h"
#include "heterps/worker/region_exchange.h"

namespace heterps::launcher {

// What one region sends another for a window.
struct RegionMessage {
  int64_t window = 0;       // 0: the hello; then the windows in order
  // A window of the final flush (after the last step of the longest run), not of a K-th step:
  // every region's window of a number must be of the same kind.
  bool flush = false;
  int from = 0;             // the sender's index among the regions
  int64_t total_steps = 0;  // the hello's: the sender's steps in all
  // The hello's: the sender's windows' settings, which every region's must equal.
  int64_t sync_steps = 0;
  int delay = 0;
  float threshold = 0;
  float eager_threshold = 0;
  int hub = -1;  // the region every other sends its windows to; -1: peer to peer
  // Through a hub: `deltas` is the hub's merge of the window (worker::MergeOnly), and `traffic`
  // what every link carried of it (worker::WindowTraffic), not a region's own export.
  bool merge = false;
  std::vector<worker::RegionTraffic> traffic;
  worker::RegionExport deltas;
};

// The regions' messages. Send and Receive may be called from different threads at once.
class RegionMailbox {
 public:
  virtual ~RegionMailbox() = default;
  // Delivers `message` to region `to`, retrying a peer that cannot be reached until `deadline`.
  // Errors name the region and its address.
  virtual absl::Status Send(int to, const RegionMessage& message, absl::Time deadline) = 0;
  // Region `from`'s message of window `window`, once it has come (it leaves the mailbox);
  // DeadlineExceeded naming the region when it has not by `deadline`.
  virtual absl::StatusOr<RegionMessage> Receive(int from, int64_t window, absl::Time deadline) = 0;
};

struct RegionWindowsOptions {
  int self = 0;     // this region's index among `regions`
  int regions = 2;  // every region's coordinator takes part
  std::vector<std::string> names;  // for errors; empty: "region i"
  int64_t sync_steps = 100;
  int delay = 1;          // windows; 0 or 1
  float threshold = 0;    // a row's change relative to its largest value (0: every changed row)
  // > threshold: a window after every step, of the rows passing it, between the K-th steps'
  // (worker::WindowAfter); 0: none.
  float eager_threshold = 0;
  // Through a hub (-1: peer to peer): every other region sends the hub its export, and the hub
  // sends each the merge (cost::SyncTopology::kHub), which they apply with their own.
  int hub = -1;
  absl::Duration timeout = absl::Minutes(10);  // the hello, and a window from its taking
  // The most the windows kept for a restart may hold (their keys and floats), bytes: beyond it
  // they are dropped, and a failure before the next checkpoint ends the job.
  int64_t keep_bytes = int64_t{1} << 30;
};

class RegionWindows {
 public:
  // InvalidArgument-worthy options are checked by Begin. `mailbox` must outlive this.
  RegionWindows(const RegionWindowsOptions& options, RegionMailbox& mailbox);
  ~RegionWindows();
  RegionWindows(const RegionWindows&) = delete;
  RegionWindows& operator=(const RegionWindows&) = delete;

  // Before this region's first step: its servers (tracking their deltas from here: TrackDeltas
  // is called), the tables the windows cover, and its steps in all; exchanges the hello.
  // Errors: bad options (InvalidArgument); a region whose windows' settings (sync steps, delay,
  // thresholds, hub) or tables differ from this one's (FailedPrecondition naming it); a region not
  // heard from within the timeout.
  absl::Status Begin(ps::PsClient* servers, worker::DeltaTables tables, int64_t total_steps);
  // After step `step` (0-based, in order) was committed, having trained `samples` samples.
  absl::Status AfterStep(int64_t step, int64_t samples);
  // After this region's last step: the windows the longer regions still take, then the flush.
  absl::Status Finish();
  // Whether Begin has run (its hello exchanged): a later attempt of the run rewinds instead.
  bool begun() const { return begun_; }
  // After this region's checkpoint of `step` (`step` steps done) was written: a later attempt may
  // rewind to it. Windows kept from before it are dropped.
  void Checkpointed(int64_t step);
  // At the start of an attempt that resumed from the checkpoint of `step` (0: none was written),
  // on its new servers (their bases loaded with it): the exchange in flight, if any, waited for
  // and kept; every server tracking; the windows back where they stood at `step`. Errors:
  // `step` is not the last checkpointed (FailedPrecondition: the windows since went to the other
  // regions), the windows kept were dropped (FailedPrecondition, saying why), an exchange failed
  // (its error: across regions that ends the job).
  absl::Status Rewind(ps::PsClient* servers, int64_t step);
  // Whether a failed attempt may be restarted: no exchange has failed, and the windows since the
  // last checkpoint are kept; otherwise why not.
  absl::Status Recoverable() const;

  // The windows applied that sent anything (the hello not counted).
  int64_t windows() const;
  // What every link carried (worker::WindowTraffic of every window), in order of (from, to).
  std::vector<worker::RegionTraffic> traffic() const;
  // The longest region's steps (after Begin).
  int64_t longest() const;

 private:
  // The window of the changes since the last: exported now, its exchange started. `flush`: a
  // window of the final flush.
  absl::Status Take(int64_t samples, float threshold, bool flush);
  // The window in flight, if any, waited for, merged and applied; whether it sent anything.
  absl::StatusOr<bool> Apply();
  // At a window boundary of the longest run: the window of the rows passing `threshold`.
  absl::Status Boundary(float threshold);
  // Sends `message` to every other region and receives theirs of the same window, in region
  // order (this region's own at its index).
  absl::StatusOr<std::vector<RegionMessage>> Exchange(const RegionMessage& message,
                                                      absl::Time deadline);
  // A window's exchange: peer to peer, every region's export and their merge; through the hub,
  // the hub's merge (formed there, from every export) and this region's own.
  struct Exchanged {
    worker::DeltaWindow window;
    std::vector<worker::RegionTraffic> traffic;
  };
  absl::StatusOr<Exchanged> ExchangeWindow(const RegionMessage& message, absl::Time deadline);
  // A message of `from` for window `window` checked against this region's `mine`.
  absl::Status CheckAgainst(const RegionMessage& got, const RegionMessage& mine, int from) const;
  std::string Name(int region) const;

  // The window `window`'s exchange, done, kept for a rewind (unless the kept windows outgrow
  // keep_bytes).
  void Keep(int64_t window, const Exchanged& exchanged);

  const RegionWindowsOptions o_;
  RegionMailbox& mailbox_;
  ps::PsClient* servers_ = nullptr;
  worker::DeltaTables tables_;
  bool begun_ = false;
  int64_t total_ = 0, longest_ = 0, next_window_ = 1;
  int64_t window_samples_ = 0, run_samples_ = 0;

  struct InFlight {
    int64_t window = 0;
    std::thread thread;  // not joinable: a kept window, done
    absl::StatusOr<Exchanged> exchanged = absl::UnknownError("not done");
  };
  std::unique_ptr<InFlight> in_flight_;

  // Where the windows stood at the last checkpoint, and the windows exchanged since.
  struct Mark {
    int64_t step = 0, next_window = 1, in_flight = -1;  // -1: none in flight
    int64_t window_samples = 0, run_samples = 0, windows = 0;
    std::map<std::pair<int, int>, worker::RegionTraffic> traffic;
  };
  Mark mark_;
  std::map<int64_t, Exchanged> kept_;
  int64_t kept_bytes_ = 0;
  bool dropped_ = false;          // the windows since the mark outgrew keep_bytes
  absl::Status exchange_failed_;  // an exchange's error: the run across regions cannot go on

  mutable absl::Mutex mu_;
  int64_t windows_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::pair<int, int>, worker::RegionTraffic> traffic_ ABSL_GUARDED_BY(mu_);
};

}  // namespace heterps::launcher
