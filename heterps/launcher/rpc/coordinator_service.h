// The coordinator's service (coordinator.proto): who each rank is, where every process serves,
// and whether the job still wants it. The job description itself is sent whole, once, in the
// Register reply. Not part of the public API (coordinator.h is).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "heterps/launcher/layout.h"
#include "heterps/launcher/rpc/coordinator.grpc.pb.h"
#include "heterps/rpc/rpc.h"

namespace heterps::launcher::rpc {

class CoordinatorService final : public wire::Coordinator::Service {
 public:
  // `job_json`: the job description (worker::JobToJson); `job_id` names the job's checkpoints.
  // Ready for attempt 1.
  CoordinatorService(std::string token, std::string job_id, std::string job_dir,
                     std::string job_json, JobLayout layout);

  const std::string& job_id() const { return job_id_; }

  // A new attempt: forget the registrations, tell the old processes to stop.
  void Reset(int64_t generation);
  // A new attempt on another plan (a switch): as Reset, with the new job and layout. `rejoin`:
  // the old processes are told to ask again for a role (an external launcher's processes, which
  // nobody restarts) instead of ending.
  void Relayout(int64_t generation, std::string job_json, JobLayout layout, bool rejoin);
  // The job (or this attempt) is over: every heartbeat answers "stop".
  void Stop();
  // Waits up to `timeout` for every registered process to have heard that the job is over, so
  // that none is left asking a coordinator that has gone (and ending in error).
  void AwaitStopHeard(absl::Duration timeout);
  // Whether the job was asked to stop: `stop` (rank 0's signal flag, may be null) or a
  // heartbeat of a process of the current attempt that was asked while the job ran
  // (HeartbeatRequest.stopping; not one this coordinator's launcher stops after Stop or Reset).
  bool StopAsked(const std::atomic<bool>* stop) const {
    return (stop != nullptr && stop->load()) || stop_asked_.load();
  }
  // Ranks that have not registered yet.
  std::vector<int> Missing();
  // Where each rank serves (empty while it has not registered).
  std::vector<std::string> Addresses();

  grpc::Status Hello(grpc::ServerContext* ctx, const wire::HelloRequest* request,
                     wire::HelloReply* reply) override;
  grpc::Status Register(grpc::ServerContext* ctx, const wire::RegisterRequest* request,
                        wire::RegisterReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const wire::HeartbeatRequest* request,
                         wire::HeartbeatReply* reply) override;

 private:
  heterps::rpc::TokenCheck auth_;
  const std::string job_id_;
  const std::string job_dir_;
  absl::Mutex mu_;
  std::string job_json_ ABSL_GUARDED_BY(mu_);
  JobLayout layout_ ABSL_GUARDED_BY(mu_);
  bool rejoin_ ABSL_GUARDED_BY(mu_) = false;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);  // by rank
  std::vector<bool> told_ ABSL_GUARDED_BY(mu_);              // by rank: heard "stop"
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_asked_{false};  // a process's heartbeat said it was asked to stop
};

}  // namespace heterps::launcher::rpc
