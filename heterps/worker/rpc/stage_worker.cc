#include "heterps/worker/rpc/stage_worker.h"

#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/token.h"
#include "heterps/worker/rpc/codec.h"
#include "heterps/worker/rpc/runtime.grpc.pb.h"
#include "heterps/worker/shard_reader.h"
#include "heterps/worker/stage.h"

namespace heterps::worker::rpc {
namespace {

using runtime::Backward;
using runtime::Forward;

constexpr int kMaxMessageBytes = 256 << 20;
// Evaluation reads this many micro-batches at a time.
constexpr int kEvalChunk = 16;

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// A stream from a replica of the previous stage: its handler reads while the compute thread
// answers; once the handler has returned, nothing may write.
struct Upstream {
  explicit Upstream(grpc::ServerReaderWriter<Backward, Forward>* s) : stream(s) {}
  absl::Mutex mu;
  grpc::ServerReaderWriter<Backward, Forward>* stream ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;

  bool Write(const Backward& b) {
    absl::MutexLock lock(&mu);
    return !closed && stream->Write(b);
  }
  void Close() {
    absl::MutexLock lock(&mu);
    closed = true;
  }
};

// A RunStep or Evaluate of this replica, waiting for its micro-batches.
struct Waiter {
  absl::Mutex mu;
  int64_t pending ABSL_GUARDED_BY(mu) = 0;
  double loss_sum ABSL_GUARDED_BY(mu) = 0;
  absl::Status status ABSL_GUARDED_BY(mu);
  std::vector<float> probabilities ABSL_GUARDED_BY(mu), labels ABSL_GUARDED_BY(mu);

  void Done(const absl::Status& s, double loss) {
    absl::MutexLock lock(&mu);
    status.Update(s);
    loss_sum += loss;
    --pending;
  }
  // Until every micro-batch is done, `stop` turns true, or the call is cancelled.
  absl::Status Wait(const std::atomic<bool>& stop, grpc::ServerContext* ctx) {
    absl::MutexLock lock(&mu);
    while (pending > 0 && !stop.load() && !ctx->IsCancelled()) {
      mu.AwaitWithTimeout(
          absl::Condition(
              +[](Waiter* w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(w->mu) { return w->pending <= 0; },
              this),
          absl::Milliseconds(100));
    }
    if (pending > 0) return absl::CancelledError("the worker is shutting down, or the caller left");
    return status;
  }
};

// A task's outcome, shared by the compute thread that runs the task and the handler that waits
// for it: the handler may give up (shutdown, a cancelled call) and return first.
struct Outcome {
  absl::Notification done;
  absl::Status status;
};

}  // namespace

class StageWorker::Impl final : public runtime::Worker::Service {
 public:
  explicit Impl(const StageWorkerOptions& options) : options_(options) {}

  absl::Status Serve() {
    grpc::ServerBuilder builder;
    const std::string address = absl::StrCat(options_.host, ":", options_.port);
    builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(kMaxMessageBytes);
    builder.SetMaxSendMessageSize(kMaxMessageBytes);
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
    }
    compute_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  std::string address() const { return absl::StrCat(options_.host, ":", port_); }

