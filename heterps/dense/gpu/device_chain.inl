// A chain of dense layers on a GPU: written once, built twice (gpu/target.h). nvcc builds it
// into cuda_backend.cu for CUDA GPUs (cuBLASLt and Thrust's CUDA backend); g++ builds it into
// twin_backend.cc for the host twin (the CPU's GEMMs and Thrust's OpenMP backend). The GEMMs go
// through gpu::Blas; everything else is a small functor over the elements, run by
// thrust::for_each_n on the device's stream.
//
// A micro-batch's activations are copied to the device at the chain's entry and its output
// copied back at the exit; every layer's intermediate results stay on the device until the
// context's backward. The parameters are copied to the device once per SetParameters (once per
// step), the gradients of the inputs and of the parameters back once per backward. The loss's
// per-sample terms come back and are summed on the host in sample order, as the CPU chain sums
// them.
//
// Not a header: included once by each target's translation unit.
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <math.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/dense/cpu/cpu_backend.h"
#include "heterps/dense/gpu/device_backend.h"
#include "heterps/gpu/blas.h"
#include "heterps/gpu/target.h"

namespace heterps::dense::HETERPS_GPU_TARGET {
namespace {

using config::Activation;
using config::InteractionOp;
using config::LayerKind;
using config::LayerSpec;
using gpu::DeviceArray;

// ---- The functors: one element (or one sample) each. ----

struct Sigmoid {
  float* y;
  HETERPS_HD void operator()(int64_t i) const { y[i] = 1.0f / (1.0f + expf(-y[i])); }
};

// dy becomes the gradient of the pre-activation, read off the activation's output y.
struct ActivationBackward {
  float* dy;
  const float* y;
  int relu;  // else sigmoid
  HETERPS_HD void operator()(int64_t i) const {
    if (relu) {
      dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
    } else {
      dy[i] *= y[i] * (1.0f - y[i]);
    }
  }
};

struct Fill {
  float* x;
  float value;
  HETERPS_HD void operator()(int64_t i) const { x[i] = value; }
};

// out (n x (w + vw)) = [dense (n x w), vectors (n x vw)].
struct Concat {
  float* out;
  const float* dense;
  const float* vectors;
  int64_t w, vw;
  HETERPS_HD void operator()(int64_t i) const {
    const int64_t width = w + vw, r = i / width, c = i % width;
    out[i] = c < w ? dense[r * w + c] : vectors[r * vw + c - w];
  }
};

// The reverse: d_dense (n x w) and d_vectors (n x vw) from d_out.
struct Split {
  float* d_dense;
  float* d_vectors;
  const float* d_out;
  int64_t w, vw;
  HETERPS_HD void operator()(int64_t i) const {
    const int64_t width = w + vw, r = i / width, c = i % width;
    if (c < w) {
      d_dense[r * w + c] = d_out[i];
    } else {
      d_vectors[r * vw + c - w] = d_out[i];
    }
  }
};

// z (n x rows x dim): sample r's vectors, the dense one first.
struct BuildZ {
  float* z;
  const float* dense;
  const float* vectors;
  int64_t rows, dim;
  HETERPS_HD void operator()(int64_t i) const {
    const int64_t per = rows * dim, r = i / per, k = i % per, row = k / dim, c = k % dim;
    z[i] = row == 0 ? dense[r * dim + c] : vectors[r * (per - dim) + (row - 1) * dim + c];
  }
};

// out (n x (dim + pairs)) = [dense, <z_i, z_j> for i < j], from the Gram matrices g.
struct GatherPairs {
  float* out;
  const float* dense;
  const float* gram;
  const int32_t* pair_row;
  const int32_t* pair_col;
  int64_t dim, pairs, rows;
  HETERPS_HD void operator()(int64_t i) const {
    const int64_t width = dim + pairs, r = i / width, c = i % width;
    out[i] = c < dim ? dense[r * dim + c]
                     : gram[r * rows * rows + pair_row[c - dim] * rows + pair_col[c - dim]];
  }
};

// s (n x rows x rows): the symmetric matrix of the pairs' gradients, zero on the diagonal.
struct ScatterPairs {
  float* s;
  const float* d_out;
  const int32_t* pair_of;  // rows x rows: the pair's column, -1 on the diagonal
  int64_t dim, pairs, rows;
  HETERPS_HD void operator()(int64_t i) const {
    const int64_t per = rows * rows, r = i / per, q = i % per;
    const int32_t p = pair_of[q];
    s[i] = p < 0 ? 0.0f : d_out[r * (dim + pairs) + dim + p];
  }
};

// d_dense = d_out's dense columns + dz's first row; d_vectors = dz's other rows.
struct DotGrads {
  float* d_dense;
  float* d_vectors;
  const float* d_out;
  const float* dz;
  int64_t dim, pairs, rows;
  HETERPS_HD void operator()(int64_t i) const {
    const int64_t per = rows * dim, r = i / per, k = i % per;
    if (k < dim) {
      d_dense[r * dim + k] = d_out[r * (dim + pairs) + k] + dz[i];
    } else {
      d_vectors[r * (per - dim) + k - dim] = dz[i];
    }
  }
};

// Per sample: the logloss term log(1 + exp(z)) - y z, and scale (sigmoid(z) - y).
struct Logloss {
  const float* logits;
  const float* labels;
  float scale;
  float* d_logits;
  float* terms;
  HETERPS_HD void operator()(int64_t r) const {
    const float z = logits[r], y = labels[r];
    const float softplus = z > 0.0f ? z + log1pf(expf(-z)) : log1pf(expf(z));
    terms[r] = softplus - y * z;
    d_logits[r] = (1.0f / (1.0f + expf(-z)) - y) * scale;
  }
};

// One optimizer update of a held block's parameter i from its gradient (ps/optimizer.h's
// ApplyUpdate, the same expressions: adam's bias corrections c1, c2 computed on the host).
struct HeldUpdate {
  float* w;
  float* state;  // adagrad: a; adam: [m | v]
  const float* g;
  int64_t size;
  int kind;
  float lr, b1, b2, rest1, rest2, eps;
  double c1, c2;
  HETERPS_HD void operator()(int64_t i) const {
    const float gi = 0.0f + g[i];  // what a zeroed host buffer holds after the backward
    if (kind == 0) {
      w[i] -= lr * gi;
    } else if (kind == 1) {
      state[i] += gi * gi;
      w[i] -= lr * gi / (sqrtf(state[i]) + eps);
    } else {
      float* m = state;
      float* v = state + size;
      const float mi = b1 * m[i] + rest1 * gi;
      const float vi = b2 * v[i] + rest2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const double m_hat = mi / c1, v_hat = vi / c2;
      w[i] -= static_cast<float>(static_cast<double>(lr) * m_hat /
                                 (sqrt(v_hat) + static_cast<double>(eps)));
    }
  }
};

template <typename F>
void ForEach(gpu::Device* device, int64_t n, const F& f) {
  if (n <= 0) return;
  thrust::for_each_n(gpu::HETERPS_GPU_TARGET::Policy(device->stream()),
                     thrust::counting_iterator<int64_t>(0), n, f);
}

absl::Status Grow(gpu::Device* device, DeviceArray<float>& array, int64_t n) {
  return array.Reserve(device, static_cast<size_t>(std::max<int64_t>(n, 1)));
}

class DeviceChain : public DenseChain {
 public:
  DeviceChain(gpu::Device* device, gpu::Blas* blas, const config::ModelSpec& spec, int first,
                int last)
      : device_(device), blas_(blas) {
    for (int i = first; i <= last; ++i) {
      const LayerSpec& s = spec.layers[i];
      Layer layer{&s};
      if (s.kind == LayerKind::kFc) {
        layer.block = static_cast<int>(blocks_.size());
        blocks_.push_back(s.out * s.in + s.out);
      }
      if (s.kind == LayerKind::kInteraction) consumes_vectors_ = true;
      if (s.kind == LayerKind::kLogloss) has_loss_ = true;
      layers_.push_back(layer);
    }
    seconds_.assign(layers_.size(), 0.0);
  }

