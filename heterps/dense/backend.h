// Where a stage's dense layers run: the seam between the model's stages (heterps/worker) and the
// devices. A backend serves one device ("cpu": this host's cores, dense/cpu; "cuda:N": a GPU,
// dense/gpu; "twin:N": the host twin of a GPU, the same code as cuda:N run on the host) and
// builds *chains*: runs of consecutive dense layers (fc, interaction, logloss) of a spec that
// take a micro-batch's activations from host memory and give their results back to it. What a
// chain does in between (copies to a device, kernels, GEMMs) is its backend's business; the
// stage only sees host matrices.
//
//   HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<DenseBackend> backend,
//                            DefaultBackends().Create("cpu", BackendOptions()));   // (1)
//   HETERPS_ASSIGN_OR_RETURN(auto chain, backend->NewChain(spec, first, last));
//   HETERPS_RETURN_IF_ERROR(chain->SetParameters(blocks));      // one per fc layer
//   HETERPS_ASSIGN_OR_RETURN(const Matrix<float>* out, chain->Forward(ctx, dense, vectors,
//   true));
//   ... chain->Loss(ctx, labels, scale) for the chain with the loss ...
//   HETERPS_ASSIGN_OR_RETURN(DenseChain::InputGrads d_in,
//                            chain->Backward(ctx, &d_out, /*want_dense=*/true, grads));
//
// (1) default_backends.h: every backend this build has, by name.
//
// A micro-batch in flight lives in a context (an integer >= 0 chosen by the caller): a chain
// keeps each context's state from its Forward to its Backward and reuses its buffers for the next
// micro-batch. Matrices are row-major, one sample per row. Parameters are one block per fc layer,
// [W (out x in) | b (out)], as the parameter server's dense table holds them.
//
// Thread safety: a chain is used by one thread at a time; a backend's NewChain and stats may
// be called from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "Eigen/Core"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "heterps/config/model_spec.h"
#include "heterps/dense/matrix.h"

namespace heterps::gpu {
class Device;
}  // namespace heterps::gpu

namespace heterps::dense {

class DenseChain {
 public:
  virtual ~DenseChain() = default;

  // Floats of each fc layer's parameter block, in layer order.
  virtual const std::vector<int64_t>& block_sizes() const = 0;
  // Whether the chain folds the embedding vectors (it holds an interaction). If not, the
  // vectors pass it unchanged, the caller keeps them and passes a matrix of no columns.
  virtual bool consumes_vectors() const = 0;
  // Whether it ends with the logloss (then Forward's output is the logits, n x 1).
  virtual bool has_loss() const = 0;

  // The parameters the forward passes that follow use: block_sizes().size() blocks of host
  // floats. They must stay alive and unchanged until the next SetParameters (a device copies
  // them here, once).
  virtual absl::Status SetParameters(absl::Span<const float* const> blocks) = 0;

  // Runs micro-batch `ctx` through the chain: `dense` (n x width in), `vectors` (n x vectors
  // times dim when consumes_vectors(), else no columns). Returns the output (n x width out; the
  // logits, n x 1, for the chain with the loss), in host memory the context owns, valid until
  // the context's next call. With `train`, the context keeps what Backward needs (the inputs
  // must then stay alive and unchanged until Backward).
  virtual absl::StatusOr<const Matrix<float>*> Forward(int ctx, const Matrix<float>& dense,
                                                       const Matrix<float>& vectors,
                                                       bool train) = 0;
  // has_loss(): after a training Forward, the logloss of context `ctx`'s logits against `labels`
  // (n floats, 0 or 1), summed; Backward then starts from `scale` times its gradient.
  virtual absl::StatusOr<double> Loss(int ctx, const float* labels, float scale) = 0;

  // The gradients of what entered the chain (in host memory the context owns, valid until its
  // next call): `dense` (n x width in; null unless asked for), `vectors` (when
  // consumes_vectors()).
  struct InputGrads {
    const Matrix<float>* dense = nullptr;
    const Matrix<float>* vectors = nullptr;
    // After ForwardDeviceVectors, the vectors' gradient stays on the device: n x cols floats,
    // row-major, in device memory the context owns, valid until its next call (`vectors` null).
    const float* device_vectors = nullptr;
  };
  // Backward of context `ctx` from `d_out` (n x width out; consumed: its contents are
  // overwritten) or, for the chain with the loss, from the loss (d_out null). Adds the
  // parameters' gradients into `grads` (one block per fc layer, as SetParameters'). InvalidArgument
  // for gradients of the wrong shape; FailedPrecondition before a training Forward.
  virtual absl::StatusOr<InputGrads> Backward(int ctx, Matrix<float>* d_out, bool want_dense,
                                              absl::Span<float* const> grads) = 0;

