#include "heterps/worker/rpc/network_profile.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "heterps/dense/default_backends.h"
#include "heterps/ps/gpu/gpu_tier.h"
#include "heterps/ps/rpc/grpc_ps_client.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/worker/dense_group.h"
#include "heterps/worker/model.h"
#include "heterps/worker/profile.h"
#include "heterps/worker/stage.h"

namespace heterps::worker::rpc {
namespace {

// The per-byte cost set where the network shows none (1 PB/s: finite, for the profile's JSON).
constexpr double kNoByteCost = 1e15;

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The model's DT traffic of the whole model at `batch` samples per step; with a GPU tier's entry
// (measured at that batch), the traffic of the tier's stage.
absl::StatusOr<cost::StageTraffic> WholeModelTraffic(config::ModelSpec spec, int64_t batch,
                                                     const cost::TierEntry* tier = nullptr) {
  spec.batch_size = batch;
  config::ClusterSpec cluster;
  cluster.types.emplace_back();
  cluster.types.back().name = "network";
  cost::Workload workload = cost::ColocatedWorkload(1, 1);
  cost::Profile profile{spec.name, batch, "", {}, {}, {}};
  if (tier != nullptr) {
    workload.gpu_tier = true;
    workload.tier_holds_dense = tier->dense_held;  // as the step held them
    profile.tier.push_back(*tier);
    profile.tier.back().type = "network";
  }
  HETERPS_ASSIGN_OR_RETURN(const cost::CostModel model,
                           cost::CostModel::Create(spec, cluster, workload, &profile));
  return model.Traffic(0, model.num_layers() - 1, 0);
}

// A directory of its own under the system's temporary directory, removed when it goes.
class TempDir {
 public:
  static absl::StatusOr<TempDir> Make() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "heterps-network-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      return absl::InternalError(absl::StrCat("cannot create a temporary directory ", pattern));
    }
    return TempDir(pattern);
  }
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// The replicas' dense exchange, thread to thread: Send delivers at once.
class ThreadPeers : public DensePeers {
 public:
  std::vector<DenseGroup*> groups;
  absl::Status Send(int target, const DenseMessage& message) override {
    groups[target]->Deliver(message);
    return absl::OkStatus();
  }
};

// The median seconds of a synchronous step of the whole model by `options.replicas` replicas
// (threads, a GrpcPsClient each) through a PsServer on loopback, on `batch`-sample batches of
// `next`.
absl::StatusOr<double> NetworkStepSeconds(const config::ModelSpec& spec, int64_t batch,
                                          const BatchSource& next,
                                          const NetworkProfileOptions& options,
                                          const std::function<void()>& tick) {
  HETERPS_ASSIGN_OR_RETURN(TempDir dir, TempDir::Make());
  ps::rpc::PsServerOptions server_options;
  server_options.data_dir = dir.path();
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ps::rpc::PsServer> server,
                           ps::rpc::PsServer::Start(server_options));
  ps::rpc::GrpcPsClientOptions client_options;
  client_options.servers = {server->address()};
  struct Replica {
    std::unique_ptr<ps::rpc::GrpcPsClient> client;
    std::unique_ptr<Stage> stage;
    std::unique_ptr<DenseGroup> dense;  // the dense parameters held by the replicas
    Activations input;
    ParameterGrads grads;
    StepGrads sums;
    absl::Status status;
  };
  const int k = options.replicas;
  const bool held = options.synchronous && !options.dense_on_servers;
  ThreadPeers peers;
  std::vector<Replica> replicas(k);
  const int last = static_cast<int>(spec.layers.size()) - 1;
  for (int r = 0; r < k; ++r) {
    Replica& rep = replicas[r];
    HETERPS_ASSIGN_OR_RETURN(rep.client, ps::rpc::GrpcPsClient::Connect(client_options));
    if (r == 0) {
      HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, rep.client.get(), options.model_options));
    }
    HETERPS_ASSIGN_OR_RETURN(rep.stage, Stage::Create(spec, 0, last, rep.client.get()));
    rep.grads = rep.stage->NewGrads();
    rep.sums = rep.stage->NewStepGrads();
    if (held) {
      rep.dense = std::make_unique<DenseGroup>(kDenseTable, rep.stage->dense_blocks(),
                                               options.model_options.dense_optimizer, r, k, &peers,
                                               rep.client.get());
      peers.groups.push_back(rep.dense.get());
    }
  }
  std::vector<double> seconds;
  data::Batch data;
  for (int i = 0; i < options.warmup + options.repeats; ++i) {
    tick();
    HETERPS_ASSIGN_OR_RETURN(const bool more, next(&data));
    if (!more) break;
    // Replica r's share: a block of consecutive samples (one micro-batch each).
    const int64_t block = (data.size + k - 1) / k;
    const std::vector<MicroBatch> shares = MicroBatches(data.size, block, {k, 0});
    if (held && static_cast<int>(shares.size()) != k) {
      return absl::FailedPreconditionError(
          absl::StrCat("network profile: a batch of ", data.size, " samples for ", k, " replicas"));
    }
    const float scale = 1.0f / static_cast<float>(data.size);
    const absl::Time start = absl::Now();
    const auto run = [&](Replica& rep, const MicroBatch& share) {
      if (!held) {
        rep.status = rep.stage->PullParameters();
      } else if (!rep.dense->loaded()) {
        rep.status = rep.stage->UpdateDense(
            [&](std::vector<AlignedFloats>& values) { return rep.dense->Load(values); });
      }
      if (!rep.status.ok()) return;
      if (options.synchronous) rep.stage->set_block_rows(block);
      InputActivations(data, share.begin, share.size, &rep.input);
      rep.status = rep.stage->ForwardBackward(0, rep.input, scale, nullptr, &rep.grads).status();
      if (!rep.status.ok()) return;
      if (!options.synchronous) {
        rep.status = rep.stage->Push(rep.grads);
        return;
      }
      rep.sums.Clear();
      rep.sums.Add(share.first_block, rep.grads);
      rep.status = rep.stage->Accumulate(rep.sums, !held);
      if (!rep.status.ok() || !held) return;
      rep.status = rep.stage->UpdateDense([&](std::vector<AlignedFloats>& values) {
        return rep.dense->Step(i, rep.sums, values, nullptr);
      });
    };
    std::vector<std::thread> threads;
    for (size_t s = 1; s < shares.size(); ++s) {
      threads.emplace_back(run, std::ref(replicas[shares[s].replica]), std::cref(shares[s]));
    }
    run(replicas[shares[0].replica], shares[0]);
    for (std::thread& t : threads) t.join();
    for (const Replica& rep : replicas) HETERPS_RETURN_IF_ERROR(rep.status);
    if (options.synchronous) HETERPS_RETURN_IF_ERROR(replicas[0].client->Commit());
    if (i >= options.warmup) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
  }
  replicas.clear();
  server->Shutdown(absl::Seconds(1));
  if (seconds.empty()) {
    return absl::FailedPreconditionError("network profile: the data ended before a step was timed");
  }
  return Median(std::move(seconds));
}

