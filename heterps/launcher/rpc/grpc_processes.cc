#include "heterps/launcher/rpc/grpc_processes.h"

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"
#include "heterps/rpc/rpc.h"

namespace heterps::launcher::rpc {

namespace worker_wire = heterps::worker::wire;

GrpcProcesses::GrpcProcesses(CoordinatorService& service, const RunOptions& options,
                             const JobLayout& layout)
    : service_(service), o_(options), layout_(layout) {}

GrpcProcesses::~GrpcProcesses() = default;

std::vector<int> GrpcProcesses::Missing() { return service_.Missing(); }

bool GrpcProcesses::StopAsked() { return service_.StopAsked(o_.stop); }

absl::Status GrpcProcesses::Connect() {
  const std::vector<std::string> addresses = service_.Addresses();
  ps::rpc::GrpcPsClientOptions options;
  for (int s = 0; s < layout_.ps_shards; ++s) options.servers.push_back(addresses[1 + s]);
  options.token = o_.token;
  options.UseJobTls(o_.tls);
  HETERPS_ASSIGN_OR_RETURN(ps_, ps::rpc::GrpcPsClient::Connect(options));
  const heterps::rpc::ChannelOptions channel = heterps::rpc::JobChannel(o_.tls);
  replicas_.clear();
  replicas_.resize(layout_.replicas.size());
  for (size_t s = 0; s < replicas_.size(); ++s) {
    for (int r = 0; r < layout_.replicas[s]; ++r) {
      const std::string& address = addresses[layout_.WorkerRank(static_cast<int>(s), r)];
      replicas_[s].push_back(
          {address, worker_wire::Worker::NewStub(heterps::rpc::NewChannel(address, channel))});
    }
  }
  return absl::OkStatus();
}

ps::PsClient& GrpcProcesses::servers() { return *ps_; }

absl::Status GrpcProcesses::SaveCheckpoint(int64_t step) { return ps_->SaveCheckpoint(step); }

absl::StatusOr<int64_t> GrpcProcesses::LoadCheckpoint(int64_t step, int from_shards) {
  return ps_->LoadCheckpoint(step, from_shards);
}

absl::StatusOr<uint64_t> GrpcProcesses::Digest() { return ps_->Digest(); }

absl::StatusOr<std::vector<ShardStatus>> GrpcProcesses::ServerStats(absl::Duration timeout) {
  HETERPS_ASSIGN_OR_RETURN(const std::vector<ps::rpc::ShardStats> stats, ps_->Stats(timeout));
  std::vector<ShardStatus> out;
  for (const ps::rpc::ShardStats& shard : stats) out.push_back(ToShardStatus(shard));
  return out;
}

template <typename F>
absl::Status GrpcProcesses::Call(int stage, int replica, absl::string_view what, F call,
                                 absl::Duration timeout) {
  Replica& r = replicas_[stage][replica];
  grpc::ClientContext ctx;
  heterps::rpc::PrepareCall(ctx, o_.token,
                            timeout == absl::ZeroDuration() ? o_.step_timeout : timeout);
  {
    absl::MutexLock lock(&live_mu_);
    live_.insert(&ctx);
    if (cancelled_) ctx.TryCancel();
  }
  const grpc::Status status = call(ctx, *r.stub);
  {
    absl::MutexLock lock(&live_mu_);
    live_.erase(&ctx);
  }
  return heterps::rpc::FromGrpc(
      status, absl::StrCat("stage ", stage, " replica ", replica, " (", r.address, "): ", what));
}

absl::StatusOr<worker::StepOutcome> GrpcProcesses::RunStep(int replica,
                                                           const worker::StepRequest& request) {
  worker_wire::StepRequest wire;
  wire.set_step(request.step);
  wire.set_epoch(request.epoch);
  wire.set_offset(request.offset);
  wire.set_count(request.count);
  wire.set_scale(request.scale);
  wire.set_write_back(request.write_back);
  wire.set_next_epoch(request.next_epoch);
  wire.set_next_offset(request.next_offset);
  wire.set_next_count(request.next_count);
  worker_wire::StepReply reply;
  HETERPS_RETURN_IF_ERROR(
      Call(0, replica, absl::StrCat("RunStep ", request.step),
           [&](grpc::ClientContext& ctx, auto& stub) { return stub.RunStep(&ctx, wire, &reply); }));
  worker::StepOutcome out;
  out.loss_sum = reply.loss_sum();
  out.block_losses.assign(reply.block_loss().begin(), reply.block_loss().end());
  out.samples = reply.samples();
  out.skipped_lines = reply.skipped_lines();
  out.first_bad_line = reply.first_bad_line();
  return out;
}

absl::Status GrpcProcesses::Flush(int stage, int replica, int64_t step, bool write_back) {
  worker_wire::FlushRequest request;
  request.set_step(step);
  request.set_write_back(write_back);
  worker_wire::FlushReply reply;
  return Call(
      stage, replica, absl::StrCat("Flush ", step),
      [&](grpc::ClientContext& ctx, auto& stub) { return stub.Flush(&ctx, request, &reply); });
}

absl::Status GrpcProcesses::WriteBack(int stage, int replica) {
  worker_wire::WriteBackRequest request;
  worker_wire::WriteBackReply reply;
  return Call(stage, replica, "WriteBack", [&](grpc::ClientContext& ctx, auto& stub) {
    return stub.WriteBack(&ctx, request, &reply);
  });
}

absl::StatusOr<worker::EvalOutcome> GrpcProcesses::Evaluate(int replica, int64_t step) {
  worker_wire::EvalRequest request;
  request.set_step(step);
  worker_wire::EvalReply reply;
  HETERPS_RETURN_IF_ERROR(Call(
      0, replica, "Evaluate",
      [&](grpc::ClientContext& ctx, auto& stub) { return stub.Evaluate(&ctx, request, &reply); },
      o_.eval_timeout));
  const size_t n = reply.probabilities().size() / sizeof(float);
  if (reply.probabilities().size() % sizeof(float) != 0 ||
      reply.labels().size() != n * sizeof(float)) {
    return absl::InternalError(absl::StrCat("stage 0 replica ", replica,
                                            ": evaluation: probabilities and labels differ in "
                                            "number"));
  }
  worker::EvalOutcome out;
  const float* p = reinterpret_cast<const float*>(reply.probabilities().data());
  const float* y = reinterpret_cast<const float*>(reply.labels().data());
  out.probabilities.assign(p, p + n);
  out.labels.assign(y, y + n);
  out.skipped_lines = reply.skipped();
  out.first_bad_line = reply.first_bad_line();
  return out;
}

absl::StatusOr<ReplicaFigures> GrpcProcesses::Stats(int stage, int replica,
                                                    absl::Duration timeout) {
  worker_wire::WorkerStats s;
  HETERPS_RETURN_IF_ERROR(Call(
      stage, replica, "Stats",
      [&](grpc::ClientContext& ctx, auto& stub) {
        return stub.Stats(&ctx, worker_wire::WorkerStatsRequest(), &s);
      },
      timeout));
  ReplicaFigures out;
  worker::ReplicaStats& r = out.stats;
  r.micro_batches = s.micro_batches();
  r.busy_seconds = s.busy_seconds();
  r.idle_seconds = s.idle_seconds();
  r.send_seconds = s.send_seconds();
  r.ps_seconds = s.ps_seconds();
  r.prefetch_seconds = s.prefetch_seconds();
  r.step_end_seconds = s.step_end_seconds();
  r.write_back_seconds = s.write_back_seconds();
  r.lookup_seconds = s.lookup_seconds();
  r.dense_seconds = s.dense_seconds();
  r.rows_seconds = s.rows_seconds();
  r.gradients_seconds = s.gradients_seconds();
  r.read_seconds = s.read_seconds();
  r.run_seconds = s.run_seconds();
  r.queue_depth = s.queue_depth();
  r.in_flight = s.in_flight();
  r.pcie_bytes = s.pcie_bytes();
  r.tier_hits = s.tier_hits();
  r.tier_misses = s.tier_misses();
  r.tier_loaded_rows = s.tier_loaded_rows();
  r.tier_ahead_rows = s.tier_ahead_rows();
  r.tier_written_back_rows = s.tier_written_back_rows();
  r.tier_feeds_stage = s.tier_feeds_stage();
  r.dense_held = s.dense_held();
  out.bytes_sent = s.bytes_sent();
  out.forward_bytes = s.forward_bytes();
  out.back_bytes = s.back_bytes();
  out.ps_rpcs = heterps::rpc::FromProto(s.ps_rpcs());
  return out;
}

void GrpcProcesses::CancelAll() {
  absl::MutexLock lock(&live_mu_);
  cancelled_ = true;
  for (grpc::ClientContext* ctx : live_) ctx->TryCancel();
}

void GrpcProcesses::Resume() {
  absl::MutexLock lock(&live_mu_);
  cancelled_ = false;
}

}  // namespace heterps::launcher::rpc
