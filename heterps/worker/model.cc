#include "heterps/worker/model.h"

#include <cmath>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/dense/embedding.h"
#include "heterps/dense/layers.h"

namespace heterps::worker {

using dense::Matrix;

struct Model::Impl {
  // One entry per trainable spec layer, in order.
  struct Embedding {
    std::unique_ptr<dense::EmbeddingBag> bag;
    int64_t slots, dim;
  };
  struct Fc {
    std::unique_ptr<dense::FcLayer<float>> layer;
    int block;
  };
  struct Interaction {
    std::unique_ptr<dense::InteractionLayer<float>> layer;
  };
  using Step = std::variant<Embedding, Fc, Interaction>;

  ps::PsClient* client;
  std::vector<Step> steps;
  std::vector<std::string> names;  // the spec layer of each step
  std::string loss_name;
  // While profiling: forward + backward seconds per step, and the loss's.
  bool timing = false;
  std::vector<double> seconds;
  double loss_seconds = 0;
  absl::Time mark;
  void Tick() {
    if (timing) mark = absl::Now();
  }
  void Tock(size_t step) {
    if (timing) seconds[step] += absl::ToDoubleSeconds(absl::Now() - mark);
  }
  // Per dense block. Aligned to Eigen's packets: vectorised sums peel their first elements by the
  // address, so a varying alignment would vary the rounding from run to run.
  using Block = std::vector<float, Eigen::aligned_allocator<float>>;
  std::vector<Block> params, grads;
  std::vector<uint64_t> keys;                     // scratch: a slot range of a batch's keys

  absl::Status PullDense() {
    std::vector<ps::Ticket> tickets;
    for (size_t b = 0; b < params.size(); ++b) {
      tickets.push_back(
          client->PullDense(kDenseTable, static_cast<int>(b), absl::MakeSpan(params[b])));
    }
    absl::Status status;
    for (ps::Ticket t : tickets) status.Update(client->Wait(t));
    return status;
  }

  // Runs the layers; returns the logits (batch x 1).
  absl::StatusOr<Matrix<float>> Forward(const data::Batch& batch) {
    const int64_t n = batch.size;
    Matrix<float> dense =
        Eigen::Map<const Matrix<float>>(batch.dense.data(), n, data::kDenseFeatures);
    Matrix<float> vectors(n, 0);
    for (size_t index = 0; index < steps.size(); ++index) {
      Step& step = steps[index];
      Tick();
      if (auto* e = std::get_if<Embedding>(&step)) {
        keys.resize(n * e->slots);
        for (int64_t r = 0; r < n; ++r) {
          std::copy_n(batch.keys.begin() + r * data::kSparseSlots, e->slots,
                      keys.begin() + r * e->slots);
        }
        Matrix<float> rows;
        HETERPS_RETURN_IF_ERROR(e->bag->Forward(keys, n, &rows));
        Matrix<float> joined(n, vectors.cols() + rows.cols());
        joined << vectors, rows;
        vectors.swap(joined);
      } else if (auto* f = std::get_if<Fc>(&step)) {
        Matrix<float> out;
        f->layer->Forward(params[f->block].data(), dense, &out);
        dense.swap(out);
      } else {
        Matrix<float> out;
        std::get<Interaction>(step).layer->Forward(dense, vectors, &out);
        dense.swap(out);
        vectors.resize(n, 0);
      }
      Tock(index);
    }
    return dense;
  }