  // The device path (docs/gpu.md, "The tier feeds the stage"): a chain on a device
  // (DenseBackend::gpu_device) that consumes vectors can take a forward's vectors from that
  // device's memory, where a producer on the device (GpuTier::LookupBags) wrote them, and leave
  // their gradient there:
  //
  //   HETERPS_ASSIGN_OR_RETURN(float* v, chain->DeviceVectors(ctx, n, cols));
  //   ... the producer writes the n x cols floats at v, on the device's stream ...
  //   HETERPS_ASSIGN_OR_RETURN(auto out, chain->ForwardDeviceVectors(ctx, dense, train));
  //   ... Backward(ctx, ...) then gives InputGrads::device_vectors ...
  //
  // DeviceVectors: where context `ctx`'s next ForwardDeviceVectors reads its vectors (n x cols
  // floats, row-major, device memory the context owns). Unimplemented for a chain on the host or
  // one that does not consume vectors (the defaults).
  virtual absl::StatusOr<float*> DeviceVectors(int ctx, int64_t n, int64_t cols);
  // Forward with the vectors DeviceVectors placed: `dense` must have their n rows
  // (InvalidArgument otherwise, and FailedPrecondition without DeviceVectors; Unimplemented
  // where DeviceVectors is).
  virtual absl::StatusOr<const Matrix<float>*> ForwardDeviceVectors(int ctx,
                                                                    const Matrix<float>& dense,
                                                                    bool train);

  // Held parameters (docs/gpu.md, "Dense parameters held on the device"): a chain on a device
  // can keep its parameters and their optimizer's state there and update them itself, with the
  // parameter servers' arithmetic (ps/optimizer.h's ApplyUpdate of a dense block, fed the
  // gradient 0.0f + dW that a zeroed host buffer would hold), instead of taking them with
  // SetParameters and giving their gradients back at each backward:
  //
  //   HETERPS_RETURN_IF_ERROR(chain->Hold(optimizer, values, state));   // once
  //   ... Forward, Loss, Backward(ctx, d_out, want_dense, /*grads=*/{}) ...
  //   HETERPS_RETURN_IF_ERROR(chain->ApplyHeld(steps));                 // once a backward
  //   ... and at the end of a round: ReadHeld(values, state) ...
  //
  // Hold: the values (one block per fc layer, as SetParameters) and their state
  // (StateFloats(kind) floats a parameter: adagrad's accumulators; adam's [m | v]) go to the
  // device; SetParameters is refused from then on. Backward with no `grads` then leaves the
  // parameters' gradients on the device. ApplyHeld: every block updated once from the last
  // backward's gradients, `steps` the blocks' update counts after this update (adam's bias
  // correction), as the servers count them; FailedPrecondition unless exactly one backward came
  // since the last update. ReadHeld: the values and state back in host memory. Unimplemented for
  // a chain on the host (the defaults); InvalidArgument for blocks of the wrong count.
  struct HeldOptimizer {
    int kind = 0;  // ps::OptimizerKind's order: 0 sgd, 1 adagrad, 2 adam
    float learning_rate = 0, beta1 = 0, beta2 = 0, epsilon = 0;
  };
  virtual absl::Status Hold(const HeldOptimizer& optimizer, absl::Span<const float* const> values,
                            absl::Span<const float* const> state);
  virtual absl::Status ApplyHeld(absl::Span<const int64_t> steps);
  virtual absl::Status ReadHeld(absl::Span<float* const> values, absl::Span<float* const> state);

  // Profiling: while on, each call adds each layer's seconds (forward + backward; the loss's to
  // the logloss layer) to layer_seconds(), in layer order.
  virtual void set_timing(bool on) = 0;
  virtual std::vector<double> layer_seconds() const = 0;
};

// What a device has done, for reports and tests.
struct DeviceStats {
  int64_t bytes_in_use = 0, peak_bytes = 0;  // device memory
  int64_t host_to_device_bytes = 0;          // copies over PCIe (or its host twin)
  int64_t device_to_host_bytes = 0;
};

struct BackendOptions {
  // Device memory a backend may hold, bytes; 0: all the device has (the host twin: 16 GiB).
  int64_t memory_budget_bytes = 0;
  // Dense layers in TensorFloat-32 (GPUs only): faster, less precise; off unless asked for.
  bool tf32 = false;
};

class DenseBackend {
 public:
  virtual ~DenseBackend() = default;
  virtual const std::string& device() const = 0;
  // Layers first..last of `spec` (which must outlive the chain), all of them dense (fc,
  // interaction, logloss). InvalidArgument naming the spec's file and line otherwise.
  virtual absl::StatusOr<std::unique_ptr<DenseChain>> NewChain(const config::ModelSpec& spec,
                                                               int first, int last) = 0;
  virtual DeviceStats stats() const = 0;
  // The device the chains run on (the backend owns it; null for the host's CPU, the default).
  // Work for the chains' device memory (DenseChain::DeviceVectors) goes on its stream.
  virtual gpu::Device* gpu_device() { return nullptr; }
};

// Backends made by the device's kind: the part of a device name before ':' ("cpu", "cuda",
// "twin"), then its index.
class BackendRegistry {
 public:
  using Factory = std::function<absl::StatusOr<std::unique_ptr<DenseBackend>>(
      int index, const BackendOptions& options)>;
  void Register(std::string kind, Factory factory);
  // The backend of `device` ("cpu", "cuda:0", "twin:1"). InvalidArgument for a name of no known
  // kind, naming the kinds this build has; the factory's errors (no such GPU) otherwise.
  absl::StatusOr<std::unique_ptr<DenseBackend>> Create(absl::string_view device,
                                                       const BackendOptions& options) const;
  std::vector<std::string> kinds() const;

 private:
  std::map<std::string, Factory> factories_;
};

// Whether layer kind `kind` runs in a chain.
bool IsDenseLayer(config::LayerKind kind);

}  // namespace heterps::dense
