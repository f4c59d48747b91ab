// Measuring what a distributed job pays on this host beyond its layers' compute, so that the first
// plan predicts the job's speed (docs/cost_model.md, "Profiles"): the network entry of a profile.
//
//   HETERPS_ASSIGN_OR_RETURN(std::vector<NetworkPoint> points,
//                            ProfileNetwork(spec, 2048, options));
//   NetworkFit w = FitNetwork(points, options.replicas, type.dp_loss);
//   profile.network.push_back({"host-cpu", w.bytes_per_second, w.seconds_per_message});
//
// ProfileNetwork measures, at the given batch size and a quarter of it, on the options' batches
// (the job's data, or random batches shaped as the spec's data): the layers' compute
// (Model::ProfileStep against in-process tables, summed), and a step of the whole model as a job
// of `replicas` replicas runs it on this host, each replica a thread with a GrpcPsClient of its
// own against a PsServer on loopback in this process, through the job's own calls in the job's
// mode. FitNetwork turns the points into a type's network figures W and lat, with which the cost
// model, planning the whole model as one stage on `replicas` units, predicts both measured steps;
// `fit` names a degenerate fit ("latency only", "bytes only", "none"). docs/cost_model.md ("The
// network profile") derives the fit and says what it leaves out.
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
  // A GPU type with a GPU tier (tier.gpu_tier_bytes > 0 on tier.device, a GPU's): the step of
  // one replica as the job runs a one-stage plan there, its GrpcPsClient behind a ps::GpuTier on
  // the device that feeds the stage (the rest of `tier` as ProfileLayers reads it: the look-ahead,
  // the dense parameters held on the device), each step's keys named to the tier first and the
  // next step's after, its gradients accumulated and committed; `replicas` must then be 1. The
  // layers are measured the same way (ProfileLayers with `tier`), and each point's bytes are the
  // tier's traffic: the cost model's, with the tier entry that layer profile measured at that
  // batch (docs/cost_model.md, "The GPU tier").
  ProfileOptions tier;
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
  std::vector<double> network_seconds;  // net(B) = X(B) - layer(B) of each point, >= 0
};

// The W and lat of two points measured with `replicas` replicas, for a type of data-parallel
// loss `beta`: one unit's time per batch is X(B) = step(B) k / (1 + beta (k - 1)), of which the
// layers take layer(B); the rest, net(B), is fitted as bytes(B) / W + messages lat
// (docs/cost_model.md, "The network profile").
NetworkFit FitNetwork(const std::vector<NetworkPoint>& points, int replicas, double beta);

}  // namespace heterps::worker::rpc
