// The processes of one attempt over gRPC (launcher/attempt.h, AttemptProcesses): the
// coordinator's service for registration and stop requests, a GrpcPsClient to the parameter
// servers, and a stub to every stage replica (worker.proto) whose calls carry the job's token and
// a deadline (the options' step_timeout, eval_timeout for an evaluation) and whose errors name
// the replica and its address. Not part of the public API (coordinator.h is).
//
// Thread safety: as AttemptProcesses; Connect once, before the other calls but Missing and
// StopAsked.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "heterps/launcher/attempt.h"
#include "heterps/launcher/rpc/coordinator.h"
#include "heterps/launcher/rpc/coordinator_service.h"
#include "heterps/ps/rpc/grpc_ps_client.h"
#include "heterps/worker/rpc/worker.grpc.pb.h"

namespace heterps::launcher::rpc {

class GrpcProcesses final : public AttemptProcesses {
 public:
  // The processes `layout` places, as they register with `service`. Both, and `options`, must
  // outlive it.
  GrpcProcesses(CoordinatorService& service, const RunOptions& options, const JobLayout& layout);
  ~GrpcProcesses() override;

  std::vector<int> Missing() override;
  bool StopAsked() override;
  absl::Status Connect() override;
  ps::PsClient& servers() override;
  absl::Status SaveCheckpoint(int64_t step) override;
  absl::StatusOr<int64_t> LoadCheckpoint(int64_t step, int from_shards) override;
  absl::StatusOr<uint64_t> Digest() override;
  absl::StatusOr<std::vector<ShardStatus>> ServerStats(absl::Duration timeout) override;
  absl::StatusOr<worker::StepOutcome> RunStep(int replica,
                                              const worker::StepRequest& request) override;
  absl::Status Flush(int stage, int replica, int64_t step, bool write_back) override;
  absl::Status WriteBack(int stage, int replica) override;
  absl::StatusOr<worker::EvalOutcome> Evaluate(int replica, int64_t step) override;
  absl::StatusOr<ReplicaFigures> Stats(int stage, int replica, absl::Duration timeout) override;
  void CancelAll() override;
  void Resume() override;

 private:
  struct Replica {
    std::string address;
    std::unique_ptr<worker::wire::Worker::Stub> stub;
  };
  // Replica (stage, replica)'s call `call(ctx, stub)` named `what`, within `timeout` (zero: the
  // options' step_timeout), cancelled by CancelAll.
  template <typename F>
  absl::Status Call(int stage, int replica, absl::string_view what, F call,
                    absl::Duration timeout = absl::ZeroDuration());

  CoordinatorService& service_;
  const RunOptions& o_;
  const JobLayout& layout_;
  std::unique_ptr<ps::rpc::GrpcPsClient> ps_;
  std::vector<std::vector<Replica>> replicas_;  // [stage][replica], from Connect
  absl::Mutex live_mu_;
  std::set<grpc::ClientContext*> live_ ABSL_GUARDED_BY(live_mu_);  // the calls in flight
  bool cancelled_ ABSL_GUARDED_BY(live_mu_) = false;
};

}  // namespace heterps::launcher::rpc
