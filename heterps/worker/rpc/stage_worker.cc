#include "heterps/worker/rpc/stage_worker.h"

#include <atomic>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/token.h"
#include "heterps/rpc/rpc.h"
#include "heterps/worker/pipeline_replica.h"
#include "heterps/worker/rpc/codec.h"
#include "heterps/worker/rpc/worker.grpc.pb.h"

namespace heterps::worker::rpc {
namespace {

using heterps::rpc::ToGrpc;
using wire::Backward;
using wire::Forward;

// A stream from a replica of the previous stage: its handler reads while the compute thread
// answers; once the handler has returned, nothing may write.
class StreamUpstream : public Upstream {
 public:
  StreamUpstream(grpc::ServerReaderWriter<Backward, Forward>* stream,
                 std::atomic<int64_t>* bytes_sent)
      : stream_(stream), bytes_sent_(bytes_sent) {}

  bool Send(const AnswerView& answer) override {
    Backward message;
    EncodeAnswer(answer, &message);
    *bytes_sent_ += message.ByteSizeLong();
    absl::MutexLock lock(&mu_);
    return !closed_ && stream_->Write(message);
  }
  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }

 private:
  absl::Mutex mu_;
  grpc::ServerReaderWriter<Backward, Forward>* stream_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t>* bytes_sent_;
};

// The streams to the replicas of the next stage, each opened at its first use, each with a
// thread that reads the answers and hands them to the replica.
class StreamDownstream : public Downstream {
 public:
  StreamDownstream(std::vector<std::string> addresses, std::string token,
                   const heterps::rpc::JobTls& tls, int next_stage,
                   std::atomic<int64_t>* bytes_sent)
      : token_(std::move(token)),
        channel_(heterps::rpc::JobChannel(tls)),
        next_stage_(next_stage),
        bytes_sent_(bytes_sent) {
    for (std::string& address : addresses) {
      auto peer = std::make_unique<Peer>();
      peer->address = std::move(address);
      peers_.push_back(std::move(peer));
    }
  }
  ~StreamDownstream() override { Close(); }

  void set_replica(PipelineReplica* replica) { replica_ = replica; }

  int replicas() const override { return static_cast<int>(peers_.size()); }

  absl::Status Send(int target, const ForwardHeader& header,
                    const Activations& activations) override {
    Peer& p = *peers_[target];
    {
      absl::MutexLock lock(&p.open_mu);
      if (closing_.load()) return absl::UnavailableError("the worker is shutting down");
      if (!p.opened.load()) {
        p.stub = wire::Worker::NewStub(heterps::rpc::NewChannel(p.address, channel_));
        if (!token_.empty()) p.context.AddMetadata(base::kTokenHeader, token_);
        p.stream = p.stub->Exchange(&p.context);
        p.opened = true;
        p.reader = std::thread([this, target] { Read(target); });
      }
    }
    Forward message;
    EncodeForward(header, activations, &message);
    *bytes_sent_ += message.ByteSizeLong();
    absl::MutexLock lock(&p.mu);
    if (p.broken) return absl::UnavailableError(absl::StrCat(Who(target), ": the stream broke"));
    if (!p.stream->Write(message)) {
      p.broken = true;
      return absl::UnavailableError(absl::StrCat(Who(target), ": the stream broke"));
    }
    return absl::OkStatus();
  }

  // Cancels every stream (a compute thread blocked writing to a stage that stopped reading
  // returns), then waits for the readers.
  void Close() {
    closing_ = true;
    for (auto& p : peers_) {
      // A stream being opened now is open once this lock is free; none opens after it.
      { absl::MutexLock lock(&p->open_mu); }
      if (p->opened.load()) p->context.TryCancel();
    }
    for (auto& p : peers_) {
      if (p->reader.joinable()) p->reader.join();
    }
  }

 private:
  struct Peer {
    std::string address;
    std::unique_ptr<wire::Worker::Stub> stub;
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<Forward, Backward>> stream;
    std::thread reader;
    absl::Mutex open_mu;              // opening the stream
    std::atomic<bool> opened{false};  // the stream exists (Close cancels it)
    absl::Mutex mu;                   // writing to it, and finishing it
    bool broken ABSL_GUARDED_BY(mu) = false;
  };

  std::string Who(int target) const {
    return absl::StrCat("stage ", next_stage_, " replica ", target, " (", peers_[target]->address,
                        ")");
  }

