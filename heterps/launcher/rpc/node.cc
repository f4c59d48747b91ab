#include "heterps/launcher/rpc/node.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/launcher/rpc/coordinator.grpc.pb.h"
#include "heterps/ps/rpc/grpc_ps_client.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/rpc/rpc.h"
#include "heterps/worker/job.h"
#include "heterps/worker/rpc/stage_worker.h"

namespace heterps::launcher::rpc {
namespace {

using heterps::rpc::FromGrpc;

class Node {
 public:
  explicit Node(const NodeOptions& o) : o_(o) {
    stub_ = wire::Coordinator::NewStub(
        heterps::rpc::NewChannel(o.coordinator, heterps::rpc::JobChannel(o.tls)));
  }

  // One role after another: a switch under an external launcher gives the same process a new
  // role (HeartbeatReply.rejoin).
  absl::Status Run(const std::atomic<bool>* stop) {
    for (;;) {
      rejoin_ = false;
      absl::Status status = RunRole(stop);
      Shutdown();
      if (!status.ok() || !rejoin_) return status;
      base::LogLine("the job goes on in another layout: asking for a new role");
    }
  }

  absl::Status RunRole(const std::atomic<bool>* stop) {
    HETERPS_RETURN_IF_ERROR(Hello());
    HETERPS_ASSIGN_OR_RETURN(const std::string address, StartRole());
    HETERPS_RETURN_IF_ERROR(Register(address));
    if (role_.kind() == wire::Role::WORKER) HETERPS_RETURN_IF_ERROR(ConfigureWorker());
    return Serve(stop);
  }

 private:
  void Prepare(grpc::ClientContext& ctx, absl::Duration timeout) {
    heterps::rpc::PrepareCall(ctx, o_.token, timeout);
  }

  // `call` (Hello or Register: both may be repeated) again while it gives UNAVAILABLE, for up to
  // `retry_for`, with backoff from 100 ms to 1 s: a coordinator that is still starting, or a
  // connection that a loaded host drops before its HTTP/2 settings ("before receiving SETTINGS
  // frame"), is tried again rather than ending the process. Each call's deadline: `call_timeout`;
  // 0: what is left of `retry_for`, the call waiting for the channel meanwhile (wait-for-ready).
  template <typename Call>
  grpc::Status CallUntil(absl::Duration retry_for, absl::Duration call_timeout, const Call& call) {
    const absl::Time deadline = absl::Now() + retry_for;
    absl::Duration backoff = absl::Milliseconds(100);
    for (;;) {
      grpc::ClientContext ctx;
      const bool wait = call_timeout == absl::ZeroDuration();
      heterps::rpc::PrepareCall(ctx, o_.token, wait ? deadline - absl::Now() : call_timeout);
      ctx.set_wait_for_ready(wait);
      const grpc::Status status = call(ctx);
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE ||
          absl::Now() + backoff >= deadline) {
        return status;
      }
      absl::SleepFor(backoff);
      backoff = std::min(2 * backoff, absl::Seconds(1));
    }
  }

  absl::Status Hello() {
    wire::HelloRequest request;
    request.set_rank(o_.rank);
    request.set_world(o_.world);
    wire::HelloReply reply;
    const grpc::Status status =
        CallUntil(o_.connect_timeout, absl::ZeroDuration(),
                  [&](grpc::ClientContext& ctx) { return stub_->Hello(&ctx, request, &reply); });
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
        status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      const std::string why = status.error_code() == grpc::StatusCode::UNAVAILABLE
                                  ? absl::StrCat(" (", status.error_message(), ")")
                                  : "";
      return absl::UnavailableError(absl::StrCat("cannot reach the coordinator at ", o_.coordinator,
                                                 " within ",
                                                 absl::FormatDuration(o_.connect_timeout), why));
    }
    HETERPS_RETURN_IF_ERROR(FromGrpc(status, absl::StrCat("coordinator ", o_.coordinator)));
    if ((o_.generation >= 0 && reply.generation() != o_.generation) ||
        reply.generation() < generation_) {
      return absl::FailedPreconditionError("this process belongs to an attempt that is over");
    }
    role_ = reply.role();
    generation_ = reply.generation();
    base::SetLogRole(role_.kind() == wire::Role::PS
                         ? absl::StrCat("ps shard ", role_.shard())
                         : absl::StrCat("stage ", role_.stage(), " replica ", role_.replica()));
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> StartRole() {
    if (role_.kind() == wire::Role::PS) {
      ps::rpc::PsServerOptions options;
      options.shard = role_.shard();
      options.num_shards = role_.shards();
      options.data_dir = role_.data_dir();
      options.job_id = role_.job_id();
      options.memory_limit_bytes = ps::rpc::DefaultMemoryLimitBytes();
      options.host = o_.host;
      options.token = o_.token;
      options.tls_cert_pem = o_.tls.cert_pem;
      options.tls_key_pem = o_.tls.key_pem;
      HETERPS_ASSIGN_OR_RETURN(ps_server_, ps::rpc::PsServer::Start(options));
      return ps_server_->address();
    }
    worker::rpc::StageWorkerOptions options;
    options.host = o_.host;
    options.token = o_.token;
    options.tls = o_.tls;
    HETERPS_ASSIGN_OR_RETURN(worker_, worker::rpc::StageWorker::Start(options));
    return worker_->address();
  }

