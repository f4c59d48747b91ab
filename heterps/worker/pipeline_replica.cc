// One class, the replica's engine: the compute thread, its queues and the micro-batches in flight
// share state that only the compute thread touches. Kept in one file (over 500 lines) so that
// what runs on which thread is read in one place.
#include "heterps/worker/pipeline_replica.h"

#include <atomic>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/dense/default_backends.h"
#include "heterps/gpu/device.h"
#include "heterps/ps/gpu/gpu_tier.h"
#include "heterps/worker/gradient_policy.h"
#include "heterps/worker/shard_reader.h"

namespace heterps::worker {
namespace {

// Evaluation reads this many micro-batches at a time.
constexpr int kEvalChunk = 16;

// A RunStep or Evaluate waiting for its micro-batches.
struct Waiter {
  absl::Mutex mu;
  int64_t pending ABSL_GUARDED_BY(mu) = 0;
  // Training: each micro-batch's blocks' losses, by its first block (so that they are added in
  // block order, whatever order the micro-batches finish in).
  std::map<int64_t, std::vector<double>> block_losses ABSL_GUARDED_BY(mu);
  absl::Status status ABSL_GUARDED_BY(mu);
  std::vector<float> probabilities ABSL_GUARDED_BY(mu), labels ABSL_GUARDED_BY(mu);

  void Done(const absl::Status& s, int64_t first_block = 0, absl::Span<const double> losses = {}) {
    absl::MutexLock lock(&mu);
    status.Update(s);
    if (!losses.empty()) block_losses[first_block].assign(losses.begin(), losses.end());
    --pending;
  }
  // Until every micro-batch is done, `stop` turns true, or the caller gives up.
  absl::Status Wait(const std::atomic<bool>& stop, const PipelineReplica::Cancelled& cancelled) {
    absl::MutexLock lock(&mu);
    while (pending > 0 && !stop.load() && !(cancelled && cancelled())) {
      mu.AwaitWithTimeout(
          absl::Condition(
              +[](Waiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu) { return w->pending <= 0; },
              this),
          absl::Milliseconds(100));
    }
    if (pending > 0) return absl::CancelledError("the replica is stopping, or the caller left");
    return status;
  }
};

// A task's outcome, shared by the compute thread that runs it and the caller that waits for it:
// the caller may give up and return first.
struct Outcome {
  absl::Notification done;
  absl::Status status;
};

}  // namespace

class PipelineReplica::Impl {
 public:
  Impl(const JobSpec& job, int stage, int replica, ps::PsClient* client, Downstream* downstream,
       DensePeers* peers)
      : job_(job),
        stage_index_(stage),
        replica_(replica),
        name_(absl::StrCat("stage ", stage, " replica ", replica)),
        client_(client),
        downstream_(downstream),
        peers_(peers) {}