  void Read(int target) {
    Peer& p = *peers_[target];
    Backward message;
    while (p.stream->Read(&message)) {
      auto answer = std::make_shared<Answer>();
      const absl::Status decoded = DecodeAnswer(message, answer.get());
      if (!decoded.ok()) {
        answer->error = absl::StrCat(Who(target), ": ", decoded.ToString());
      }
      replica_->OnAnswer(target, std::move(answer));
      message = Backward();
    }
    grpc::Status status;
    {
      absl::MutexLock lock(&p.mu);  // no Write after this: the stream is over
      p.broken = true;
      status = p.stream->Finish();
    }
    replica_->OnDownstreamLost(target, absl::UnavailableError(absl::StrCat(
                                           Who(target), " went away: ", status.error_message())));
  }

  const std::string token_;
  const heterps::rpc::ChannelOptions channel_;
  const int next_stage_;
  std::atomic<int64_t>* bytes_sent_;
  PipelineReplica* replica_ = nullptr;
  std::atomic<bool> closing_{false};
  std::vector<std::unique_ptr<Peer>> peers_;
};

// The other replicas of this stage, each reached by unary ShareDense calls on a channel opened at
// its first use.
class GrpcDensePeers : public DensePeers {
 public:
  GrpcDensePeers(std::vector<std::string> addresses, std::string token,
                 const heterps::rpc::JobTls& tls, int stage, std::atomic<int64_t>* bytes_sent)
      : addresses_(std::move(addresses)),
        token_(std::move(token)),
        channel_(heterps::rpc::JobChannel(tls)),
        stage_(stage),
        bytes_sent_(bytes_sent),
        stubs_(addresses_.size()) {}

  absl::Status Send(int target, const DenseMessage& message) override {
    if (target < 0 || target >= static_cast<int>(addresses_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("no replica ", target, " in stage ", stage_));
    }
    wire::Worker::Stub* stub;
    {
      absl::MutexLock lock(&mu_);
      if (stubs_[target] == nullptr) {
        stubs_[target] =
            wire::Worker::NewStub(heterps::rpc::NewChannel(addresses_[target], channel_));
      }
      stub = stubs_[target].get();
    }
    wire::DenseShare request;
    EncodeDense(message, &request);
    *bytes_sent_ += request.ByteSizeLong();
    grpc::ClientContext ctx;
    if (!token_.empty()) ctx.AddMetadata(base::kTokenHeader, token_);
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(5)));
    wire::DenseShareReply reply;
    const grpc::Status status = stub->ShareDense(&ctx, request, &reply);
    if (status.ok()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("stage ", stage_, " replica ", target, " (",
                                               addresses_[target],
                                               "): ShareDense: ", status.error_message()));
  }

 private:
  const std::vector<std::string> addresses_;
  const std::string token_;
  const heterps::rpc::ChannelOptions channel_;
  const int stage_;
  std::atomic<int64_t>* bytes_sent_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<wire::Worker::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

class StageWorker::Impl final : public wire::Worker::Service {
 public:
  explicit Impl(const StageWorkerOptions& options) : options_(options), auth_(options.token) {}

  absl::Status Serve() {
    heterps::rpc::Endpoint endpoint;
    endpoint.host = options_.host;
    endpoint.port = options_.port;
    endpoint.tls_cert_pem = options_.tls.cert_pem;
    endpoint.tls_key_pem = options_.tls.key_pem;
    HETERPS_ASSIGN_OR_RETURN(heterps::rpc::Server server,
                             heterps::rpc::StartServer(endpoint, {this}));
    server_ = std::move(server.server);
    address_ = server.address;
    return absl::OkStatus();
  }

  const std::string& address() const { return address_; }