  absl::Status Configure(const StageWorkerConfig& config, ps::PsClient* client) {
    if (config.stage < 0 || config.stage >= static_cast<int>(config.stages.size()) ||
        config.replica < 0 ||
        config.replica >= static_cast<int>(config.stages[config.stage].replicas.size()) ||
        config.micro_batch < 1) {
      return absl::InvalidArgumentError(absl::StrCat("replica ", config.replica, " of stage ",
                                                     config.stage, " is not in the layout"));
    }
    for (size_t s = 0; s < config.stages.size(); ++s) {
      if (config.stages[s].replicas.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("stage ", s, " has no replicas"));
      }
    }
    config_ = config;
    client_ = client;
    const StageWorkerConfig::Stage& mine = config_.stages[config.stage];
    HETERPS_ASSIGN_OR_RETURN(stage_, Stage::Create(config_.spec, mine.first, mine.last, client));
    const bool last = config.stage + 1 == static_cast<int>(config.stages.size());
    if (stage_->has_loss() != last) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stage ", config.stage, " (layers ", mine.first, "..", mine.last, ") ",
          last ? "is the last but has no loss layer" : "has the loss layer but is not the last"));
    }
    first_ = config.stage == 0;
    if (config.stage + 1 < static_cast<int>(config.stages.size())) {
      for (const std::string& address : config.stages[config.stage + 1].replicas) {
        auto d = std::make_unique<Downstream>();
        d->address = address;
        downstream_.push_back(std::move(d));
      }
    }
    if (first_) {
      data::ReaderOptions read = config.data;
      read.rank = config.replica;
      read.world = static_cast<int>(mine.replicas.size());
      read.batch_size = static_cast<int>(config.micro_batch);
      read.part = data::ReaderOptions::Part::kTrain;
      train_reader_ = std::make_unique<ShardReader>(read);
      read.part = data::ReaderOptions::Part::kEval;
      eval_options_ = read;
    }
    base::SetLogRole(absl::StrCat("stage ", config.stage, " replica ", config.replica));
    configured_.Notify();
    return absl::OkStatus();
  }

  void Shutdown() {
    if (stopping_.exchange(true)) return;
    // Streams first: a compute thread blocked writing to a stage that stopped reading returns.
    for (auto& d : downstream_) {
      if (d->opened.load()) d->context.TryCancel();
    }
    {
      absl::MutexLock lock(&mu_);  // wakes the compute thread
    }
    if (compute_.joinable()) compute_.join();
    for (auto& d : downstream_) {
      if (d->reader.joinable()) d->reader.join();
    }
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now()));
      server_->Wait();
    }
  }

  // ---- The Worker service ----

  grpc::Status RunStep(grpc::ServerContext* ctx, const runtime::StepRequest* request,
                       runtime::StepReply* reply) override {
    return Serve(ctx, [&]() -> absl::Status {
      if (!first_) return absl::FailedPreconditionError("RunStep goes to stage 0");
      absl::MutexLock serial(&step_mu_);
      auto batch = std::make_shared<data::Batch>();
      HETERPS_ASSIGN_OR_RETURN(
          const int64_t n,
          train_reader_->Take(request->epoch(), request->offset(), request->count(), batch.get()));
      auto waiter = std::make_shared<Waiter>();
      const int64_t mb = config_.micro_batch;
      const int64_t parts = (n + mb - 1) / mb;
      {
        absl::MutexLock lock(&waiter->mu);
        waiter->pending = parts;
      }
      const int64_t replicas = config_.stages[0].replicas.size();
      for (int64_t m = 0; m < parts; ++m) {
        const int64_t begin = m * mb, size = std::min(mb, n - begin);
        const int64_t order = m * replicas + config_.replica;
        Enqueue(false, [this, batch, begin, size, waiter, step = request->step(), order,
                        scale = request->scale()] {
          LocalForward(*batch, begin, size, waiter, step, order, true, scale);
        });
      }
      HETERPS_RETURN_IF_ERROR(waiter->Wait(stopping_, ctx));
      // Stage 0's part of the step is complete here: send its gradients now rather than wait for
      // a Flush (later stages are flushed by the coordinator).
      if (config_.sync) HETERPS_RETURN_IF_ERROR(RunFlush(request->step(), ctx));
      absl::MutexLock lock(&waiter->mu);
      reply->set_loss_sum(waiter->loss_sum);
      reply->set_samples(n);
      reply->set_skipped_lines(train_reader_->skipped());
      reply->set_first_bad_line(train_reader_->first_bad());
      return absl::OkStatus();
    });
  }

  grpc::Status Flush(grpc::ServerContext* ctx, const runtime::FlushRequest* request,
                     runtime::FlushReply*) override {
    return Serve(ctx, [&] { return RunFlush(request->step(), ctx); });
  }

  grpc::Status Evaluate(grpc::ServerContext* ctx, const runtime::EvalRequest* request,
                        runtime::EvalReply* reply) override {
    return Serve(ctx, [&]() -> absl::Status {
      if (!first_) return absl::FailedPreconditionError("Evaluate goes to stage 0");
      absl::MutexLock serial(&step_mu_);
      ShardReader reader(eval_options_);
      auto waiter = std::make_shared<Waiter>();
      const int64_t mb = config_.micro_batch;
      const int64_t replicas = config_.stages[0].replicas.size();
      int64_t offset = 0, sequence = 0;
      for (;;) {
        auto batch = std::make_shared<data::Batch>();
        HETERPS_ASSIGN_OR_RETURN(const int64_t n,
                                 reader.Take(0, offset, mb * kEvalChunk, batch.get()));
        if (n == 0) break;
        offset += n;
        const int64_t parts = (n + mb - 1) / mb;
        {
          absl::MutexLock lock(&waiter->mu);
          waiter->pending = parts;
        }
        for (int64_t m = 0; m < parts; ++m) {
          const int64_t begin = m * mb, size = std::min(mb, n - begin);
          const int64_t order = (sequence++) * replicas + config_.replica;
          Enqueue(false, [this, batch, begin, size, waiter, step = request->step(), order] {
            LocalForward(*batch, begin, size, waiter, step, order, false, 0);
          });
        }
        HETERPS_RETURN_IF_ERROR(waiter->Wait(stopping_, ctx));
      }
      absl::MutexLock lock(&waiter->mu);
      reply->set_probabilities(
          std::string(reinterpret_cast<const char*>(waiter->probabilities.data()),
                      waiter->probabilities.size() * sizeof(float)));
      reply->set_labels(std::string(reinterpret_cast<const char*>(waiter->labels.data()),
                                    waiter->labels.size() * sizeof(float)));
      reply->set_skipped(reader.skipped());
      return absl::OkStatus();
    });
  }

  grpc::Status Exchange(grpc::ServerContext* ctx,
                        grpc::ServerReaderWriter<Backward, Forward>* stream) override {
    return Serve(ctx, [&]() -> absl::Status {
      auto up = std::make_shared<Upstream>(stream);
      Forward message;
      while (stream->Read(&message)) {
        auto m = std::make_shared<Forward>(std::move(message));
        Enqueue(false, [this, up, m] { RemoteForward(up, *m); });
        message = Forward();
      }
      up->Close();
      return absl::OkStatus();
    });
  }

  grpc::Status Stats(grpc::ServerContext* ctx, const runtime::WorkerStatsRequest*,
                     runtime::WorkerStats* reply) override {
    return Serve(ctx, [&]() -> absl::Status {
      reply->set_stage(config_.stage);
      reply->set_replica(config_.replica);
      reply->set_micro_batches(micro_batches_.load());
      reply->set_ps_seconds(ps_seconds_.load());
      reply->set_bytes_sent(bytes_sent_.load());
      absl::MutexLock lock(&mu_);
      reply->set_busy_seconds(busy_seconds_);
      reply->set_idle_seconds(idle_seconds_);
      reply->set_send_seconds(send_seconds_);
      reply->set_queue_depth(static_cast<int>(urgent_.size() + normal_.size()));
      reply->set_in_flight(in_flight_.load());
      return absl::OkStatus();
    });
  }

 private:
  // A micro-batch between its forward and its backward here.
  struct Record {
    int ctx = -1;
    int64_t step = 0, order = 0;
    bool train = true;
    float scale = 0;
    int downstream = -1;  // where it went
    // Kept until backward, at a fixed address: the stage's layers point into it.
    std::unique_ptr<Activations> in;
    std::shared_ptr<Upstream> up;  // answer upstream with up_id, or
    int64_t up_id = 0;
    std::shared_ptr<Waiter> waiter;  // tell the local RunStep or Evaluate
  };

  // A stream to a replica of the next stage, opened at its first use.
  struct Downstream {
    std::string address;
    std::unique_ptr<runtime::Worker::Stub> stub;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<Forward, Backward>> stream;
    std::thread reader;
    std::atomic<bool> opened{false};  // the stream exists (Shutdown cancels it)
    absl::Mutex mu;
    bool broken ABSL_GUARDED_BY(mu) = false;
  };

  template <typename Body>
  grpc::Status Serve(grpc::ServerContext* ctx, Body body) {
    if (!options_.token.empty()) {
      auto entries = ctx->client_metadata().equal_range(base::kTokenHeader);
      const bool given = entries.first != entries.second;
      if (!given || !base::TokensEqual(absl::string_view(entries.first->second.data(),
                                                         entries.first->second.size()),
                                       options_.token)) {
        base::LogLine(absl::StrCat("refused a call from ", ctx->peer(), ": ",
                                   given ? "wrong token" : "no token"));
        return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                            given ? "wrong token" : "no token in the call");
      }
    }
    while (!configured_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
    }
    return ToGrpc(body());
  }

  // Runs FlushStep(step) on the compute thread and waits for it, or for the worker to stop or the
  // call to be cancelled.
  absl::Status RunFlush(int64_t step, grpc::ServerContext* ctx) {
    auto outcome = std::make_shared<Outcome>();
    Enqueue(true, [this, step, outcome] {
      outcome->status = FlushStep(step);
      outcome->done.Notify();
    });
    while (!outcome->done.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      if (stopping_ || ctx->IsCancelled()) {
        return absl::CancelledError("the worker is shutting down, or the caller left");
      }
    }
    return outcome->status;
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
      if (stage_ != nullptr) ps_seconds_ = stage_->ps_seconds();
      absl::MutexLock lock(&mu_);
      busy_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
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
  void ReleaseContext(int ctx) {
    if (ctx >= 0) free_contexts_.push_back(ctx);
  }

  // Pulls the dense parameters when step `step` is new here: at once in synchronous training
  // (the previous step is committed), only when nothing is in flight in asynchronous training.
  absl::Status MaybePull(int64_t step) {
    if (step == pulled_step_) return absl::OkStatus();
    if (!config_.sync && in_flight_ > 0) return absl::OkStatus();
    HETERPS_RETURN_IF_ERROR(stage_->PullParameters());
    pulled_step_ = step;
    return absl::OkStatus();
  }

  // The gradients of micro-batch (step, order): kept apart until Flush in synchronous training.
  ParameterGrads* GradsFor(int64_t step, int64_t order) {
    if (!config_.sync) {
      if (scratch_.dense.empty() && scratch_.sparse.empty()) scratch_ = stage_->NewGrads();
      scratch_.Clear();
      return &scratch_;
    }
    auto [it, fresh] = finished_.try_emplace({step, order});
    if (fresh) {
      if (!pool_.empty()) {
        it->second = std::move(pool_.back());
        pool_.pop_back();
      } else {
        it->second = stage_->NewGrads();
      }
    }
    it->second.Clear();
    return &it->second;
  }

  absl::Status FlushStep(int64_t step) {
    if (!config_.sync) return absl::OkStatus();
    if (total_.dense.empty() && total_.sparse.empty()) total_ = stage_->NewGrads();
    total_.Clear();
    for (auto it = finished_.begin(); it != finished_.end();) {
      if (it->first.first == step) {
        total_.Add(it->second);
      } else {
        // Synchronous steps never overlap; leftovers are of a step a failure cut short.
        base::LogLine(absl::StrCat("dropped the gradients of micro-batch ", it->first.second,
                                   " of step ", it->first.first, " at the flush of step ", step));
      }
      pool_.push_back(std::move(it->second));
      it = finished_.erase(it);
    }
    return stage_->Accumulate(total_, config_.replica);
  }

  // Samples [begin, begin + size) of this replica's batch, into the pipeline.
  void LocalForward(const data::Batch& batch, int64_t begin, int64_t size,
                    const std::shared_ptr<Waiter>& waiter, int64_t step, int64_t order, bool train,
                    float scale) {
    Record r;
    r.waiter = waiter;
    r.step = step;
    r.order = order;
    r.train = train;
    r.scale = scale;
    r.in = NewActivations();
    InputActivations(batch, begin, size, r.in.get());
    RunForward(std::move(r));
  }

  void RemoteForward(const std::shared_ptr<Upstream>& up, const Forward& message) {
    Record r;
    r.up = up;
    r.up_id = message.id();
    r.step = message.step();
    r.order = message.order();
    r.train = message.train();
    r.scale = message.scale();
    r.in = NewActivations();
    const absl::Status decoded = DecodeActivations(message, r.in.get());
    if (!decoded.ok()) return Finish(r, decoded, 0, nullptr);
    RunForward(std::move(r));
  }

  void RunForward(Record r) {
    ++micro_batches_;
    absl::Status pulled = MaybePull(r.step);
    if (!pulled.ok()) return Finish(r, pulled, 0, nullptr);
    r.ctx = AcquireContext();
    if (stage_->has_loss()) {
      if (!r.train) {
        const absl::Status status = stage_->Predict(r.ctx, *r.in, &out_);
        return FinishEval(r, status, out_.dense.data(), out_.size);
      }
      ParameterGrads* grads = GradsFor(r.step, r.order);
      absl::StatusOr<double> loss =
          stage_->ForwardBackward(r.ctx, *r.in, r.scale, first_ ? nullptr : &d_in_, grads);
      absl::Status status = loss.status();
      if (status.ok() && !config_.sync) status = stage_->Push(*grads);
      return Finish(r, status, loss.ok() ? *loss : 0, &d_in_);
    }
    const absl::Status ran =
        r.train ? stage_->Forward(r.ctx, *r.in, &out_) : stage_->Predict(r.ctx, *r.in, &out_);
    if (!ran.ok()) return Finish(r, ran, 0, nullptr);
    if (!r.train) {
      ReleaseContext(r.ctx);  // evaluation keeps nothing for a backward
      r.ctx = -1;
    }
    Forward message;
    const int64_t tag = next_tag_++;
    message.set_step(r.step);
    message.set_id(tag);
    message.set_order(r.order);
    message.set_train(r.train);
    message.set_scale(r.scale);
    EncodeActivations(out_, &message);
    r.downstream = static_cast<int>(r.order % static_cast<int64_t>(downstream_.size()));
    const int target = r.downstream;
    records_.emplace(tag, std::move(r));
    ++in_flight_;
    const absl::Status sent = Send(target, message);
    if (!sent.ok()) Fail(tag, sent);
  }

  void OnBackward(const Backward& message) {
    auto it = records_.find(message.id());
    if (it == records_.end()) return;  // failed already
    Record r = std::move(it->second);
    records_.erase(it);
    --in_flight_;
    if (!message.error().empty()) {
      return Finish(r, absl::UnavailableError(message.error()), 0, nullptr);
    }
    if (!r.train) {
      const size_t n = message.probabilities().size() / sizeof(float);
      return FinishEval(r, absl::OkStatus(),
                        reinterpret_cast<const float*>(message.probabilities().data()),
                        static_cast<int64_t>(n));
    }
    absl::Status status = DecodeGrads(message, r.in->size, &d_out_);
    ParameterGrads* grads = GradsFor(r.step, r.order);
    if (status.ok()) status = stage_->Backward(r.ctx, d_out_, first_ ? nullptr : &d_in_, grads);
    if (status.ok() && !config_.sync) status = stage_->Push(*grads);
    Finish(r, status, message.loss_sum(), &d_in_);
  }

  // Fails the record sent as `tag`, if it is still waiting.
  void Fail(int64_t tag, const absl::Status& status) {
    auto it = records_.find(tag);
    if (it == records_.end()) return;
    Record r = std::move(it->second);
    records_.erase(it);
    --in_flight_;
    Finish(r, status, 0, nullptr);
  }

  // Answers a training micro-batch: to the local waiter, or upstream.
  void Finish(Record& r, const absl::Status& status, double loss, const ActivationGrads* d_in) {
    ReleaseContext(r.ctx);
    r.ctx = -1;
    Recycle(r);
    if (r.waiter != nullptr) return r.waiter->Done(status, loss);
    Backward reply;
    reply.set_id(r.up_id);
    if (!status.ok()) {
      reply.set_error(absl::StrCat("stage ", config_.stage, " replica ", config_.replica, " (",
                                   address(), "): ", status.ToString()));
    } else {
      reply.set_loss_sum(loss);
      if (d_in != nullptr) EncodeGrads(*d_in, &reply);
    }
    Answer(r, reply);
  }

  void FinishEval(Record& r, const absl::Status& status, const float* probabilities, int64_t n) {
    ReleaseContext(r.ctx);
    r.ctx = -1;
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
      return r.waiter->Done(status, 0);
    }
    Recycle(r);
    Backward reply;
    reply.set_id(r.up_id);
    if (status.ok()) {
      reply.set_probabilities(
          std::string(reinterpret_cast<const char*>(probabilities), n * sizeof(float)));
    } else {
      reply.set_error(status.ToString());
    }
    Answer(r, reply);
  }

  void Answer(const Record& r, const Backward& reply) {
    const absl::Time start = absl::Now();
    r.up->Write(reply);  // a closed upstream has gone: nobody waits for the answer
    bytes_sent_ += reply.ByteSizeLong();
    absl::MutexLock lock(&mu_);
    send_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
  }

  absl::Status Send(int target, const Forward& message) {
    Downstream& d = *downstream_[target];
    const std::string who =
        absl::StrCat("stage ", config_.stage + 1, " replica ", target, " (", d.address, ")");
    absl::MutexLock lock(&d.mu);
    if (d.broken) return absl::UnavailableError(absl::StrCat(who, ": the stream broke"));
    if (d.stream == nullptr) {
      grpc::ChannelArguments args;
      args.SetMaxReceiveMessageSize(kMaxMessageBytes);
      args.SetMaxSendMessageSize(kMaxMessageBytes);
      d.stub = runtime::Worker::NewStub(
          grpc::CreateCustomChannel(d.address, grpc::InsecureChannelCredentials(), args));
      if (!options_.token.empty()) d.context.AddMetadata(base::kTokenHeader, options_.token);
      d.stream = d.stub->Exchange(&d.context);
      d.opened = true;
      d.reader = std::thread([this, target] { ReadDownstream(target); });
    }
    const absl::Time start = absl::Now();
    const bool written = d.stream->Write(message);
    bytes_sent_ += message.ByteSizeLong();
    {
      absl::MutexLock stats(&mu_);
      send_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
    }
    if (!written) {
      d.broken = true;
      return absl::UnavailableError(absl::StrCat(who, ": the stream broke"));
    }
    return absl::OkStatus();
  }

  void ReadDownstream(int target) {
    Downstream& d = *downstream_[target];
    Backward message;
    while (d.stream->Read(&message)) {
      auto m = std::make_shared<Backward>(std::move(message));
      Enqueue(true, [this, m] { OnBackward(*m); });
      message = Backward();
    }
    grpc::Status status;
    {
      absl::MutexLock lock(&d.mu);  // no Write after this: the stream is over
      d.broken = true;
      status = d.stream->Finish();
    }
    Enqueue(true, [this, target, status] {
      Downstream& broken = *downstream_[target];
      {
        absl::MutexLock lock(&broken.mu);
        broken.broken = true;
      }
      const absl::Status why = absl::UnavailableError(
          absl::StrCat("stage ", config_.stage + 1, " replica ", target, " (", broken.address,
                       ") went away: ", status.error_message()));
      std::vector<int64_t> lost;
      for (const auto& [tag, r] : records_) {
        if (r.downstream == target) lost.push_back(tag);
      }
      for (int64_t tag : lost) Fail(tag, why);
    });
  }

  const StageWorkerOptions options_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  absl::Notification configured_;
  std::atomic<bool> stopping_{false};
  absl::Mutex step_mu_;  // one RunStep or Evaluate at a time

  // Set by Configure, then read-only.
  StageWorkerConfig config_;
  ps::PsClient* client_ = nullptr;
  std::unique_ptr<Stage> stage_;
  bool first_ = false;
  std::vector<std::unique_ptr<Downstream>> downstream_;
  std::unique_ptr<ShardReader> train_reader_;  // used under step_mu_
  data::ReaderOptions eval_options_;

  // The compute thread's queues and counters.
  absl::Mutex mu_;
  std::deque<std::function<void()>> urgent_ ABSL_GUARDED_BY(mu_), normal_ ABSL_GUARDED_BY(mu_);
  double busy_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double idle_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  double send_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int64_t> micro_batches_{0}, bytes_sent_{0};
  std::atomic<double> ps_seconds_{0};
  std::thread compute_;

  // Only the compute thread touches these.
  absl::flat_hash_map<int64_t, Record> records_;  // by tag: sent on, waiting for the backward
  std::atomic<int> in_flight_{0};                 // written by the compute thread only
  int64_t next_tag_ = 1;
  int64_t pulled_step_ = -1;
  std::vector<int> free_contexts_;
  int next_context_ = 0;
  std::map<std::pair<int64_t, int64_t>, ParameterGrads> finished_;  // (step, order)
  std::vector<ParameterGrads> pool_;
  std::vector<std::unique_ptr<Activations>> spare_;
  ParameterGrads scratch_, total_;
  Activations out_;
  ActivationGrads d_in_, d_out_;
};

StageWorker::StageWorker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StageWorker::~StageWorker() { Shutdown(); }

absl::StatusOr<std::unique_ptr<StageWorker>> StageWorker::Start(const StageWorkerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  HETERPS_RETURN_IF_ERROR(impl->Serve());
  return std::unique_ptr<StageWorker>(new StageWorker(std::move(impl)));
}

std::string StageWorker::address() const { return impl_->address(); }

absl::Status StageWorker::Configure(const StageWorkerConfig& config, ps::PsClient* client) {
  return impl_->Configure(config, client);
}

void StageWorker::Shutdown() { impl_->Shutdown(); }

}  // namespace heterps::worker::rpc