// The median seconds of a synchronous step of the whole model on the device path (options.tier):
// one replica, its GrpcPsClient behind a GpuTier on the device, through a PsServer on loopback.
absl::StatusOr<double> TierStepSeconds(const config::ModelSpec& spec, const BatchSource& next,
                                       const NetworkProfileOptions& options,
                                       const std::function<void()>& tick) {
  HETERPS_ASSIGN_OR_RETURN(TempDir dir, TempDir::Make());
  ps::rpc::PsServerOptions server_options;
  server_options.data_dir = dir.path();
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ps::rpc::PsServer> server,
                           ps::rpc::PsServer::Start(server_options));
  ps::rpc::GrpcPsClientOptions client_options;
  client_options.servers = {server->address()};
  std::vector<double> seconds;
  {
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<ps::rpc::GrpcPsClient> client,
                             ps::rpc::GrpcPsClient::Connect(client_options));
    HETERPS_RETURN_IF_ERROR(CreateModelTables(spec, client.get(), options.model_options));
    HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<dense::DenseBackend> backend,
                             dense::DefaultBackends().Create(options.tier.device, {}));
    if (backend->gpu_device() == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "network profile: a GPU tier needs a GPU device, not '", options.tier.device, "'"));
    }
    ProfileOptions device = options.tier;
    device.tables = options.model_options;
    HETERPS_ASSIGN_OR_RETURN(TierStage on,
                             TierStage::Create(spec, device, client.get(), backend.get()));
    ps::GpuTier* tier = on.tier.get();
    Stage* stage = on.stage.get();
    DenseGroup* dense = on.dense.get();
    ParameterGrads grads = stage->NewGrads();
    StepGrads sums = stage->NewStepGrads();
    Activations in, next_in;
    // The replica reads the next step's share while this one runs: not timed.
    BatchesAhead batches;
    const data::Batch& batch = batches.batch;
    const int total = options.warmup + options.repeats;
    for (int i = 0; i < total; ++i) {
      tick();
      HETERPS_ASSIGN_OR_RETURN(const bool more, batches.Advance(next, i, total));
      if (!more) break;
      const bool have_ahead = batches.has_ahead;
      const data::Batch& ahead = batches.ahead;
      const absl::Time start = absl::Now();
      InputActivations(batch, 0, batch.size, &in);
      HETERPS_RETURN_IF_ERROR(stage->Prefetch(in));
      if (have_ahead && options.tier.tier_lookahead) {
        InputActivations(ahead, 0, ahead.size, &next_in);
        HETERPS_RETURN_IF_ERROR(stage->Anticipate(next_in));
      }
      if (dense == nullptr) HETERPS_RETURN_IF_ERROR(stage->PullParameters());
      stage->set_block_rows(batch.size);
      HETERPS_RETURN_IF_ERROR(
          stage->ForwardBackward(0, in, 1.0f / static_cast<float>(batch.size), nullptr, &grads)
              .status());
      sums.Clear();
      sums.Add(0, grads);
      HETERPS_RETURN_IF_ERROR(stage->Accumulate(sums, dense == nullptr));
      HETERPS_RETURN_IF_ERROR(tier->Commit());
      if (dense != nullptr) HETERPS_RETURN_IF_ERROR(dense->StepHeld(*stage));
      HETERPS_RETURN_IF_ERROR(backend->gpu_device()->Synchronize());
      if (i >= options.warmup) seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    HETERPS_RETURN_IF_ERROR(tier->Flush());
  }
  server->Shutdown(absl::Seconds(1));
  if (seconds.empty()) {
    return absl::FailedPreconditionError("network profile: the data ended before a step was timed");
  }
  return Median(std::move(seconds));
}

}  // namespace

