// Measuring what a distributed job pays on this host beyond its layers' compute, so that the first
// plan predicts the job's speed (docs/cost_model.md, "Profiles"): the network entry of a profile.
//
//   HETERPS_ASSIGN_OR_RETURN(std::vector<NetworkPoint> points, ProfileNetwork(spec, 2048,
//   options)); NetworkFit w = FitNetwork(points, options.replicas, type.dp_loss);
//   profile.network.push_back({"host-cpu", w.bytes_per_second, w.seconds_per_message});
//
// At each of two batch sizes (the given one and a quarter of it) it measures, on the options'
// batches (the job's data, or random batches shaped as the spec's data):
//   - the layers' compute: Model::ProfileStep against in-process tables, summed over the layers
//     (what the profile's entries hold);
//   - a synchronous step of the whole model as a job of `replicas` replicas runs it on this host:
//     a PsServer on loopback in this process, each replica a thread with a GrpcPsClient of its
//     own that runs forward and backward on its share of the batch, accumulates its rows'
//     gradients as its part and exchanges its dense sums with the other replicas (a DenseGroup,
//     the job's replicas holding the dense parameters); then the commit. With dense_on_servers,
//     each replica pulls the dense parameters every step and accumulates their gradients with its
//     rows' instead; asynchronous, each pushes its gradients, no commit. The calls are the
//     distributed job's (Stage::PullParameters, ForwardBackward, Accumulate or Push,
//     DenseGroup::Step), and the replicas share the host's cores with the server as the job's
//     processes do. One difference: the dense exchange goes from thread to thread here, over
//     loopback gRPC between the job's processes (a few hundred KB a step at dlrm-small's size).
// FitNetwork turns the points into a type's network figures: with k replicas and the type's beta,
// one unit's time per batch is X(B) = step(B) k / (1 + beta (k - 1)) (the inverse of ET_s(k)), of
// which the layers take layer(B); the rest, net(B) = X(B) - layer(B), is what the cost model's
// DT_s must account for: the RPCs, serialization, the server applying the updates and the cores
// it takes from the replicas. The model counts a whole-model stage's DT as
// `bytes(B) / W + messages lat` (CostModel::Traffic); the two points fit W and lat, so that the
// model, planning that stage with k units, predicts the measured step at both sizes. Where the
// fit is degenerate `fit` says so: the smaller batch's network time not below the larger's (noise):
// "latency only", no per-byte cost, the latency carrying the larger network time; a negative
// intercept: "bytes only", no latency, the rate through the full batch. No points: "none". A plan
// with another number of units is predicted less closely (the model's ET divides the fixed per-step
// costs by the units too).
//
// Median of `repeats` timed steps after `warmup` untimed ones, each figure. The server's data
// directory is a fresh temporary directory, removed after.
//
// Errors: what building the model, starting the server or a step returns (FailedPrecondition
// when the data ends before a timed step).
// Thread safety: function of its arguments; runs the server's threads while it measures.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/model_spec.h"
#include "heterps/worker/profile.h"
#include "heterps/worker/stage.h"

namespace heterps::worker::rpc {

struct NetworkPoint {
  int64_t batch = 0;         // samples per step
  double layer_seconds = 0;  // the layers' compute per step, in process
  double step_seconds = 0;   // one synchronous step of the replicas through the client and server
  double bytes = 0;          // the cost model's DT bytes of the whole model at this batch
  double messages = 0;       // and its messages
};

struct NetworkProfileOptions {
  int warmup = 3;
  int repeats = 9;
  int replicas = 1;  // >= 1
  // false: as an asynchronous job, each replica pushing its gradients (Stage::Push: the server
  // applies them as they come) and no commit.
  bool synchronous = true;
  // Synchronous: the dense parameters through the server, as a job with dense_on_servers
  // (worker/job.h); otherwise held by the replicas (above).
  bool dense_on_servers = false;
  // > 0: the layers' time at the given batch as the profile's entries measured it, used for that
  // point instead of measuring again (so that the fit is against the figures the model plans
  // with; run to run the layers' sum moves by 10-20% on a shared host).
  double layer_seconds = 0;
  // Where the batches come from (the job's data: FileBatches); null: RandomBatches(spec, size, 7).
  BatchSources batches;
  // The tables' optimizers (the job's): what the server's apply costs depends on them.
  ModelOptions model_options;
  // Called before each step with (done, total).
  std::function<void(int, int)> progress;
};

// The given batch's point, then a quarter of it's.
absl::StatusOr<std::vector<NetworkPoint>> ProfileNetwork(const config::ModelSpec& spec, int batch,
                                                         const NetworkProfileOptions& options);

struct NetworkFit {
  double bytes_per_second = 0;          // W: > 0
  double seconds_per_message = 0;       // lat: >= 0
  std::string fit;                      // "two points", "latency only" or "bytes only"
  std::vector<double> network_seconds;  // net(B) of each point (see above), >= 0
};

// The W and lat of two points measured with `replicas` replicas, for a type of data-parallel
// loss `beta` (see above).
NetworkFit FitNetwork(const std::vector<NetworkPoint>& points, int replicas, double beta);

}  // namespace heterps::worker::rpc
