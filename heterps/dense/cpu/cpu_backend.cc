#include "heterps/dense/cpu/cpu_backend.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/dense/cpu/layers.h"

namespace heterps::dense {
namespace {

using config::LayerKind;
using config::LayerSpec;

class CpuChain : public DenseChain {
 public:
  CpuChain(const config::ModelSpec& spec, int first, int last) {
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
    params_.assign(blocks_.size(), nullptr);
    seconds_.assign(layers_.size(), 0.0);
  }

  const std::vector<int64_t>& block_sizes() const override { return blocks_; }
  bool consumes_vectors() const override { return consumes_vectors_; }
  bool has_loss() const override { return has_loss_; }

  absl::Status SetParameters(absl::Span<const float* const> blocks) override {
    if (blocks.size() != blocks_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chain: ", blocks.size(), " parameter blocks for ", blocks_.size()));
    }
    params_.assign(blocks.begin(), blocks.end());
    return absl::OkStatus();
  }

  absl::StatusOr<const Matrix<float>*> Forward(int ctx, const Matrix<float>& dense,
                                               const Matrix<float>& vectors, bool train) override {
    Context& c = ContextOf(ctx);
    c.size = dense.rows();
    c.trained = false;
    c.empty.resize(c.size, 0);
    const Matrix<float>* d = &dense;
    const Matrix<float>* v = &vectors;
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& layer = layers_[i];
      const absl::Time start = timing_ ? absl::Now() : absl::InfinitePast();
      switch (layer.spec->kind) {
        case LayerKind::kFc:
          if (params_[layer.block] == nullptr) {
            return absl::FailedPreconditionError("chain: forward before SetParameters");
          }
          c.fc[i]->Forward(params_[layer.block], *d, &c.out[i]);
          d = &c.out[i];
          break;
        case LayerKind::kInteraction:
          c.interaction[i]->Forward(*d, *v, &c.out[i]);
          d = &c.out[i];
          v = &c.empty;
          break;
        default:
          break;
      }
      if (timing_ && layer.spec->kind != LayerKind::kLogloss) Time(i, start);
    }
    c.logits = d;
    c.trained = train;
    return d;
  }

  absl::StatusOr<double> Loss(int ctx, const float* labels, float scale) override {
    if (!has_loss_) return absl::FailedPreconditionError("chain: no loss layer");
    Context& c = ContextOf(ctx);
    if (!c.trained) return absl::FailedPreconditionError("chain: loss before a training forward");
    const absl::Time start = timing_ ? absl::Now() : absl::InfinitePast();
    const double loss = LoglossSum(*c.logits, labels, scale, &c.d_logits);
    if (timing_) Time(layers_.size() - 1, start);
    return loss;
  }