NetworkFit FitNetwork(const std::vector<NetworkPoint>& points, int replicas, double beta) {
  NetworkFit out;
  if (points.empty()) {
    out.fit = "none";
    out.bytes_per_second = kNoByteCost;
    return out;
  }
  const double k = std::max(replicas, 1);
  for (const NetworkPoint& p : points) {
    const double unit = p.step_seconds * k / (1 + beta * (k - 1));
    out.network_seconds.push_back(std::max(unit - p.layer_seconds, 0.0));
  }
  const NetworkPoint& big = points.front();
  const NetworkPoint& small = points.back();
  const double w1 = out.network_seconds.front(), w2 = out.network_seconds.back();
  const double m = big.messages;
  if (big.bytes > small.bytes && w1 > w2) {
    const double per_byte = (w1 - w2) / (big.bytes - small.bytes);
    const double fixed = w1 - per_byte * big.bytes;
    if (fixed >= 0 && m > 0) {
      out.fit = "two points";
      out.bytes_per_second = 1 / per_byte;
      out.seconds_per_message = fixed / m;
      return out;
    }
    out.fit = "bytes only";
    out.bytes_per_second = big.bytes / w1;
    out.seconds_per_message = 0;
    return out;
  }
  out.fit = "latency only";
  out.bytes_per_second = kNoByteCost;
  out.seconds_per_message = m > 0 ? std::max(w1, w2) / m : 0;
  if (m <= 0 && w1 > 0 && big.bytes > 0) {
    out.fit = "bytes only";
    out.bytes_per_second = big.bytes / w1;
  }
  return out;
}

