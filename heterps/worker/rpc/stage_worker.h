// One replica of one stage of a distributed job, served over gRPC (worker.proto, service Worker;
// docs/runtime.md): the transport around a PipelineReplica (worker/pipeline_replica.h), which
// holds the engine. Micro-batches flow on bidirectional streams: a replica opens one to each
// replica of the next stage at its first use, sends activations on it and reads the answers
// (gradients, or probabilities when evaluating) from it.
//
//   HETERPS_ASSIGN_OR_RETURN(auto worker, StageWorker::Start({.token = token}));
//   ... register worker->address() with the coordinator, receive the job and its peers ...
//   HETERPS_RETURN_IF_ERROR(worker->Configure(job, stage, replica, next_stage_addresses,
//                                             this_stage_addresses, client));
//   ... serve until the job ends ...
//   worker->Shutdown();
//
// Calls that arrive before Configure wait for it (or for Shutdown). Every call must carry the
// job's token.
//
// Thread safety: Configure, Shutdown and the accessors may be called from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/ps/ps_client.h"
#include "heterps/rpc/job_tls.h"
#include "heterps/worker/job.h"

namespace heterps::worker::rpc {

struct StageWorkerOptions {
  std::string host = "127.0.0.1";  // the address to serve on
  int port = 0;                    // 0: a free port
  std::string token;               // the job's; every call must carry it
  heterps::rpc::JobTls tls;        // the job's certificate: serves and calls the next stage in TLS
};

class StageWorker {
 public:
  // Starts serving. Unavailable naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<StageWorker>> Start(const StageWorkerOptions& options);
  ~StageWorker();  // Shutdown()

  std::string address() const;

  // Sets the replica up as replica `replica` of stage `stage` of `job`, the next stage's replicas
  // at `next` (empty for the last stage), its own stage's at `same` (this one's included: the
  // dense exchange of a synchronous job, worker/dense_group.h). `job` and `client` must outlive
  // the worker. InvalidArgument when the replica is not the job's, its stage cannot be built, or
  // `same` does not list the stage's replicas.
  absl::Status Configure(const JobSpec& job, int stage, int replica, std::vector<std::string> next,
                         std::vector<std::string> same, ps::PsClient* client);

  // Stops serving and the compute thread; micro-batches in flight are dropped.
  void Shutdown();

 private:
  class Impl;
  explicit StageWorker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::worker::rpc