  absl::Status Backward(const Matrix<float>& d_logits) {
    for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
    Matrix<float> d_dense = d_logits, d_vectors;
    std::vector<ps::Ticket> pushes;
    int64_t vector_cols = 0;  // columns of d_vectors still to hand back to embedding layers
    for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
      const size_t index = static_cast<size_t>(steps.rend() - it) - 1;
      Tick();
      if (auto* f = std::get_if<Fc>(&*it)) {
        Matrix<float> d_in;
        const bool first = it + 1 == steps.rend();
        f->layer->Backward(params[f->block].data(), d_dense, first ? nullptr : &d_in,
                           grads[f->block].data());
        d_dense.swap(d_in);
      } else if (auto* i = std::get_if<Interaction>(&*it)) {
        Matrix<float> d_in;
        i->layer->Backward(d_dense, &d_in, &d_vectors);
        d_dense.swap(d_in);
        vector_cols = d_vectors.cols();
      } else {
        auto& e = std::get<Embedding>(*it);
        const int64_t cols = e.slots * e.dim;
        vector_cols -= cols;
        Matrix<float> mine = d_vectors.middleCols(vector_cols, cols);
        HETERPS_RETURN_IF_ERROR(e.bag->Backward(mine));
      }
      Tock(index);
    }
    for (size_t b = 0; b < grads.size(); ++b) {
      pushes.push_back(client->PushDense(kDenseTable, static_cast<int>(b), grads[b]));
    }
    absl::Status status;
    for (ps::Ticket t : pushes) status.Update(client->Wait(t));
    return status;
  }
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const config::ModelSpec& spec,
                                                     ps::PsClient* client,
                                                     const ModelOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->client = client;
  ps::DenseTableOptions dense_options;
  dense_options.optimizer = options.dense_optimizer;
  dense_options.seed = options.seed;
  int embeddings = 0;
  for (const config::LayerSpec& layer : spec.layers) {
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec.source, ":", layer.line, ": layer ", layer.name, ": ", why));
    };
    switch (layer.kind) {
      case config::LayerKind::kInput:
        if (layer.dense_features != data::kDenseFeatures ||
            layer.sparse_slots != data::kSparseSlots) {
          return bad(
              absl::StrCat("training reads Criteo data (13 dense features, 26 slots); this "
                           "input has ",
                           layer.dense_features, " and ", layer.sparse_slots));
        }
        break;
      case config::LayerKind::kEmbedding: {
        ps::SparseTableOptions sparse;
        sparse.dim = static_cast<int>(layer.dim);
        sparse.optimizer = options.sparse_optimizer;
        sparse.seed = options.seed + 1000 + embeddings;
        sparse.init_range = static_cast<float>(std::sqrt(1.0 / std::max<int64_t>(layer.rows, 1)));
        if (options.create_tables) {
          HETERPS_RETURN_IF_ERROR(client->CreateSparseTable(embeddings, sparse));
        }
        impl->names.push_back(layer.name);
        impl->steps.push_back(Impl::Embedding{
            std::make_unique<dense::EmbeddingBag>(client, embeddings, layer.slots, layer.dim),
            layer.slots, layer.dim});
        ++embeddings;
        break;
      }
      case config::LayerKind::kFc: {
        const int block = static_cast<int>(dense_options.block_sizes.size());
        auto fc = std::make_unique<dense::FcLayer<float>>(layer.in, layer.out, layer.activation);
        dense_options.block_sizes.push_back(fc->num_params());
        dense_options.init_ranges.push_back(
            static_cast<float>(std::sqrt(6.0 / static_cast<double>(layer.in + layer.out))));
        impl->params.emplace_back(fc->num_params());
        impl->grads.emplace_back(fc->num_params());
        impl->names.push_back(layer.name);
        impl->steps.push_back(Impl::Fc{std::move(fc), block});
        break;
      }
      case config::LayerKind::kInteraction:
        impl->names.push_back(layer.name);
        impl->steps.push_back(Impl::Interaction{std::make_unique<dense::InteractionLayer<float>>(
            layer.op, layer.dense_width_in, layer.vectors_in, layer.vector_dim_in)});
        break;
      case config::LayerKind::kLogloss:
        if (layer.dense_width_in != 1) return bad("the logloss needs a single logit");
        impl->loss_name = layer.name;
        break;
      case config::LayerKind::kCustom:
        return bad("custom layers describe costs for planning; they cannot be trained");
    }
  }
  if (options.create_tables && !dense_options.block_sizes.empty()) {
    HETERPS_RETURN_IF_ERROR(client->CreateDenseTable(kDenseTable, dense_options));
  }
  return std::unique_ptr<Model>(new Model(std::move(impl)));
}

absl::StatusOr<double> Model::TrainStep(const data::Batch& batch) {
  HETERPS_RETURN_IF_ERROR(impl_->PullDense());
  HETERPS_ASSIGN_OR_RETURN(Matrix<float> logits, impl_->Forward(batch));
  Matrix<float> d_logits;
  const absl::Time start = absl::Now();
  const double loss = dense::Logloss(logits, batch.labels.data(), &d_logits);
  if (impl_->timing) impl_->loss_seconds += absl::ToDoubleSeconds(absl::Now() - start);
  HETERPS_RETURN_IF_ERROR(impl_->Backward(d_logits));
  return loss;
}

absl::StatusOr<std::vector<std::pair<std::string, double>>> Model::ProfileStep(
    const data::Batch& batch) {
  impl_->timing = true;
  impl_->seconds.assign(impl_->steps.size(), 0.0);
  impl_->loss_seconds = 0;
  absl::StatusOr<double> loss = TrainStep(batch);
  impl_->timing = false;
  HETERPS_RETURN_IF_ERROR(loss.status());
  std::vector<std::pair<std::string, double>> layers;
  for (size_t i = 0; i < impl_->steps.size(); ++i) {
    layers.emplace_back(impl_->names[i], impl_->seconds[i]);
  }
  if (!impl_->loss_name.empty()) layers.emplace_back(impl_->loss_name, impl_->loss_seconds);
  return layers;
}

absl::Status Model::Predict(const data::Batch& batch, std::vector<float>* probabilities) {
  HETERPS_RETURN_IF_ERROR(impl_->PullDense());
  HETERPS_ASSIGN_OR_RETURN(Matrix<float> logits, impl_->Forward(batch));
  probabilities->resize(batch.size);
  for (int r = 0; r < batch.size; ++r) {
    (*probabilities)[r] = 1.0f / (1.0f + std::exp(-logits(r, 0)));
  }
  return absl::OkStatus();
}

int64_t Model::dense_parameters() const {
  int64_t total = 0;
  for (const auto& p : impl_->params) total += static_cast<int64_t>(p.size());
  return total;
}

}  // namespace heterps::worker