  absl::Status Register(const std::string& address) {
    wire::RegisterRequest request;
    request.set_rank(o_.rank);
    request.set_generation(generation_);
    request.set_address(address);
    // The call waits (up to 10 minutes) for every rank to register; a coordinator that is gone
    // fails it at once, and only a connection lost for less than the connect timeout is retried.
    return FromGrpc(CallUntil(o_.connect_timeout, absl::Minutes(10),
                              [&](grpc::ClientContext& ctx) {
                                return stub_->Register(&ctx, request, &reply_);
                              }),
                    absl::StrCat("coordinator ", o_.coordinator, ": Register"));
  }

  absl::Status ConfigureWorker() {
    HETERPS_ASSIGN_OR_RETURN(job_, worker::ParseJob(reply_.job(), "the coordinator's job"));
    ps::rpc::GrpcPsClientOptions ps;
    ps.servers.assign(reply_.ps().begin(), reply_.ps().end());
    ps.token = o_.token;
    ps.UseJobTls(o_.tls);
    HETERPS_ASSIGN_OR_RETURN(ps_client_, ps::rpc::GrpcPsClient::Connect(ps));
    const int stage = role_.stage();
    if (stage < 0 || stage >= reply_.stages_size()) {
      return absl::InvalidArgumentError(absl::StrCat("stage ", stage, " is not in the layout"));
    }
    std::vector<std::string> next;
    if (stage + 1 < reply_.stages_size()) {
      const wire::StageAddresses& s = reply_.stages(stage + 1);
      next.assign(s.replicas().begin(), s.replicas().end());
    }
    const wire::StageAddresses& mine = reply_.stages(stage);
    return worker_->Configure(job_, stage, role_.replica(), std::move(next),
                              {mine.replicas().begin(), mine.replicas().end()}, ps_client_.get());
  }

  // Until the coordinator says stop or is gone for orphan_timeout. Once `stop` turns true, the
  // heartbeats ask the coordinator to stop the job, and the role serves on until it has: the
  // job's stop checkpoint needs every shard (a launcher that signals every process, as mpirun
  // and Slurm's scancel do, would otherwise end the shards before it is written).
  absl::Status Serve(const std::atomic<bool>* stop) {
    absl::Time last_answer = absl::Now();
    bool asked = false;
    for (;;) {
      if (!asked && stop != nullptr && stop->load()) {
        asked = true;
        base::LogLine("asked to stop: the job stops at its next step, with a checkpoint");
      }
      grpc::ClientContext ctx;
      Prepare(ctx, absl::Seconds(2));
      wire::HeartbeatRequest request;
      request.set_rank(o_.rank);
      request.set_generation(generation_);
      request.set_stopping(asked);
      wire::HeartbeatReply reply;
      const grpc::Status status = stub_->Heartbeat(&ctx, request, &reply);
      if (status.ok()) {
        if (reply.stop()) {
          rejoin_ = reply.rejoin();
          return absl::OkStatus();
        }
        last_answer = absl::Now();
      } else if (absl::Now() - last_answer > o_.orphan_timeout) {
        return absl::UnavailableError(
            absl::StrCat("the coordinator at ", o_.coordinator, " has not answered for ",
                         absl::FormatDuration(o_.orphan_timeout), ": ", status.error_message()));
      }
      absl::SleepFor(absl::Milliseconds(300));
    }
  }

  void Shutdown() {
    if (worker_ != nullptr) worker_->Shutdown();
    if (ps_server_ != nullptr) ps_server_->Shutdown(absl::Seconds(2));
    worker_.reset();
    ps_client_.reset();
    ps_server_.reset();
  }

  const NodeOptions& o_;
  std::unique_ptr<wire::Coordinator::Stub> stub_;
  wire::Role role_;
  int64_t generation_ = 0;
  bool rejoin_ = false;
  wire::RegisterReply reply_;
  worker::JobSpec job_;
  std::unique_ptr<ps::rpc::PsServer> ps_server_;
  std::unique_ptr<ps::rpc::GrpcPsClient> ps_client_;
  std::unique_ptr<worker::rpc::StageWorker> worker_;
};

}  // namespace

absl::Status RunNode(const NodeOptions& options, const std::atomic<bool>* stop) {
  Node node(options);
  return node.Run(stop);
}

}  // namespace heterps::launcher::rpc