  absl::Status Init() {
    const sched::RunStage& mine = job_.plan.stages[stage_index_];
    HETERPS_ASSIGN_OR_RETURN(backend_,
                             dense::DefaultBackends().Create(ReplicaDevice(mine.device, replica_),
                                                             {0, job_.settings.gpu_tf32}));
    HETERPS_RETURN_IF_ERROR(MakeTier());
    HETERPS_ASSIGN_OR_RETURN(
        stage_, Stage::Create(job_.model, mine.first, mine.last, client_, backend_.get()));
    // The tier feeds the stage on their device where they share one; a synchronous step's rows
    // then take one micro-batch of one block (Stage::UseDeviceTier).
    if (tier_ != nullptr && tier_device_ == nullptr &&
        (job_.settings.mode != Consistency::kSync ||
         (Parts(job_.batch_size()) == 1 &&
          StepBlocks(job_.batch_size(), job_.settings.block_size) == 1))) {
      device_path_ = stage_->UseDeviceTier(tier_.get());
    }
    const bool last = stage_index_ + 1 == job_.stages();
    if (stage_->has_loss() != last) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage ", stage_index_, " (layers ", mine.first, "..", mine.last, ") ",
          last ? "is the last but has no loss layer" : "has the loss layer but is not the last"));
    }
    if (!last &&
        (downstream_ == nullptr || downstream_->replicas() != job_.replicas(stage_index_ + 1))) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": the next stage's replicas are not all known"));
    }
    if (peers_ != nullptr && job_.settings.dense_on_replicas() && !stage_->dense_blocks().empty()) {
      dense_ = std::make_unique<DenseGroup>(kDenseTable, stage_->dense_blocks(),
                                            job_.settings.tables.dense_optimizer, replica_,
                                            job_.replicas(stage_index_), peers_, client_);
      // A GPU stage of one replica whose steps are one block holds them on its device, with
      // their optimizer (docs/gpu.md, "Dense parameters held on the device").
      hold_dense_ = job_.replicas(stage_index_) == 1 && stage_->can_hold_dense() &&
                    StepBlocks(job_.batch_size(), job_.settings.block_size) == 1;
    }
    if (job_.settings.mode == Consistency::kSync) stage_->set_block_rows(job_.settings.block_size);
    policy_ = MakeGradientPolicy(job_.settings.mode, *stage_, dense_.get(),
                                 [this] { return stopping_.load(); });
    if (stage_index_ == 0) {
      train_reader_ =
          std::make_unique<ShardReader>(job_.Reader(replica_, data::ReaderOptions::Part::kTrain));
    }
    compute_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  const std::string& name() const { return name_; }

  void Stop() {
    if (stopping_.exchange(true)) return;
    {
      absl::MutexLock lock(&mu_);  // wakes the compute thread
    }
    if (compute_.joinable()) compute_.join();
  }

  // ---- Calls ----

  absl::StatusOr<StepOutcome> RunStep(const StepRequest& request, const Cancelled& cancelled) {
    if (stage_index_ != 0) return absl::FailedPreconditionError("RunStep goes to stage 0");
    absl::MutexLock serial(&step_mu_);
    auto batch = std::make_shared<data::Batch>();
    const absl::Time start = absl::Now();
    const double written_back = WriteBackSeconds();
    // The step's wall time, its write-back (a round's last step) aside.
    const auto ran = absl::MakeCleanup([this, start, written_back] {
      run_seconds_ = run_seconds_.load() + absl::ToDoubleSeconds(absl::Now() - start) -
                     (WriteBackSeconds() - written_back);
    });
    int64_t n = 0;
    // The bad lines of the step's pass so far, as of its own read (a read ahead into the next pass
    // starts that pass's count).
    int64_t skipped = 0;
    std::string first_bad;
    const bool read_ahead = ahead_.batch != nullptr && ahead_.epoch == request.epoch &&
                            ahead_.offset == request.offset && ahead_.count == request.count;
    if (read_ahead) {
      batch = std::move(ahead_.batch);
      n = ahead_.n;
      skipped = ahead_.skipped;
      first_bad = std::move(ahead_.first_bad);
    } else {
      HETERPS_ASSIGN_OR_RETURN(
          n, train_reader_->Take(request.epoch, request.offset, request.count, batch.get()));
      skipped = train_reader_->skipped();
      first_bad = train_reader_->first_bad();
    }
    ahead_ = Ahead();
    // The next share, read now where a tier fetches its rows ahead (an error here is left to the
    // step that reads it).
    if (tier_ != nullptr && job_.settings.tier_lookahead && request.next_count > 0) {
      auto next = std::make_shared<data::Batch>();
      absl::StatusOr<int64_t> got = train_reader_->Take(request.next_epoch, request.next_offset,
                                                        request.next_count, next.get());
      if (got.ok() && *got > 0) {
        ahead_ = {
            request.next_epoch,       request.next_offset,       request.next_count, *got, next,
            train_reader_->skipped(), train_reader_->first_bad()};
      }
    }
    read_seconds_ = read_seconds_.load() + absl::ToDoubleSeconds(absl::Now() - start);
    HETERPS_RETURN_IF_ERROR(Prefetch(batch, n, cancelled));
    auto waiter = std::make_shared<Waiter>();
    const int64_t parts = Parts(n);
    {
      absl::MutexLock lock(&waiter->mu);
      waiter->pending = parts;
    }
    const int64_t first_block = job_.ShareBlocks(replica_).first;
    for (int64_t m = 0; m < parts; ++m) {
      const auto [begin, size] = Part(n, m);
      ForwardHeader header{request.step, 0, first_block + begin / job_.settings.block_size, true,
                           request.scale};
      Enqueue(false, [this, batch, begin = begin, size = size, waiter, header] {
        LocalForward(*batch, begin, size, waiter, header);
      });
    }
    HETERPS_RETURN_IF_ERROR(waiter->Wait(stopping_, cancelled));
    // Stage 0's part of the step is complete here: end it now rather than wait for a Flush (the
    // later stages are flushed by the coordinator).
    HETERPS_RETURN_IF_ERROR(EndStep(request.step, request.write_back, cancelled));
    StepOutcome out;
    {
      absl::MutexLock lock(&waiter->mu);
      for (const auto& [block, losses] : waiter->block_losses) {
        out.block_losses.insert(out.block_losses.end(), losses.begin(), losses.end());
      }
    }
    for (double loss : out.block_losses) out.loss_sum += loss;
    out.samples = n;
    out.skipped_lines = skipped;
    out.first_bad_line = std::move(first_bad);
    return out;
  }

  absl::StatusOr<EvalOutcome> Evaluate(int64_t step, const Cancelled& cancelled) {
    if (stage_index_ != 0) return absl::FailedPreconditionError("Evaluate goes to stage 0");
    absl::MutexLock serial(&step_mu_);
    ShardReader reader(job_.Reader(replica_, data::ReaderOptions::Part::kEval));
    auto waiter = std::make_shared<Waiter>();
    const int64_t mb = job_.settings.micro_batch;
    int64_t offset = 0, sequence = 0;
    for (;;) {
      auto batch = std::make_shared<data::Batch>();
      HETERPS_ASSIGN_OR_RETURN(const int64_t n,
                               reader.Take(0, offset, mb * kEvalChunk, batch.get()));
      if (n == 0) break;
      offset += n;
      const int64_t parts = Parts(n);
      {
        absl::MutexLock lock(&waiter->mu);
        waiter->pending = parts;
      }
      for (int64_t m = 0; m < parts; ++m) {
        const auto [begin, size] = Part(n, m);
        ForwardHeader header{step, 0, sequence++, false, 0};
        Enqueue(false, [this, batch, begin = begin, size = size, waiter, header] {
          LocalForward(*batch, begin, size, waiter, header);
        });
      }
      HETERPS_RETURN_IF_ERROR(waiter->Wait(stopping_, cancelled));
    }
    EvalOutcome out;
    absl::MutexLock lock(&waiter->mu);
    out.probabilities = std::move(waiter->probabilities);
    out.labels = std::move(waiter->labels);
    out.skipped_lines = reader.skipped();
    out.first_bad_line = reader.first_bad();
    return out;
  }

  // Runs the policy's EndStep on the compute thread and waits for it; with `write_back`, then
  // the write-back of the tier and the dense parameters.
  absl::Status EndStep(int64_t step, bool write_back, const Cancelled& cancelled) {
    return OnComputeThread(true, cancelled, [this, step, write_back] {
      const absl::Time start = absl::Now();
      // A replica that ran none of the step's micro-batches (a short last step, a later stage's
      // replica the step's blocks did not reach) still takes its part in the dense exchange.
      if (dense_ != nullptr && !dense_->loaded()) HETERPS_RETURN_IF_ERROR(LoadDense());
      HETERPS_RETURN_IF_ERROR(
          policy_->EndStep(*stage_, step, /*whole=*/job_.replicas(stage_index_) == 1));
      Charge(&Impl::step_end_seconds_, start);
      return write_back ? WriteBackHere() : absl::OkStatus();
    });
  }

  absl::Status WriteBack(const Cancelled& cancelled) {
    if (tier_ == nullptr && dense_ == nullptr) return absl::OkStatus();
    return OnComputeThread(true, cancelled, [this] { return WriteBackHere(); });
  }

  // On the compute thread: the tier's rows and the dense parameters the stage holds, to the
  // servers.
  absl::Status WriteBackHere() {
    if (tier_ == nullptr && dense_ == nullptr) return absl::OkStatus();
    const absl::Time start = absl::Now();
    absl::Status status;
    if (tier_ != nullptr) status.Update(tier_->Flush());
    if (dense_ != nullptr) {
      status.Update(dense_->held() ? dense_->WriteBackHeld(*stage_)
                                   : dense_->WriteBack(stage_->dense_values()));
    }
    Charge(&Impl::write_back_seconds_, start);
    return status;
  }

  // The stage's dense parameters from the servers into the group (the stage's device, where it
  // holds them), once.
  absl::Status LoadDense() {
    if (hold_dense_) return dense_->LoadHeld(*stage_);
    return stage_->UpdateDense([this](std::vector<AlignedFloats>& v) { return dense_->Load(v); });
  }

  void OnDense(DenseMessage message) {
    if (dense_ == nullptr) {
      base::LogLine(absl::StrCat(name_, ": dropped a dense message of replica ", message.from,
                                 " (this stage's dense parameters are on the servers)"));
      return;
    }
    dense_->Deliver(std::move(message));
  }
  // A step this replica failed: the stage's other replicas stop waiting for its dense part.
  void AbortDense(int64_t step, const absl::Status& why) {
    if (dense_ != nullptr) dense_->Abort(step, why);
  }

  // Names a step's keys to the tier, on the compute thread before the step's micro-batches, and
  // the next step's where it was read ahead (ahead_), whose keys are then kept for its own
  // Prefetch (ahead_keys_, of the batch ahead_keys_batch_). The next step's names are a hint:
  // where they fail (the device's memory), the step goes on without them.
  absl::Status Prefetch(const std::shared_ptr<data::Batch>& batch, int64_t n,
                        const Cancelled& cancelled) {
    if (tier_ == nullptr || n == 0) return absl::OkStatus();
    std::shared_ptr<data::Batch> next = ahead_.batch;
    const int64_t next_n = ahead_.n;
    return OnComputeThread(false, cancelled, [this, batch, n, next, next_n] {
      const absl::Time start = absl::Now();
      if (ahead_keys_batch_ == batch) {
        std::swap(prefetch_, ahead_keys_);
      } else {
        InputActivations(*batch, 0, n, &prefetch_);
      }
      ahead_keys_batch_ = nullptr;
      absl::Status status = stage_->Prefetch(prefetch_);
      if (status.ok() && next != nullptr) {
        InputActivations(*next, 0, next_n, &ahead_keys_);
        const absl::Status named = stage_->Anticipate(ahead_keys_);
        if (named.ok()) {
          ahead_keys_batch_ = next;
        } else {
          base::LogLine(absl::StrCat(
              name_, ": the next step's rows are not fetched ahead: ", named.message()));
        }
      }
      Charge(&Impl::prefetch_seconds_, start);
      return status;
    });
  }

  double WriteBackSeconds() {
    absl::MutexLock lock(&mu_);
    return write_back_seconds_;
  }

  // Adds the time since `start` to one of the busy time's parts.
  void Charge(double Impl::*part, absl::Time start) {
    absl::MutexLock lock(&mu_);
    this->*part += absl::ToDoubleSeconds(absl::Now() - start);
  }

  // Runs `task` on the compute thread (first in line when `urgent`) and waits for its status.
  absl::Status OnComputeThread(bool urgent, const Cancelled& cancelled,
                               std::function<absl::Status()> task) {
    auto outcome = std::make_shared<Outcome>();
    Enqueue(urgent, [outcome, task = std::move(task)] {
      outcome->status = task();
      outcome->done.Notify();
    });
    while (!outcome->done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      if (stopping_ || (cancelled && cancelled())) {
        return absl::CancelledError("the replica is stopping, or the caller left");
      }
    }
    return outcome->status;
  }

  void Receive(const ForwardHeader& header, std::unique_ptr<Activations> activations,
               std::shared_ptr<Upstream> from) {
    auto in = std::make_shared<std::unique_ptr<Activations>>(std::move(activations));
    Enqueue(false, [this, header, in, from = std::move(from)] {
      RemoteForward(header, std::move(*in), from);
    });
  }

  void OnAnswer(int target, std::shared_ptr<Answer> answer) {
    Enqueue(true, [this, target, answer = std::move(answer)] { Backward(target, *answer); });
  }

  void OnDownstreamLost(int target, absl::Status why) {
    Enqueue(true, [this, target, why = std::move(why)] {
      std::vector<int64_t> lost;
      for (const auto& [tag, r] : records_) {
        if (r.downstream == target) lost.push_back(tag);
      }
      for (int64_t tag : lost) Fail(tag, why);
    });
  }

  ReplicaStats stats() {
    ReplicaStats s;
    s.micro_batches = micro_batches_.load();
    s.ps_seconds = ps_seconds_.load();
    s.read_seconds = read_seconds_.load();
    s.run_seconds = run_seconds_.load();
    s.in_flight = in_flight_.load();
    absl::MutexLock lock(&mu_);
    s.busy_seconds = busy_seconds_;
    s.prefetch_seconds = prefetch_seconds_;
    s.step_end_seconds = step_end_seconds_;
    s.write_back_seconds = write_back_seconds_;
    s.lookup_seconds = passes_.lookup;
    s.dense_seconds = passes_.dense;
    s.rows_seconds = passes_.rows;
    s.gradients_seconds = gradients_seconds_;
    s.idle_seconds = idle_seconds_;
    s.send_seconds = send_seconds_;
    s.queue_depth = static_cast<int>(urgent_.size() + normal_.size());
    s.pcie_bytes = pcie_bytes_.load();
    s.tier_hits = tier_hits_.load();
    s.tier_misses = tier_misses_.load();
    s.tier_loaded_rows = tier_loaded_.load();
    s.tier_ahead_rows = tier_ahead_.load();
    s.tier_written_back_rows = tier_written_.load();
    s.tier_feeds_stage = device_path_;
    s.dense_held = hold_dense_;
    return s;
  }

 private:
  // A micro-batch between its forward and its backward here.
  struct Record {
    int ctx = -1;
    ForwardHeader header;
    int downstream = -1;  // where it went
    // Kept until backward, at a fixed address: the stage's layers point into it.
    std::unique_ptr<Activations> in;
    std::shared_ptr<Upstream> up;  // answer upstream with up_id, or
    int64_t up_id = 0;
    std::shared_ptr<Waiter> waiter;  // tell the local RunStep or Evaluate
  };

  // Replica r of a stage on "kind:i" runs on "kind:(i + r)"; "cpu" is every replica's.
  static std::string ReplicaDevice(const std::string& device, int replica) {
    if (device.empty() || device == "cpu") return "cpu";
    const size_t colon = device.find(':');
    int index = 0;
    if (colon == std::string::npos || !absl::SimpleAtoi(device.substr(colon + 1), &index)) {
      return device;  // the registry says what is wrong with it
    }
    return absl::StrCat(device.substr(0, colon), ":", index + replica);
  }

  // Stage 0's GPU tier, in front of the client, when the job has one.
  absl::Status MakeTier() {
    const std::string& device = job_.settings.gpu_tier_device;
    if (stage_index_ != 0 || device.empty()) return absl::OkStatus();
    // The stage's own device where the tier is on it (one stream, one memory: the device path),
    // else a device of the tier's own.
    gpu::Device* on = nullptr;
    if (device == ReplicaDevice(job_.plan.stages[0].device, replica_)) on = backend_->gpu_device();
    if (on == nullptr) {
      HETERPS_ASSIGN_OR_RETURN(tier_device_, gpu::OpenDevice(device, {}));
      on = tier_device_.get();
    }
    HETERPS_ASSIGN_OR_RETURN(tier_,
                             ps::GpuTier::Create(client_, on, {job_.settings.gpu_tier_bytes}));
    const sched::RunStage& mine = job_.plan.stages[0];
    HETERPS_RETURN_IF_ERROR(
        tier_->AddTables(StageTierTables(job_.model, mine.first, mine.last, job_.settings.tables)));
    client_ = tier_.get();
    return absl::OkStatus();
  }

  // The devices' counters, for stats (on the compute thread, after a task).
  void CountDevices() {
    int64_t pcie = 0;
    if (backend_ != nullptr) {
      const dense::DeviceStats d = backend_->stats();
      pcie += d.host_to_device_bytes + d.device_to_host_bytes;
    }
    if (tier_ != nullptr) {
      const ps::GpuTierStats t = tier_->stats();
      // A device the stage shares with the tier counts its copies once (the backend's).
      if (tier_device_ != nullptr) pcie += t.host_to_device_bytes + t.device_to_host_bytes;
      tier_hits_ = t.hits;
      tier_misses_ = t.misses;
      tier_loaded_ = t.loaded_rows;
      tier_ahead_ = t.ahead_rows;
      tier_written_ = t.written_back_rows;
    }
    pcie_bytes_ = pcie;
  }

  // The next stage's replica for a micro-batch: in training, by where its first block lies in the
  // step (consecutive blocks to one replica, so that a replica's blocks make few nodes of the
  // step's tree, and every replica gets its share); in evaluation, in turn.
  int TargetOf(const ForwardHeader& header) const {
    const int k = downstream_->replicas();
    if (!header.train) return static_cast<int>(header.order % k);
    const int64_t blocks = StepBlocks(job_.batch_size(), job_.settings.block_size);
    return static_cast<int>(std::min<int64_t>(header.order * k / blocks, k - 1));
  }

  // Micro-batches of a share of n samples, and where micro-batch m lies in it.
  int64_t Parts(int64_t n) const {
    const int64_t mb = job_.settings.micro_batch;
    return (n + mb - 1) / mb;
  }
  std::pair<int64_t, int64_t> Part(int64_t n, int64_t m) const {
    const int64_t mb = job_.settings.micro_batch;
    const int64_t begin = m * mb;
    return {begin, std::min(mb, n - begin)};
  }

  // ---- The compute thread ----

  void Enqueue(bool urgent, std::function<void()> task) {
    absl::MutexLock lock(&mu_);
    (urgent ? urgent_ : normal_).push_back(std::move(task));
  }

  void Loop() {
    for (;;) {
      std::function<void()> task;
      {
        absl::MutexLock lock(&mu_);
        const absl::Time waiting = absl::Now();
        mu_.Await(absl::Condition(
            +[](Impl* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu_) {
              return w->stopping_.load() || !w->urgent_.empty() || !w->normal_.empty();
            },
            this));
        idle_seconds_ += absl::ToDoubleSeconds(absl::Now() - waiting);
        if (stopping_) return;
        std::deque<std::function<void()>>& queue = urgent_.empty() ? normal_ : urgent_;
        task = std::move(queue.front());
        queue.pop_front();
      }
      const absl::Time start = absl::Now();
      task();
      ps_seconds_ = stage_->ps_seconds();
      CountDevices();
      absl::MutexLock lock(&mu_);
      busy_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
      passes_ = stage_->pass_seconds();
    }
  }

  // Activations whose buffers are reused from micro-batch to micro-batch.
  std::unique_ptr<Activations> NewActivations() {
    if (spare_.empty()) return std::make_unique<Activations>();
    std::unique_ptr<Activations> a = std::move(spare_.back());
    spare_.pop_back();
    return a;
  }
  void Recycle(Record& r) {
    if (r.in != nullptr) spare_.push_back(std::move(r.in));
  }

  int AcquireContext() {
    if (!free_contexts_.empty()) {
      const int ctx = free_contexts_.back();
      free_contexts_.pop_back();
      return ctx;
    }
    return next_context_++;
  }
  void ReleaseContext(Record& r) {
    if (r.ctx >= 0) free_contexts_.push_back(r.ctx);
    r.ctx = -1;
  }

  absl::Status MaybePull(int64_t step) {
    if (!policy_->PullBefore(step, pulled_step_, in_flight_)) return absl::OkStatus();
    if (dense_ == nullptr) {
      HETERPS_RETURN_IF_ERROR(stage_->PullParameters());
    } else if (!dense_->loaded()) {
      // Held by the stage's replicas: loaded once, then updated by the exchange.
      HETERPS_RETURN_IF_ERROR(LoadDense());
    }
    pulled_step_ = step;
    return absl::OkStatus();
  }

  // Samples [begin, begin + size) of this replica's batch, into the pipeline.
  void LocalForward(const data::Batch& batch, int64_t begin, int64_t size,
                    const std::shared_ptr<Waiter>& waiter, const ForwardHeader& header) {
    Record r;
    r.waiter = waiter;
    r.header = header;
    r.in = NewActivations();
    InputActivations(batch, begin, size, r.in.get());
    RunForward(std::move(r));
  }

  void RemoteForward(const ForwardHeader& header, std::unique_ptr<Activations> in,
                     const std::shared_ptr<Upstream>& up) {
    Record r;
    r.up = up;
    r.up_id = header.id;
    r.header = header;
    r.in = std::move(in);
    RunForward(std::move(r));
  }

  // A micro-batch's gradients, after its backward, to the step (the policy's AfterBackward), timed.
  absl::Status HandGradients(const Record& r, ParameterGrads* grads) {
    const absl::Time start = absl::Now();
    const absl::Status status =
        policy_->AfterBackward(*stage_, r.header.step, r.header.order, grads);
    Charge(&Impl::gradients_seconds_, start);
    return status;
  }

  void RunForward(Record r) {
    ++micro_batches_;
    absl::Status pulled = MaybePull(r.header.step);
    if (!pulled.ok()) return Finish(r, pulled);
    r.ctx = AcquireContext();
    ActivationGrads* d_in = stage_index_ == 0 ? nullptr : &d_in_;
    if (stage_->has_loss()) {
      if (!r.header.train) {
        const absl::Status status = stage_->Predict(r.ctx, *r.in, &out_);
        return FinishEval(r, status, out_.dense.data(), out_.size);
      }
      ParameterGrads* grads = policy_->GradsFor(r.header.step, r.header.order);
      absl::StatusOr<double> loss =
          stage_->ForwardBackward(r.ctx, *r.in, r.header.scale, d_in, grads, &block_losses_);
      absl::Status status = loss.status();
      if (status.ok()) status = HandGradients(r, grads);
      if (!status.ok()) return Finish(r, status);
      return Finish(r, status, *loss, block_losses_, d_in);
    }
    const absl::Status ran = r.header.train ? stage_->Forward(r.ctx, *r.in, &out_)
                                            : stage_->Predict(r.ctx, *r.in, &out_);
    if (!ran.ok()) return Finish(r, ran);
    if (!r.header.train) ReleaseContext(r);  // evaluation keeps nothing for a backward
    ForwardHeader header = r.header;
    header.id = next_tag_++;
    r.downstream = TargetOf(r.header);
    const int target = r.downstream;
    records_.emplace(header.id, std::move(r));
    ++in_flight_;
    const absl::Time start = absl::Now();
    const absl::Status sent = downstream_->Send(target, header, out_);
    AddSendTime(start);
    if (!sent.ok()) Fail(header.id, sent);
  }

  void Backward(int target, const Answer& answer) {
    auto it = records_.find(answer.id);
    if (it == records_.end() || it->second.downstream != target) return;  // failed already
    Record r = std::move(it->second);
    records_.erase(it);
    --in_flight_;
    if (!answer.error.empty()) {
      return Finish(r, absl::UnavailableError(answer.error));
    }
    if (!r.header.train) {
      return FinishEval(r, absl::OkStatus(), answer.probabilities.data(),
                        static_cast<int64_t>(answer.probabilities.size()));
    }
    ActivationGrads* d_in = stage_index_ == 0 ? nullptr : &d_in_;
    ParameterGrads* grads = policy_->GradsFor(r.header.step, r.header.order);
    absl::Status status = stage_->Backward(r.ctx, answer.grads, d_in, grads);
    if (status.ok()) status = HandGradients(r, grads);
    if (!status.ok()) return Finish(r, status);
    Finish(r, status, answer.loss_sum, answer.block_losses, d_in);
  }

  // Fails the record sent as `tag`, if it is still waiting.
  void Fail(int64_t tag, const absl::Status& status) {
    auto it = records_.find(tag);
    if (it == records_.end()) return;
    Record r = std::move(it->second);
    records_.erase(it);
    --in_flight_;
    Finish(r, status);
  }

  // Answers a training micro-batch: to the local waiter, or upstream.
  void Finish(Record& r, const absl::Status& status, double loss = 0,
              absl::Span<const double> block_losses = {}, const ActivationGrads* d_in = nullptr) {
    ReleaseContext(r);
    Recycle(r);
    if (r.waiter != nullptr) return r.waiter->Done(status, r.header.order, block_losses);
    AnswerView answer;
    answer.id = r.up_id;
    if (!status.ok()) {
      answer.error = absl::StrCat(name_, ": ", status.ToString());
    } else {
      answer.loss_sum = loss;
      answer.block_losses = block_losses;
      answer.grads = d_in;
    }
    SendUp(r, answer);
  }

  void FinishEval(Record& r, const absl::Status& status, const float* probabilities, int64_t n) {
    ReleaseContext(r);
    if (status.ok() && n != r.in->size) {
      return FinishEval(r, absl::InternalError("evaluation: probabilities for the wrong samples"),
                        nullptr, 0);
    }
    if (r.waiter != nullptr) {
      {
        absl::MutexLock lock(&r.waiter->mu);
        if (status.ok()) {
          r.waiter->probabilities.insert(r.waiter->probabilities.end(), probabilities,
                                         probabilities + n);
          r.waiter->labels.insert(r.waiter->labels.end(), r.in->labels.begin(), r.in->labels.end());
        }
      }
      Recycle(r);
      return r.waiter->Done(status);
    }
    Recycle(r);
    AnswerView answer;
    answer.id = r.up_id;
    if (status.ok()) {
      answer.probabilities = absl::MakeConstSpan(probabilities, static_cast<size_t>(n));
    } else {
      answer.error = absl::StrCat(name_, ": ", status.ToString());
    }
    SendUp(r, answer);
  }

  void SendUp(const Record& r, const AnswerView& answer) {
    const absl::Time start = absl::Now();
    r.up->Send(answer);  // a sender that has gone waits for nothing
    AddSendTime(start);
  }

  void AddSendTime(absl::Time start) {
    absl::MutexLock lock(&mu_);
    send_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
  }

  const JobSpec& job_;
  const int stage_index_, replica_;
  const std::string name_;
  ps::PsClient* client_;  // the parameter servers, or the tier in front of them
  Downstream* const downstream_;
  DensePeers* const peers_;  // the stage's other replicas; null: dense parameters on the servers
  std::unique_ptr<dense::DenseBackend> backend_;  // the stage's device
  std::unique_ptr<gpu::Device> tier_device_;      // the tier's, where it is not the stage's device
  std::unique_ptr<ps::GpuTier> tier_;
  bool device_path_ = false;  // the tier feeds the stage on their device
  std::unique_ptr<Stage> stage_;
  std::unique_ptr<DenseGroup> dense_;  // the stage's dense parameters, when its replicas hold them
  bool hold_dense_ = false;            // and keep them on the stage's device (LoadDense)
  std::unique_ptr<GradientPolicy> policy_;
  std::unique_ptr<ShardReader> train_reader_;  // stage 0, used under step_mu_
  // Stage 0, under step_mu_: the next step's share, read ahead (StepRequest::next_count).
  struct Ahead {
    int64_t epoch = 0, offset = 0, count = 0;
    int64_t n = 0;  // samples read
    std::shared_ptr<data::Batch> batch;
    int64_t skipped = 0;    // the reader's bad lines of that pass after it
    std::string first_bad;  // and the first of them
  } ahead_;
  absl::Mutex step_mu_;  // one RunStep or Evaluate at a time
  std::atomic<bool> stopping_{false};

  // The compute thread's queues and counters.
  absl::Mutex mu_;
  std::deque<std::function<void()>> urgent_ ABSL_GUARDED_BY(mu_), normal_ ABSL_GUARDED_BY(mu_);
  double busy_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double prefetch_seconds_ ABSL_GUARDED_BY(mu_) = 0;    // of busy_seconds_
  double step_end_seconds_ ABSL_GUARDED_BY(mu_) = 0;    // of busy_seconds_
  double write_back_seconds_ ABSL_GUARDED_BY(mu_) = 0;  // of busy_seconds_
  double gradients_seconds_ ABSL_GUARDED_BY(mu_) = 0;   // of busy_seconds_
  Stage::PassSeconds passes_ ABSL_GUARDED_BY(mu_);      // of busy_seconds_: the stage's
  double idle_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double send_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> micro_batches_{0};
  std::atomic<double> ps_seconds_{0};
  std::atomic<double> read_seconds_{0}, run_seconds_{0};  // written under step_mu_
  std::atomic<int> in_flight_{0};                         // written by the compute thread only
  std::atomic<int64_t> pcie_bytes_{0}, tier_hits_{0}, tier_misses_{0}, tier_loaded_{0},
      tier_written_{0}, tier_ahead_{0};
  std::thread compute_;

  // Only the compute thread touches these.
  absl::flat_hash_map<int64_t, Record> records_;  // by tag: sent on, waiting for the answer
  int64_t next_tag_ = 1;
  int64_t pulled_step_ = -1;
  std::vector<int> free_contexts_;
  int next_context_ = 0;
  std::vector<std::unique_ptr<Activations>> spare_;
  Activations out_, prefetch_;
  Activations ahead_keys_;  // the keys of the share read ahead, named to the tier
  // The batch ahead_keys_ hold the keys of (null: none), kept so that no other batch takes its
  // address.
  std::shared_ptr<const data::Batch> ahead_keys_batch_;
  ActivationGrads d_in_;
  std::vector<double> block_losses_;
};