  absl::Status Init() {
    params_.resize(blocks_.size());
    grads_.resize(blocks_.size());
    for (size_t b = 0; b < blocks_.size(); ++b) {
      HETERPS_RETURN_IF_ERROR(Grow(device_, params_[b], blocks_[b]));
      HETERPS_RETURN_IF_ERROR(Grow(device_, grads_[b], blocks_[b]));
    }
    host_grads_.resize(blocks_.size());
    for (size_t b = 0; b < blocks_.size(); ++b) host_grads_[b].resize(blocks_[b]);
    // The dot interactions' pair tables.
    for (const Layer& layer : layers_) {
      const LayerSpec& s = *layer.spec;
      if (s.kind != LayerKind::kInteraction || s.op != InteractionOp::kDot) continue;
      const int64_t rows = s.vectors_in + 1;
      std::vector<int32_t> row, col, of(rows * rows, -1);
      for (int64_t i = 0; i < rows; ++i) {
        for (int64_t j = i + 1; j < rows; ++j) {
          of[i * rows + j] = of[j * rows + i] = static_cast<int32_t>(row.size());
          row.push_back(static_cast<int32_t>(i));
          col.push_back(static_cast<int32_t>(j));
        }
      }
      HETERPS_ASSIGN_OR_RETURN(pair_row_, DeviceArray<int32_t>::Make(device_, row.size()));
      HETERPS_ASSIGN_OR_RETURN(pair_col_, DeviceArray<int32_t>::Make(device_, col.size()));
      HETERPS_ASSIGN_OR_RETURN(pair_of_, DeviceArray<int32_t>::Make(device_, of.size()));
      HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(pair_row_.data(), row.data(), row.size() * 4));
      HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(pair_col_.data(), col.data(), col.size() * 4));
      HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(pair_of_.data(), of.data(), of.size() * 4));
    }
    return device_->Synchronize();
  }

  const std::vector<int64_t>& block_sizes() const override { return blocks_; }
  bool consumes_vectors() const override { return consumes_vectors_; }
  bool has_loss() const override { return has_loss_; }

  absl::Status SetParameters(absl::Span<const float* const> blocks) override {
    if (held_) {
      return absl::FailedPreconditionError("chain: its parameters are held on the device");
    }
    if (blocks.size() != blocks_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chain: ", blocks.size(), " parameter blocks for ", blocks_.size()));
    }
    for (size_t b = 0; b < blocks.size(); ++b) {
      HETERPS_RETURN_IF_ERROR(
          device_->CopyToDevice(params_[b].data(), blocks[b], blocks_[b] * sizeof(float)));
    }
    have_params_ = true;
    return absl::OkStatus();
  }

  absl::StatusOr<const Matrix<float>*> Forward(int ctx, const Matrix<float>& dense,
                                               const Matrix<float>& vectors, bool train) override {
    Context& c = ContextOf(ctx);
    c.in_vectors_cols = vectors.cols();
    c.device_vectors = false;
    c.placed_rows = -1;
    HETERPS_RETURN_IF_ERROR(Upload(c.in_vectors, vectors));
    return Run(c, dense, train);
  }

  absl::StatusOr<float*> DeviceVectors(int ctx, int64_t n, int64_t cols) override {
    if (!consumes_vectors_) return DenseChain::DeviceVectors(ctx, n, cols);
    Context& c = ContextOf(ctx);
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.in_vectors, n * cols));
    c.placed_rows = n;
    c.placed_cols = cols;
    return c.in_vectors.data();
  }

  absl::StatusOr<const Matrix<float>*> ForwardDeviceVectors(int ctx, const Matrix<float>& dense,
                                                            bool train) override {
    Context& c = ContextOf(ctx);
    if (c.placed_rows < 0) {
      return absl::FailedPreconditionError("chain: a forward of device vectors not placed");
    }
    if (c.placed_rows != dense.rows()) {
      return absl::InvalidArgumentError(absl::StrCat("chain: ", dense.rows(),
                                                     " dense rows for device vectors of ",
                                                     c.placed_rows, " rows"));
    }
    c.in_vectors_cols = c.placed_cols;
    c.device_vectors = true;
    c.placed_rows = -1;
    return Run(c, dense, train);
  }

  absl::StatusOr<double> Loss(int ctx, const float* labels, float scale) override {
    if (!has_loss_) return absl::FailedPreconditionError("chain: no loss layer");
    Context& c = ContextOf(ctx);
    if (!c.trained) return absl::FailedPreconditionError("chain: loss before a training forward");
    const absl::Time start = timing_ ? absl::Now() : absl::InfinitePast();
    const int64_t n = c.size;
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.labels, n));
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.d_logits, n));
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.terms, n));
    HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(c.labels.data(), labels, n * sizeof(float)));
    ForEach(device_, n,
            Logloss{c.last, c.labels.data(), scale, c.d_logits.data(), c.terms.data()});
    c.terms_host.resize(n);
    HETERPS_RETURN_IF_ERROR(
        device_->CopyToHost(c.terms_host.data(), c.terms.data(), n * sizeof(float)));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    // Summed in sample order, in float, as the CPU chain sums.
    float total = 0;
    for (float t : c.terms_host) total += t;
    if (timing_) HETERPS_RETURN_IF_ERROR(Time(layers_.size() - 1, start));
    return total;
  }

  absl::StatusOr<InputGrads> Backward(int ctx, Matrix<float>* d_out, bool want_dense,
                                      absl::Span<float* const> grads) override {
    if (static_cast<size_t>(ctx) >= contexts_.size() || contexts_[ctx] == nullptr ||
        !contexts_[ctx]->trained) {
      return absl::FailedPreconditionError(
          absl::StrCat("backward of context ", ctx, " before its training forward"));
    }
    if (grads.size() != blocks_.size() && !(held_ && grads.empty())) {
      return absl::InvalidArgumentError(
          absl::StrCat("chain: ", grads.size(), " gradient blocks for ", blocks_.size()));
    }
    Context& c = *contexts_[ctx];
    const int64_t n = c.size;
    float* dy = nullptr;
    if (has_loss_) {
      dy = c.d_logits.data();
    } else {
      if (d_out == nullptr || d_out->rows() != n || d_out->cols() != c.out_host.cols()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "backward: gradients of ", d_out == nullptr ? 0 : d_out->rows(), " x ",
            d_out == nullptr ? 0 : d_out->cols(), " for outputs of ", n, " x ",
            c.out_host.cols()));
      }
      HETERPS_RETURN_IF_ERROR(Upload(c.d_top, *d_out));
      dy = c.d_top.data();
    }
    const float* dv = nullptr;  // the vectors' gradient, once an interaction has made it
    for (size_t i = layers_.size(); i-- > 0;) {
      const LayerSpec& s = *layers_[i].spec;
      const absl::Time start = timing_ ? absl::Now() : absl::InfinitePast();
      const bool wanted = i > 0 || want_dense;
      const float* x = i == 0 ? c.in_dense.data() : c.out[i - 1].data();
      switch (s.kind) {
        case LayerKind::kFc: {
          HETERPS_RETURN_IF_ERROR(FcBackward(c, i, s, n, x, dy, wanted, grads));
          dy = c.d[i].data();
          break;
        }
        case LayerKind::kInteraction:
          HETERPS_RETURN_IF_ERROR(InteractionBackward(c, i, s, n, dy));
          dy = c.d[i].data();
          dv = c.dv[i].data();
          break;
        default:
          break;
      }
      if (timing_ && s.kind != LayerKind::kLogloss) HETERPS_RETURN_IF_ERROR(Time(i, start));
    }
    InputGrads out;
    if (want_dense) {
      c.d_dense_host.resize(n, c.in_dense_cols);
      HETERPS_RETURN_IF_ERROR(device_->CopyToHost(
          c.d_dense_host.data(), dy, static_cast<size_t>(c.d_dense_host.size()) * sizeof(float)));
      out.dense = &c.d_dense_host;
    }
    if (dv != nullptr && c.device_vectors) {
      out.device_vectors = dv;
    } else if (dv != nullptr) {
      c.d_vectors_host.resize(n, c.in_vectors_cols);
      HETERPS_RETURN_IF_ERROR(device_->CopyToHost(
          c.d_vectors_host.data(), dv,
          static_cast<size_t>(c.d_vectors_host.size()) * sizeof(float)));
      out.vectors = &c.d_vectors_host;
    }
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    c.trained = false;
    if (held_) ++backwards_;
    return out;
  }

  absl::Status Hold(const HeldOptimizer& optimizer, absl::Span<const float* const> values,
                    absl::Span<const float* const> state) override {
    if (values.size() != blocks_.size() || state.size() != blocks_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("chain: ", values.size(), " value and ",
                                                     state.size(), " state blocks for ",
                                                     blocks_.size()));
    }
    optimizer_ = optimizer;
    state_per_ = optimizer.kind == 0 ? 0 : optimizer.kind == 1 ? 1 : 2;
    const int64_t per = state_per_;
    state_.resize(blocks_.size());
    for (size_t b = 0; b < blocks_.size(); ++b) {
      HETERPS_RETURN_IF_ERROR(
          device_->CopyToDevice(params_[b].data(), values[b], blocks_[b] * sizeof(float)));
      HETERPS_RETURN_IF_ERROR(Grow(device_, state_[b], per * blocks_[b]));
      if (per > 0) {
        HETERPS_RETURN_IF_ERROR(device_->CopyToDevice(state_[b].data(), state[b],
                                                      per * blocks_[b] * sizeof(float)));
      }
    }
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    held_ = have_params_ = true;
    backwards_ = 0;
    return absl::OkStatus();
  }

  absl::Status ApplyHeld(absl::Span<const int64_t> steps) override {
    if (!held_ || backwards_ != 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "chain: an update of held parameters after ", held_ ? backwards_ : 0,
          " backward passes (it takes one)"));
    }
    if (steps.size() != blocks_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chain: ", steps.size(), " update counts for ", blocks_.size(), " blocks"));
    }
    const HeldOptimizer& o = optimizer_;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      const double t = static_cast<double>(steps[b]);
      const double c1 = 1 - std::pow(static_cast<double>(o.beta1), t);
      const double c2 = 1 - std::pow(static_cast<double>(o.beta2), t);
      ForEach(device_, blocks_[b],
              HeldUpdate{params_[b].data(), state_[b].data(), grads_[b].data(), blocks_[b],
                         o.kind, o.learning_rate, o.beta1, o.beta2, 1 - o.beta1, 1 - o.beta2,
                         o.epsilon, c1, c2});
    }
    backwards_ = 0;
    return absl::OkStatus();
  }

  absl::Status ReadHeld(absl::Span<float* const> values,
                        absl::Span<float* const> state) override {
    if (!held_) return absl::FailedPreconditionError("chain: no parameters held");
    if (values.size() != blocks_.size() || state.size() != blocks_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("chain: ", values.size(), " value and ",
                                                     state.size(), " state blocks for ",
                                                     blocks_.size()));
    }
    const int64_t per = state_per_;
    for (size_t b = 0; b < blocks_.size(); ++b) {
      HETERPS_RETURN_IF_ERROR(
          device_->CopyToHost(values[b], params_[b].data(), blocks_[b] * sizeof(float)));
      if (per > 0) {
        HETERPS_RETURN_IF_ERROR(device_->CopyToHost(state[b], state_[b].data(),
                                                    per * blocks_[b] * sizeof(float)));
      }
    }
    return device_->Synchronize();
  }

  void set_timing(bool on) override {
    timing_ = on;
    if (on) seconds_.assign(layers_.size(), 0.0);
  }
  std::vector<double> layer_seconds() const override { return seconds_; }

 private:
  struct Layer {
    const LayerSpec* spec;
    int block = -1;
  };
  // One micro-batch in flight: its inputs and every layer's results and gradients, on the
  // device; what goes back to the host, in host memory.
  struct Context {
    DeviceArray<float> in_dense, in_vectors, d_top, labels, d_logits, terms;
    std::vector<DeviceArray<float>> out, d, dv, z, gram;
    const float* last = nullptr;  // the last layer's output, on the device
    int64_t size = 0, in_dense_cols = 0, in_vectors_cols = 0;
    bool trained = false;
    // DeviceVectors' rows and columns, until the forward that reads them (-1: none placed); and
    // whether the context's forward took its vectors from the device.
    int64_t placed_rows = -1, placed_cols = 0;
    bool device_vectors = false;
    Matrix<float> out_host, d_dense_host, d_vectors_host;
    std::vector<float> terms_host;
  };

  Context& ContextOf(int ctx) {
    if (static_cast<size_t>(ctx) >= contexts_.size()) contexts_.resize(ctx + 1);
    std::unique_ptr<Context>& c = contexts_[ctx];
    if (c == nullptr) {
      c = std::make_unique<Context>();
      const size_t n = layers_.size();
      c->out.resize(n);
      c->d.resize(n);
      c->dv.resize(n);
      c->z.resize(n);
      c->gram.resize(n);
    }
    return *c;
  }

  // The forward of context c, its vectors on the device (uploaded or placed).
  absl::StatusOr<const Matrix<float>*> Run(Context& c, const Matrix<float>& dense, bool train) {
    if (!have_params_ && !blocks_.empty()) {
      return absl::FailedPreconditionError("chain: forward before SetParameters");
    }
    const int64_t n = dense.rows();
    c.size = n;
    c.trained = false;
    c.in_dense_cols = dense.cols();
    HETERPS_RETURN_IF_ERROR(Upload(c.in_dense, dense));
    const float* d = c.in_dense.data();
    const float* v = c.in_vectors.data();
    int64_t width = dense.cols();
    for (size_t i = 0; i < layers_.size(); ++i) {
      const LayerSpec& s = *layers_[i].spec;
      const absl::Time start = timing_ ? absl::Now() : absl::InfinitePast();
      switch (s.kind) {
        case LayerKind::kFc:
          HETERPS_RETURN_IF_ERROR(Grow(device_, c.out[i], n * s.out));
          HETERPS_RETURN_IF_ERROR(blas_->Linear(n, s.out, s.in, d,
                                                params_[layers_[i].block].data(),
                                                params_[layers_[i].block].data() + s.out * s.in,
                                                s.activation == Activation::kRelu,
                                                c.out[i].data()));
          if (s.activation == Activation::kSigmoid) {
            ForEach(device_, n * s.out, Sigmoid{c.out[i].data()});
          }
          d = c.out[i].data();
          width = s.out;
          break;
        case LayerKind::kInteraction:
          HETERPS_RETURN_IF_ERROR(InteractionForward(c, i, s, n, d, v));
          d = c.out[i].data();
          width = s.dense_width_out;
          v = nullptr;
          break;
        default:
          break;
      }
      if (timing_ && s.kind != LayerKind::kLogloss) HETERPS_RETURN_IF_ERROR(Time(i, start));
    }
    c.last = d;
    c.out_host.resize(n, width);
    HETERPS_RETURN_IF_ERROR(
        device_->CopyToHost(c.out_host.data(), d, static_cast<size_t>(n * width) * sizeof(float)));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    c.trained = train;
    return &c.out_host;
  }

  // A host matrix into a device array (grown as needed); its columns kept for the backward.
  absl::Status Upload(DeviceArray<float>& to, const Matrix<float>& from) {
    HETERPS_RETURN_IF_ERROR(Grow(device_, to, from.size()));
    return device_->CopyToDevice(to.data(), from.data(),
                                 static_cast<size_t>(from.size()) * sizeof(float));
  }

  absl::Status InteractionForward(Context& c, size_t i, const LayerSpec& s, int64_t n,
                                  const float* d, const float* v) {
    const int64_t w = s.dense_width_in, vw = s.vector_floats_in;
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.out[i], n * s.dense_width_out));
    if (s.op == InteractionOp::kConcat) {
      ForEach(device_, n * (w + vw), Concat{c.out[i].data(), d, v, w, vw});
      return absl::OkStatus();
    }
    const int64_t rows = s.vectors_in + 1, dim = s.vector_dim_in;
    const int64_t pairs = rows * (rows - 1) / 2;
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.z[i], n * rows * dim));
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.gram[i], n * rows * rows));
    ForEach(device_, n * rows * dim, BuildZ{c.z[i].data(), d, v, rows, dim});
    HETERPS_RETURN_IF_ERROR(blas_->GemmBatched(false, true, rows, rows, dim, 1.0f, c.z[i].data(),
                                               dim, rows * dim, c.z[i].data(), dim, rows * dim,
                                               0.0f, c.gram[i].data(), rows, rows * rows, n));
    ForEach(device_, n * (dim + pairs),
            GatherPairs{c.out[i].data(), d, c.gram[i].data(), pair_row_.data(), pair_col_.data(),
                        dim, pairs, rows});
    return absl::OkStatus();
  }

  absl::Status InteractionBackward(Context& c, size_t i, const LayerSpec& s, int64_t n,
                                   const float* dy) {
    const int64_t w = s.dense_width_in, vw = s.vector_floats_in;
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.d[i], n * w));
    HETERPS_RETURN_IF_ERROR(Grow(device_, c.dv[i], n * vw));
    if (s.op == InteractionOp::kConcat) {
      ForEach(device_, n * (w + vw), Split{c.d[i].data(), c.dv[i].data(), dy, w, vw});
      return absl::OkStatus();
    }
    const int64_t rows = s.vectors_in + 1, dim = s.vector_dim_in;
    const int64_t pairs = rows * (rows - 1) / 2;
    // gram[i] is reused for the pairs' symmetric gradients.
    DeviceArray<float>& sym = c.gram[i];
    ForEach(device_, n * rows * rows, ScatterPairs{sym.data(), dy, pair_of_.data(), dim, pairs, rows});
    HETERPS_RETURN_IF_ERROR(Grow(device_, dz_, n * rows * dim));
    HETERPS_RETURN_IF_ERROR(blas_->GemmBatched(false, false, rows, dim, rows, 1.0f, sym.data(),
                                               rows, rows * rows, c.z[i].data(), dim, rows * dim,
                                               0.0f, dz_.data(), dim, rows * dim, n));
    ForEach(device_, n * rows * dim,
            DotGrads{c.d[i].data(), c.dv[i].data(), dy, dz_.data(), dim, pairs, rows});
    return absl::OkStatus();
  }

  absl::Status FcBackward(Context& c, size_t i, const LayerSpec& s, int64_t n, const float* x,
                          float* dy, bool wanted, absl::Span<float* const> grads) {
    const int b = layers_[i].block;
    const float* y = c.out[i].data();
    if (s.activation != Activation::kNone) {
      ForEach(device_, n * s.out,
              ActivationBackward{dy, y, s.activation == Activation::kRelu ? 1 : 0});
    }
    // dW = dz^T x, db = 1^T dz, dx = dz W.
    float* gw = grads_[b].data();
    HETERPS_RETURN_IF_ERROR(
        blas_->Gemm(true, false, s.out, s.in, n, 1.0f, dy, s.out, x, s.in, 0.0f, gw, s.in));
    if (static_cast<int64_t>(ones_.size()) < n) {
      HETERPS_RETURN_IF_ERROR(Grow(device_, ones_, n));
      ForEach(device_, static_cast<int64_t>(ones_.size()), Fill{ones_.data(), 1.0f});
    }
    HETERPS_RETURN_IF_ERROR(blas_->Gemm(false, false, 1, s.out, n, 1.0f, ones_.data(), n, dy,
                                        s.out, 0.0f, gw + s.out * s.in, s.out));
    if (wanted) {
      HETERPS_RETURN_IF_ERROR(Grow(device_, c.d[i], n * s.in));
      HETERPS_RETURN_IF_ERROR(blas_->Gemm(false, false, n, s.in, s.out, 1.0f, dy, s.out,
                                          params_[b].data(), s.in, 0.0f, c.d[i].data(), s.in));
    }
    // The parameters' gradients, added into the caller's blocks (held: left on the device).
    if (grads.empty()) return absl::OkStatus();
    std::vector<float>& host = host_grads_[b];
    HETERPS_RETURN_IF_ERROR(device_->CopyToHost(host.data(), gw, host.size() * sizeof(float)));
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    Eigen::Map<Eigen::ArrayXf>(grads[b], host.size()) +=
        Eigen::Map<const Eigen::ArrayXf>(host.data(), host.size());
    return absl::OkStatus();
  }

  absl::Status Time(size_t layer, absl::Time start) {
    HETERPS_RETURN_IF_ERROR(device_->Synchronize());
    seconds_[layer] += absl::ToDoubleSeconds(absl::Now() - start);
    return absl::OkStatus();
  }

  gpu::Device* const device_;
  gpu::Blas* const blas_;
  std::vector<Layer> layers_;
  std::vector<int64_t> blocks_;
  std::vector<DeviceArray<float>> params_, grads_;
  std::vector<std::vector<float>> host_grads_;
  // Held parameters (Hold): their optimizer, state, and the backward passes since the last
  // update.
  bool held_ = false;
  HeldOptimizer optimizer_;
  int64_t state_per_ = 0;  // state floats a parameter: 0 sgd, 1 adagrad, 2 adam
  std::vector<DeviceArray<float>> state_;
  int64_t backwards_ = 0;
  DeviceArray<int32_t> pair_row_, pair_col_, pair_of_;
  DeviceArray<float> ones_, dz_;
  bool have_params_ = false;
  bool consumes_vectors_ = false, has_loss_ = false;
  std::vector<std::unique_ptr<Context>> contexts_;
  bool timing_ = false;
  std::vector<double> seconds_;
};