absl::StatusOr<std::vector<NetworkPoint>> ProfileNetwork(const config::ModelSpec& spec, int batch,
                                                         const NetworkProfileOptions& options) {
  if (batch < 1) return absl::InvalidArgumentError("network profile: the batch must be >= 1");
  if (options.replicas < 1) {
    return absl::InvalidArgumentError("network profile: the replicas must be >= 1");
  }
  const bool tier = options.tier.gpu_tier_bytes > 0;
  if (tier && (options.replicas != 1 || !options.synchronous)) {
    return absl::InvalidArgumentError(
        "network profile: a GPU tier's stage is one replica of a synchronous job");
  }
  const std::vector<int64_t> sizes = {batch, std::max(1, batch / 4)};
  const auto measures_layers = [&](int64_t b) {
    return !(b == batch && options.layer_seconds > 0);
  };
  const int steps = options.warmup + options.repeats;
  int total = 0;
  for (const int64_t b : sizes) total += (measures_layers(b) || tier ? 2 : 1) * steps;
  int done = 0;
  const auto tick = [&] {
    if (options.progress) options.progress(done, total);
    ++done;
  };
  const BatchSources batches = options.batches ? options.batches : [&spec](int size) {
    return RandomBatches(spec, size, 7);
  };
  std::vector<NetworkPoint> points;
  for (const int64_t b : sizes) {
    config::ModelSpec at = spec;
    at.batch_size = b;
    NetworkPoint p;
    p.batch = b;
    // The layers (with a tier: its entry, which the traffic needs, at every batch).
    std::optional<cost::TierEntry> measured;
    if (!measures_layers(b) && !tier) {
      p.layer_seconds = options.layer_seconds;
    } else {
      ProfileOptions layers = tier ? options.tier : ProfileOptions();
      layers.tables = options.model_options;
      layers.warmup = options.warmup;
      layers.repeats = options.repeats;
      layers.type = "network";
      layers.progress = [&](int, int) { tick(); };
      HETERPS_ASSIGN_OR_RETURN(const HostProfile in_process,
                               ProfileLayers(at, batches(static_cast<int>(b)), layers));
      p.layer_seconds = measures_layers(b) ? in_process.total_seconds : options.layer_seconds;
      if (!in_process.profile.tier.empty()) measured = in_process.profile.tier.front();
    }
    if (tier && !measured) {
      return absl::InvalidArgumentError(absl::StrCat(
          "network profile: no GPU tier could be measured on '", options.tier.device, "'"));
    }
    HETERPS_ASSIGN_OR_RETURN(const cost::StageTraffic traffic,
                             WholeModelTraffic(spec, b, measured ? &*measured : nullptr));
    p.bytes = traffic.bytes;
    p.messages = traffic.messages;
    const BatchSource source = batches(static_cast<int>(b));
    HETERPS_ASSIGN_OR_RETURN(p.step_seconds,
                             tier ? TierStepSeconds(at, source, options, tick)
                                  : NetworkStepSeconds(at, b, source, options, tick));
    points.push_back(p);
  }
  return points;
}

}  // namespace heterps::worker::rpc