PipelineReplica::PipelineReplica(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PipelineReplica::~PipelineReplica() { Stop(); }

absl::StatusOr<std::unique_ptr<PipelineReplica>> PipelineReplica::Create(const JobSpec& job,
                                                                         int stage, int replica,
                                                                         ps::PsClient* client,
                                                                         Downstream* downstream,
                                                                         DensePeers* peers) {
  if (stage < 0 || stage >= job.stages() || replica < 0 || replica >= job.replicas(stage)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica ", replica, " of stage ", stage, " is not in the job's plan"));
  }
  auto impl = std::make_unique<Impl>(job, stage, replica, client, downstream, peers);
  HETERPS_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<PipelineReplica>(new PipelineReplica(std::move(impl)));
}

absl::StatusOr<StepOutcome> PipelineReplica::RunStep(const StepRequest& request,
                                                     const Cancelled& cancelled) {
  absl::StatusOr<StepOutcome> out = impl_->RunStep(request, cancelled);
  if (!out.ok()) impl_->AbortDense(request.step, out.status());
  return out;
}
absl::StatusOr<EvalOutcome> PipelineReplica::Evaluate(int64_t step, const Cancelled& cancelled) {
  return impl_->Evaluate(step, cancelled);
}
absl::Status PipelineReplica::Flush(int64_t step, bool write_back, const Cancelled& cancelled) {
  absl::Status status = impl_->EndStep(step, write_back, cancelled);
  if (!status.ok()) impl_->AbortDense(step, status);
  return status;
}
absl::Status PipelineReplica::WriteBack(const Cancelled& cancelled) {
  return impl_->WriteBack(cancelled);
}
void PipelineReplica::Receive(const ForwardHeader& header, std::unique_ptr<Activations> activations,
                              std::shared_ptr<Upstream> from) {
  impl_->Receive(header, std::move(activations), std::move(from));
}
void PipelineReplica::OnAnswer(int target, std::shared_ptr<Answer> answer) {
  impl_->OnAnswer(target, std::move(answer));
}
void PipelineReplica::OnDownstreamLost(int target, absl::Status why) {
  impl_->OnDownstreamLost(target, std::move(why));
}
void PipelineReplica::OnDense(DenseMessage message) { impl_->OnDense(std::move(message)); }
ReplicaStats PipelineReplica::stats() const { return impl_->stats(); }
const std::string& PipelineReplica::name() const { return impl_->name(); }
void PipelineReplica::Stop() { impl_->Stop(); }

}  // namespace heterps::worker