class DeviceBackend : public DenseBackend {
 public:
  DeviceBackend(std::unique_ptr<gpu::Device> device, std::unique_ptr<gpu::Blas> blas)
      : device_(std::move(device)), blas_(std::move(blas)), name_(device_->info().name) {}

  const std::string& device() const override { return name_; }

  absl::StatusOr<std::unique_ptr<DenseChain>> NewChain(const config::ModelSpec& spec,
                                                           int first, int last) override {
    HETERPS_RETURN_IF_ERROR(CheckDenseRange(spec, first, last));
    auto chain = std::make_unique<DeviceChain>(device_.get(), blas_.get(), spec, first, last);
    HETERPS_RETURN_IF_ERROR(chain->Init());
    return std::unique_ptr<DenseChain>(std::move(chain));
  }

  DeviceStats stats() const override {
    const gpu::DeviceCounters c = device_->counters();
    return {c.bytes_in_use, c.peak_bytes, c.host_to_device_bytes, c.device_to_host_bytes};
  }

  gpu::Device* gpu_device() override { return device_.get(); }

 private:
  // Declared first: the blas and the chains' arrays are freed before the device.
  std::unique_ptr<gpu::Device> device_;
  std::unique_ptr<gpu::Blas> blas_;
  const std::string name_;
};

}  // namespace

std::unique_ptr<DenseBackend> NewBackend(std::unique_ptr<gpu::Device> device,
                                         std::unique_ptr<gpu::Blas> blas) {
  return std::make_unique<DeviceBackend>(std::move(device), std::move(blas));
}

}  // namespace heterps::dense::HETERPS_GPU_TARGET