  absl::Status Configure(const JobSpec& job, int stage, int replica, std::vector<std::string> next,
                         std::vector<std::string> same, ps::PsClient* client) {
    if (stage >= 0 && stage < job.stages() &&
        static_cast<int>(same.size()) != job.replicas(stage)) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " has ", job.replicas(stage),
                                                     " replicas; ", same.size(),
                                                     " addresses were given"));
    }
    if (stage + 1 < job.stages()) {
      downstream_ = std::make_unique<StreamDownstream>(std::move(next), options_.token,
                                                       options_.tls, stage + 1, &forward_bytes_);
    }
    peers_ = std::make_unique<GrpcDensePeers>(std::move(same), options_.token, options_.tls, stage,
                                              &peer_bytes_);
    HETERPS_ASSIGN_OR_RETURN(replica_, PipelineReplica::Create(job, stage, replica, client,
                                                               downstream_.get(), peers_.get()));
    if (downstream_ != nullptr) downstream_->set_replica(replica_.get());
    stage_ = stage;
    replica_index_ = replica;
    ps_client_ = client;
    base::SetLogRole(replica_->name());
    configured_.Notify();
    return absl::OkStatus();
  }

  void Shutdown() {
    if (stopping_.exchange(true)) return;
    if (downstream_ != nullptr) downstream_->Close();
    if (replica_ != nullptr) replica_->Stop();
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now()));
      server_->Wait();
    }
  }

  // ---- The Worker service ----

  grpc::Status RunStep(grpc::ServerContext* ctx, const wire::StepRequest* request,
                       wire::StepReply* reply) override {
    return Serve(ctx, "RunStep", [&]() -> absl::Status {
      HETERPS_ASSIGN_OR_RETURN(
          StepOutcome out,
          replica_->RunStep({request->step(), request->epoch(), request->offset(), request->count(),
                             request->scale(), request->write_back(), request->next_epoch(),
                             request->next_offset(), request->next_count()},
                            Cancelled(ctx)));
      reply->set_loss_sum(out.loss_sum);
      for (double loss : out.block_losses) reply->add_block_loss(loss);
      reply->set_samples(out.samples);
      reply->set_skipped_lines(out.skipped_lines);
      reply->set_first_bad_line(out.first_bad_line);
      return absl::OkStatus();
    });
  }

  grpc::Status Flush(grpc::ServerContext* ctx, const wire::FlushRequest* request,
                     wire::FlushReply*) override {
    return Serve(ctx, "Flush", [&] {
      return replica_->Flush(request->step(), request->write_back(), Cancelled(ctx));
    });
  }

  grpc::Status ShareDense(grpc::ServerContext* ctx, const wire::DenseShare* request,
                          wire::DenseShareReply*) override {
    return Serve(ctx, "ShareDense", [&]() -> absl::Status {
      DenseMessage message;
      HETERPS_RETURN_IF_ERROR(DecodeDense(*request, &message));
      replica_->OnDense(std::move(message));
      return absl::OkStatus();
    });
  }

  grpc::Status WriteBack(grpc::ServerContext* ctx, const wire::WriteBackRequest*,
                         wire::WriteBackReply*) override {
    return Serve(ctx, "WriteBack", [&] { return replica_->WriteBack(Cancelled(ctx)); });
  }

  grpc::Status Evaluate(grpc::ServerContext* ctx, const wire::EvalRequest* request,
                        wire::EvalReply* reply) override {
    return Serve(ctx, "Evaluate", [&]() -> absl::Status {
      HETERPS_ASSIGN_OR_RETURN(EvalOutcome out,
                               replica_->Evaluate(request->step(), Cancelled(ctx)));
      reply->set_probabilities(std::string(reinterpret_cast<const char*>(out.probabilities.data()),
                                           out.probabilities.size() * sizeof(float)));
      reply->set_labels(std::string(reinterpret_cast<const char*>(out.labels.data()),
                                    out.labels.size() * sizeof(float)));
      reply->set_skipped(out.skipped_lines);
      reply->set_first_bad_line(out.first_bad_line);
      return absl::OkStatus();
    });
  }

  grpc::Status Exchange(grpc::ServerContext* ctx,
                        grpc::ServerReaderWriter<Backward, Forward>* stream) override {
    return Serve(ctx, "Exchange", [&]() -> absl::Status {
      auto up = std::make_shared<StreamUpstream>(stream, &back_bytes_);
      Forward message;
      while (stream->Read(&message)) {
        ForwardHeader header;
        auto activations = std::make_unique<Activations>();
        const absl::Status decoded = DecodeForward(message, &header, activations.get());
        if (!decoded.ok()) {
          AnswerView answer;
          answer.id = message.id();
          answer.error = absl::StrCat(replica_->name(), ": ", decoded.ToString());
          up->Send(answer);
        } else {
          replica_->Receive(header, std::move(activations), up);
        }
        message = Forward();
      }
      up->Close();
      return absl::OkStatus();
    });
  }

  grpc::Status Stats(grpc::ServerContext* ctx, const wire::WorkerStatsRequest*,
                     wire::WorkerStats* reply) override {
    return Serve(ctx, "Stats", [&]() -> absl::Status {
      const ReplicaStats s = replica_->stats();
      reply->set_stage(stage_);
      reply->set_replica(replica_index_);
      reply->set_micro_batches(s.micro_batches);
      reply->set_busy_seconds(s.busy_seconds);
      reply->set_idle_seconds(s.idle_seconds);
      reply->set_send_seconds(s.send_seconds);
      reply->set_ps_seconds(s.ps_seconds);
      reply->set_prefetch_seconds(s.prefetch_seconds);
      reply->set_step_end_seconds(s.step_end_seconds);
      reply->set_write_back_seconds(s.write_back_seconds);
      reply->set_lookup_seconds(s.lookup_seconds);
      reply->set_dense_seconds(s.dense_seconds);
      reply->set_rows_seconds(s.rows_seconds);
      reply->set_gradients_seconds(s.gradients_seconds);
      reply->set_read_seconds(s.read_seconds);
      reply->set_run_seconds(s.run_seconds);
      const int64_t forward = forward_bytes_.load(), back = back_bytes_.load();
      reply->set_bytes_sent(forward + back + peer_bytes_.load());
      reply->set_forward_bytes(forward);
      reply->set_back_bytes(back);
      reply->set_queue_depth(s.queue_depth);
      reply->set_in_flight(s.in_flight);
      reply->set_pcie_bytes(s.pcie_bytes);
      reply->set_tier_hits(s.tier_hits);
      reply->set_tier_misses(s.tier_misses);
      reply->set_tier_loaded_rows(s.tier_loaded_rows);
      reply->set_tier_ahead_rows(s.tier_ahead_rows);
      reply->set_tier_written_back_rows(s.tier_written_back_rows);
      reply->set_tier_feeds_stage(s.tier_feeds_stage);
      reply->set_dense_held(s.dense_held);
      if (ps_client_ != nullptr)
        heterps::rpc::ToProto(ps_client_->CallStats(), reply->mutable_ps_rpcs());
      return absl::OkStatus();
    });
  }

 private:
  PipelineReplica::Cancelled Cancelled(grpc::ServerContext* ctx) {
    return [this, ctx] { return stopping_.load() || ctx->IsCancelled(); };
  }

  // Checks the token, waits for Configure, runs `body`.
  template <typename Body>
  grpc::Status Serve(grpc::ServerContext* ctx, absl::string_view method, Body body) {
    if (grpc::Status denied = auth_.Check(ctx, method); !denied.ok()) return denied;
    while (!configured_.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
      if (stopping_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down");
    }
    return ToGrpc(body());
  }

  const StageWorkerOptions options_;
  heterps::rpc::TokenCheck auth_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  absl::Notification configured_;
  std::atomic<bool> stopping_{false};
  // Sent to the next stage, to the previous one, and to this stage's other replicas.
  std::atomic<int64_t> forward_bytes_{0}, back_bytes_{0}, peer_bytes_{0};
  // Set by Configure, then read-only. The downstream outlives the replica's use of it: Shutdown
  // closes the streams first, then stops the replica.
  int stage_ = 0, replica_index_ = 0;
  ps::PsClient* ps_client_ = nullptr;
  std::unique_ptr<StreamDownstream> downstream_;
  std::unique_ptr<GrpcDensePeers> peers_;
  std::unique_ptr<PipelineReplica> replica_;
};

StageWorker::StageWorker(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

StageWorker::~StageWorker() { Shutdown(); }

absl::StatusOr<std::unique_ptr<StageWorker>> StageWorker::Start(const StageWorkerOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  HETERPS_RETURN_IF_ERROR(impl->Serve());
  return std::unique_ptr<StageWorker>(new StageWorker(std::move(impl)));
}

std::string StageWorker::address() const { return impl_->address(); }

absl::Status StageWorker::Configure(const JobSpec& job, int stage, int replica,
                                    std::vector<std::string> next, std::vector<std::string> same,
                                    ps::PsClient* client) {
  return impl_->Configure(job, stage, replica, std::move(next), std::move(same), client);
}

void StageWorker::Shutdown() { impl_->Shutdown(); }

}  // namespace heterps::worker::rpc