  absl::StatusOr<InputGrads> Backward(int ctx, Matrix<float>* d_out, bool want_dense,
                                      absl::Span<float* const> grads) override {
    if (static_cast<size_t>(ctx) >= contexts_.size() || contexts_[ctx] == nullptr ||
        !contexts_[ctx]->trained) {
      return absl::FailedPreconditionError(
          absl::StrCat("backward of context ", ctx, " before its training forward"));
    }
    if (grads.size() != blocks_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chain: ", grads.size(), " gradient blocks for ", blocks_.size()));
    }
    Context& c = *contexts_[ctx];
    Matrix<float>* d = has_loss_ ? &c.d_logits : d_out;
    if (d == nullptr || d->rows() != c.size || d->cols() != c.logits->cols()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "backward: gradients of ", d == nullptr ? 0 : d->rows(), " x ",
          d == nullptr ? 0 : d->cols(), " for outputs of ", c.size, " x ", c.logits->cols()));
    }
    InputGrads out;
    for (size_t i = layers_.size(); i-- > 0;) {
      const Layer& layer = layers_[i];
      const absl::Time start = timing_ ? absl::Now() : absl::InfinitePast();
      const bool wanted = i > 0 || want_dense;
      switch (layer.spec->kind) {
        case LayerKind::kFc:
          c.fc[i]->Backward(params_[layer.block], d, wanted ? &c.d_dense[i] : nullptr,
                            grads[layer.block]);
          d = &c.d_dense[i];
          break;
        case LayerKind::kInteraction:
          c.interaction[i]->Backward(*d, &c.d_dense[i], &c.d_vectors[i]);
          d = &c.d_dense[i];
          out.vectors = &c.d_vectors[i];
          break;
        default:
          break;
      }
      if (timing_ && layer.spec->kind != LayerKind::kLogloss) Time(i, start);
    }
    if (want_dense) out.dense = d;
    c.trained = false;
    return out;
  }

  void set_timing(bool on) override {
    timing_ = on;
    if (on) seconds_.assign(layers_.size(), 0.0);
  }
  std::vector<double> layer_seconds() const override { return seconds_; }

 private:
  struct Layer {
    const LayerSpec* spec;
    int block = -1;  // fc: its parameter block
  };
  // One micro-batch in flight: the layer objects (which remember their inputs) and the buffers
  // they write, reused from micro-batch to micro-batch.
  struct Context {
    std::vector<std::unique_ptr<FcLayer<float>>> fc;
    std::vector<std::unique_ptr<InteractionLayer<float>>> interaction;
    std::vector<Matrix<float>> out, d_dense, d_vectors;
    Matrix<float> d_logits, empty;
    const Matrix<float>* logits = nullptr;  // the last layer's output
    int64_t size = 0;
    bool trained = false;  // a training forward waits for its backward
  };

  Context& ContextOf(int ctx) {
    if (static_cast<size_t>(ctx) >= contexts_.size()) contexts_.resize(ctx + 1);
    std::unique_ptr<Context>& c = contexts_[ctx];
    if (c == nullptr) {
      c = std::make_unique<Context>();
      const size_t n = layers_.size();
      c->fc.resize(n);
      c->interaction.resize(n);
      c->out.resize(n);
      c->d_dense.resize(n);
      c->d_vectors.resize(n);
      for (size_t i = 0; i < n; ++i) {
        const LayerSpec& s = *layers_[i].spec;
        if (s.kind == LayerKind::kFc) {
          c->fc[i] = std::make_unique<FcLayer<float>>(s.in, s.out, s.activation);
        } else if (s.kind == LayerKind::kInteraction) {
          // A concat sees the vectors as one of all their floats: their dims may differ.
          c->interaction[i] = s.op == config::InteractionOp::kConcat
                                  ? std::make_unique<InteractionLayer<float>>(
                                        s.op, s.dense_width_in, 1, s.vector_floats_in)
                                  : std::make_unique<InteractionLayer<float>>(
                                        s.op, s.dense_width_in, s.vectors_in, s.vector_dim_in);
        }
      }
    }
    return *c;
  }

  void Time(size_t layer, absl::Time start) {
    seconds_[layer] += absl::ToDoubleSeconds(absl::Now() - start);
  }

  std::vector<Layer> layers_;
  std::vector<int64_t> blocks_;
  std::vector<const float*> params_;
  bool consumes_vectors_ = false, has_loss_ = false;
  std::vector<std::unique_ptr<Context>> contexts_;
  bool timing_ = false;
  std::vector<double> seconds_;  // per layer
};

class CpuBackend : public DenseBackend {
 public:
  const std::string& device() const override { return device_; }
  absl::StatusOr<std::unique_ptr<DenseChain>> NewChain(const config::ModelSpec& spec, int first,
                                                       int last) override {
    return NewCpuChain(spec, first, last);
  }
  DeviceStats stats() const override { return DeviceStats(); }

 private:
  const std::string device_ = "cpu";
};

}  // namespace

absl::Status CheckDenseRange(const config::ModelSpec& spec, int first, int last) {
  if (first < 0 || first > last || last >= static_cast<int>(spec.layers.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec.source, ": chain of layers ", first, "..", last, " outside the model's"));
  }
  for (int i = first; i <= last; ++i) {
    const LayerSpec& s = spec.layers[i];
    if (!IsDenseLayer(s.kind)) {
      return absl::InvalidArgumentError(absl::StrCat(spec.source, ":", s.line, ": layer ", s.name,
                                                     ": a ", config::LayerKindName(s.kind),
                                                     " layer is not a dense layer"));
    }
    if (s.kind == LayerKind::kLogloss && i != last) {
      return absl::InvalidArgumentError(absl::StrCat(spec.source, ":", s.line, ": layer ", s.name,
                                                     ": the logloss must end its chain"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DenseChain>> NewCpuChain(const config::ModelSpec& spec, int first,
                                                        int last) {
  HETERPS_RETURN_IF_ERROR(CheckDenseRange(spec, first, last));
  return std::make_unique<CpuChain>(spec, first, last);
}

std::unique_ptr<DenseBackend> NewCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace heterps::dense
