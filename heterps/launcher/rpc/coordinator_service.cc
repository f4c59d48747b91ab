#include "heterps/launcher/rpc/coordinator_service.h"

#include "absl/strings/str_cat.h"
#include "heterps/base/log.h"

namespace heterps::launcher::rpc {

using heterps::rpc::ToGrpc;

CoordinatorService::CoordinatorService(std::string token, std::string job_id, std::string job_dir,
                                       std::string job_json, JobLayout layout)
    : auth_(std::move(token)),
      job_id_(std::move(job_id)),
      job_dir_(std::move(job_dir)),
      job_json_(std::move(job_json)),
      layout_(std::move(layout)) {
  Reset(1);
}

void CoordinatorService::Reset(int64_t generation) {
  absl::MutexLock lock(&mu_);
  generation_ = generation;
  addresses_.assign(layout_.world(), "");
  told_.assign(layout_.world(), false);
  stopping_ = false;
}

void CoordinatorService::Relayout(int64_t generation, std::string job_json, JobLayout layout,
                                  bool rejoin) {
  {
    absl::MutexLock lock(&mu_);
    job_json_ = std::move(job_json);
    layout_ = std::move(layout);
    rejoin_ = rejoin;
  }
  Reset(generation);
}

void CoordinatorService::Stop() {
  absl::MutexLock lock(&mu_);
  stopping_ = true;
}

void CoordinatorService::AwaitStopHeard(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto heard = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t r = 1; r < told_.size(); ++r) {
      if (!addresses_[r].empty() && !told_[r]) return false;
    }
    return true;
  };
  mu_.AwaitWithTimeout(absl::Condition(&heard), timeout);
}

std::vector<int> CoordinatorService::Missing() {
  absl::MutexLock lock(&mu_);
  std::vector<int> missing;
  for (int r = 1; r < layout_.world(); ++r) {
    if (addresses_[r].empty()) missing.push_back(r);
  }
  return missing;
}

std::vector<std::string> CoordinatorService::Addresses() {
  absl::MutexLock lock(&mu_);
  return addresses_;
}

grpc::Status CoordinatorService::Hello(grpc::ServerContext* ctx, const wire::HelloRequest* request,
                                       wire::HelloReply* reply) {
  if (grpc::Status denied = auth_.Check(ctx, "Hello"); !denied.ok()) return denied;
  absl::MutexLock lock(&mu_);
  if (request->world() != layout_.world() || request->rank() < 1 ||
      request->rank() >= layout_.world()) {
    return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
        "rank ", request->rank(), " of ", request->world(), ": the job has ", layout_.world(),
        " processes (1 coordinator, ", layout_.ps_shards, " parameter servers, ",
        layout_.world() - 1 - layout_.ps_shards, " stage replicas)")));
  }
  const RoleSlot& slot = layout_.ranks[request->rank()];
  wire::Role* role = reply->mutable_role();
  if (slot.kind == RoleSlot::Kind::kPs) {
    role->set_kind(wire::Role::PS);
    role->set_shard(slot.shard);
    role->set_shards(layout_.ps_shards);
    role->set_data_dir(absl::StrCat(job_dir_, "/ps-", slot.shard));
    role->set_job_id(job_id_);
  } else {
    role->set_kind(wire::Role::WORKER);
    role->set_stage(slot.stage);
    role->set_replica(slot.replica);
  }
  reply->set_generation(generation_);
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Register(grpc::ServerContext* ctx,
                                          const wire::RegisterRequest* request,
                                          wire::RegisterReply* reply) {
  if (grpc::Status denied = auth_.Check(ctx, "Register"); !denied.ok()) return denied;
  absl::MutexLock lock(&mu_);
  if (request->generation() != generation_ || request->rank() < 1 ||
      request->rank() >= layout_.world()) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this process belongs to an attempt of the job that is over");
  }
  addresses_[request->rank()] = request->address();
  const int64_t generation = generation_;
  auto ready = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (stopping_ || generation_ != generation) return true;
    for (int r = 1; r < layout_.world(); ++r) {
      if (addresses_[r].empty()) return false;
    }
    return true;
  };
  while (!ready()) {
    if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
    mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
  }
  if (stopping_ || generation_ != generation) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the attempt is over");
  }
  reply->set_job(job_json_);
  for (int s = 0; s < layout_.ps_shards; ++s) reply->add_ps(addresses_[1 + s]);
  for (size_t stage = 0; stage < layout_.replicas.size(); ++stage) {
    wire::StageAddresses* out = reply->add_stages();
    for (int r = 0; r < layout_.replicas[stage]; ++r) {
      out->add_replicas(addresses_[layout_.WorkerRank(static_cast<int>(stage), r)]);
    }
  }
  return grpc::Status::OK;
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* ctx,
                                           const wire::HeartbeatRequest* request,
                                           wire::HeartbeatReply* reply) {
  if (grpc::Status denied = auth_.Check(ctx, "Heartbeat"); !denied.ok()) return denied;
  absl::MutexLock lock(&mu_);
  // A process of this attempt that was signalled while the job runs (not one the coordinator's
  // own launcher is stopping: that comes after Stop, or from an attempt before Reset).
  if (request->stopping() && request->generation() == generation_ && !stopping_ &&
      !stop_asked_.exchange(true)) {
    base::LogLine(absl::StrCat("rank ", request->rank(),
                               " was asked to stop: the job stops at its next step"));
  }
  reply->set_stop(stopping_ || request->generation() != generation_);
  // A process of an attempt before a switch, under an external launcher: it is wanted again.
  reply->set_rejoin(rejoin_ && !stopping_ && request->generation() != generation_);
  if (reply->stop() && request->generation() == generation_ && request->rank() > 0 &&
      request->rank() < static_cast<int>(told_.size())) {
    told_[request->rank()] = true;
  }
  return grpc::Status::OK;
}

}  // namespace heterps::launcher::rpc
