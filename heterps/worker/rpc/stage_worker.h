// One replica of one stage of a distributed job, served over gRPC (runtime.proto, service
// Worker; docs/runtime.md).
//
//   HETERPS_ASSIGN_OR_RETURN(auto worker, StageWorker::Start({.token = token}));
//   ... register worker->address() with the coordinator, receive the job's layout ...
//   HETERPS_RETURN_IF_ERROR(worker->Configure(config, ps_client));
//   ... serve until the job ends ...
//   worker->Shutdown();
//
// A replica computes on one thread (one unit of its type): a queue of tasks, gradients before new
// forward passes, so that micro-batches in flight finish and free their memory first. Stage 0
// reads its share of every mini-batch (RunStep), cuts it into micro-batches and sends each
// forward; every later stage receives micro-batches from the replicas of the stage before it
// (Exchange), runs them, and passes them on to replica `order mod replicas` of the next stage, or,
// at the last stage, runs the loss and sends the gradients back. The gradients come back on the
// same streams, and each stage runs its backward on the way.
//
// Parameters: in synchronous training a replica pulls its dense parameters once per step, keeps
// each micro-batch's gradients apart, and at Flush sums them in micro-batch order and sends the
// sum to the parameter servers as its part of the step (PsClient::AccumulateSparse/Dense; the
// coordinator commits): the result does not depend on which replica ran what, or when. In
// asynchronous training a replica pushes every micro-batch's gradients as soon as its backward
// is done, and pulls fresh dense parameters whenever a new step begins and nothing is in flight.
//
// Thread safety: Configure, Shutdown and the accessors may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/reader.h"
#include "heterps/ps/ps_client.h"

namespace heterps::worker::rpc {

struct StageWorkerOptions {
  std::string host = "127.0.0.1";  // the address to serve on
  int port = 0;                    // 0: a free port
  std::string token;               // the job's; every call must carry it
};

// What a replica needs to know of the job (from the coordinator's RegisterReply).
struct StageWorkerConfig {
  config::ModelSpec spec;
  int stage = 0, replica = 0;
  struct Stage {
    int first = 0, last = 0;            // spec layers
    std::vector<std::string> replicas;  // addresses
  };
  std::vector<Stage> stages;
  int64_t micro_batch = 256;  // samples per micro-batch
  bool sync = true;
  data::ReaderOptions data;  // stage 0: files, eval_every, bad-line policy (rank and world are
                             // set from the replica and the stage's replicas)
};

class StageWorker {
 public:
  // Starts serving. Unavailable naming the address when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<StageWorker>> Start(const StageWorkerOptions& options);
  ~StageWorker();  // Shutdown()

  std::string address() const;

  // Sets the replica up for the job: builds its Stage against `client` (which must outlive the
  // worker) and, for stage 0, opens its share of the data. Calls that arrive before wait for it.
  // InvalidArgument for a layout that does not fit the spec.
  absl::Status Configure(const StageWorkerConfig& config, ps::PsClient* client);

  // Stops serving and the compute thread; micro-batches in flight are dropped.
  void Shutdown();

 private:
  class Impl;
  explicit StageWorker(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::worker::rpc
