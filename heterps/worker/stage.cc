#include "heterps/worker/stage.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"

namespace heterps::worker {
namespace {

using config::LayerKind;
using config::LayerSpec;

absl::Status Untrainable(const config::ModelSpec& spec, const LayerSpec& layer,
                         absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(spec.source, ":", layer.line, ": layer ", layer.name, ": ", why));
}

absl::Status CheckTrainable(const config::ModelSpec& spec, const LayerSpec& layer) {
  switch (layer.kind) {
    case LayerKind::kInput:
      if (layer.dense_features != data::kDenseFeatures ||
          layer.sparse_slots != data::kSparseSlots) {
        return Untrainable(spec, layer,
                           absl::StrCat("training reads Criteo data (13 dense features, 26 "
                                        "slots); this input has ",
                                        layer.dense_features, " and ", layer.sparse_slots));
      }
      return absl::OkStatus();
    case LayerKind::kLogloss:
      if (layer.dense_width_in != 1)
        return Untrainable(spec, layer, "the logloss needs a single logit");
      return absl::OkStatus();
    case LayerKind::kCustom:
      return Untrainable(spec, layer,
                         "custom layers describe costs for planning; they cannot be trained");
    default:
      return absl::OkStatus();
  }
}

// Wait for every ticket; the first error, if any. Adds the seconds waited to `*waited`.
absl::Status WaitAll(ps::PsClient* client, const std::vector<ps::Ticket>& tickets, double* waited) {
  const absl::Time start = absl::Now();
  absl::Status status;
  for (ps::Ticket t : tickets) status.Update(client->Wait(t));
  *waited += absl::ToDoubleSeconds(absl::Now() - start);
  return status;
}

}  // namespace

absl::Status CreateModelTables(const config::ModelSpec& spec, ps::PsClient* client,
                               const ModelOptions& options) {
  ps::DenseTableOptions dense;
  dense.optimizer = options.dense_optimizer;
  dense.seed = options.seed;
  int embeddings = 0;
  for (const LayerSpec& layer : spec.layers) {
    HETERPS_RETURN_IF_ERROR(CheckTrainable(spec, layer));
    if (layer.kind == LayerKind::kEmbedding) {
      ps::SparseTableOptions sparse;
      sparse.dim = static_cast<int>(layer.dim);
      sparse.optimizer = options.sparse_optimizer;
      sparse.seed = options.seed + 1000 + embeddings;
      sparse.init_range = static_cast<float>(std::sqrt(1.0 / std::max<int64_t>(layer.rows, 1)));
      sparse.memory_budget_bytes = options.sparse_memory_budget_bytes;
      HETERPS_RETURN_IF_ERROR(client->CreateSparseTable(embeddings++, sparse));
    } else if (layer.kind == LayerKind::kFc) {
      dense.block_sizes.push_back(layer.out * layer.in + layer.out);
      dense.init_ranges.push_back(
          static_cast<float>(std::sqrt(6.0 / static_cast<double>(layer.in + layer.out))));
    }
  }
  if (dense.block_sizes.empty()) return absl::OkStatus();
  return client->CreateDenseTable(kDenseTable, dense);
}

void InputActivations(const data::Batch& batch, int64_t begin, int64_t n, Activations* out) {
  out->size = n;
  out->labels.assign(batch.labels.begin() + begin, batch.labels.begin() + begin + n);
  out->keys.assign(batch.keys.begin() + begin * data::kSparseSlots,
                   batch.keys.begin() + (begin + n) * data::kSparseSlots);
  out->dense = Eigen::Map<const Matrix<float>>(batch.dense.data() + begin * data::kDenseFeatures, n,
                                               data::kDenseFeatures);
  out->vectors.resize(n, 0);
}

void ParameterGrads::Clear() {
  for (AlignedFloats& block : dense) std::fill(block.begin(), block.end(), 0.0f);
  for (Rows& rows : sparse) {
    rows.keys.clear();
    rows.grads.clear();
  }
}

void ParameterGrads::Add(const ParameterGrads& other) {
  for (size_t b = 0; b < dense.size(); ++b) {
    Eigen::Map<Eigen::ArrayXf>(dense[b].data(), dense[b].size()) +=
        Eigen::Map<const Eigen::ArrayXf>(other.dense[b].data(), other.dense[b].size());
  }
  for (size_t e = 0; e < sparse.size(); ++e) {
    sparse[e].keys.insert(sparse[e].keys.end(), other.sparse[e].keys.begin(),
                          other.sparse[e].keys.end());
    sparse[e].grads.insert(sparse[e].grads.end(), other.sparse[e].grads.begin(),
                           other.sparse[e].grads.end());
  }
}

// One layer of the stage, as built from its spec.
struct Layer {
  LayerKind kind;
  std::string name;
  int64_t slots = 0, dim = 0;  // embedding
  int table = 0;               // embedding: its sparse table
  int block = 0;               // fc: its dense block
  int local = 0;               // embedding, fc: its index among the stage's layers of its kind
  const LayerSpec* spec = nullptr;
};

// The state of one micro-batch in flight, and the buffers it reuses: per layer of the stage.
struct Context {
  std::vector<std::unique_ptr<dense::FcLayer<float>>> fc;
  std::vector<std::unique_ptr<dense::InteractionLayer<float>>> interaction;
  std::vector<Matrix<float>> dense_out, vectors_out;  // what each layer produced
  std::vector<Matrix<float>> d_dense, d_vectors;      // gradients of each layer's inputs
  Matrix<float> rows, d_logits, d_top, empty;
  std::vector<std::vector<uint64_t>> keys;   // per embedding layer: the keys it looked up
  const Matrix<float>* out_dense = nullptr;  // what left the stage
  const Matrix<float>* out_vectors = nullptr;
  int64_t size = 0;
};

struct Stage::Impl {
  ps::PsClient* client = nullptr;
  int first = 0, last = 0;
  bool loss = false, passes_keys = false, passes_labels = false;
  std::vector<Layer> layers;
  std::vector<int> blocks;  // dense blocks of the stage's fc layers, in order
  std::vector<AlignedFloats> params;
  std::vector<int64_t> dims;  // of the stage's embedding tables
  std::vector<int> tables;
  std::vector<std::unique_ptr<Context>> contexts;
  bool timing = false;
  std::vector<double> seconds;  // per layer
  double ps_seconds = 0;        // waiting for the parameter servers

  Context& ContextOf(int ctx) {
    if (static_cast<size_t>(ctx) >= contexts.size()) contexts.resize(ctx + 1);
    std::unique_ptr<Context>& c = contexts[ctx];
    if (c == nullptr) {
      c = std::make_unique<Context>();
      const size_t n = layers.size();
      c->fc.resize(n);
      c->interaction.resize(n);
      c->dense_out.resize(n);
      c->vectors_out.resize(n);
      c->d_dense.resize(n);
      c->d_vectors.resize(n);
      c->keys.resize(tables.size());
      for (size_t i = 0; i < n; ++i) {
        const LayerSpec& s = *layers[i].spec;
        if (s.kind == LayerKind::kFc) {
          c->fc[i] = std::make_unique<dense::FcLayer<float>>(s.in, s.out, s.activation);
        } else if (s.kind == LayerKind::kInteraction) {
          c->interaction[i] = std::make_unique<dense::InteractionLayer<float>>(
              s.op, s.dense_width_in, s.vectors_in, s.vector_dim_in);
        }
      }
    }
    return *c;
  }

  void Time(size_t layer, absl::Time start) {
    if (timing) seconds[layer] += absl::ToDoubleSeconds(absl::Now() - start);
  }

  // Runs the layers (not the loss) on `in`; leaves the result in c.out_dense and c.out_vectors.
  absl::Status Run(Context& c, const Activations& in) {
    const int64_t n = in.size;
    c.size = n;
    c.empty.resize(n, 0);
    const Matrix<float>* dense = &in.dense;
    const Matrix<float>* vectors = in.vectors.cols() > 0 ? &in.vectors : &c.empty;
    for (size_t i = 0; i < layers.size(); ++i) {
      const Layer& layer = layers[i];
      const absl::Time start = timing ? absl::Now() : absl::InfinitePast();
      switch (layer.kind) {
        case LayerKind::kEmbedding: {
          // The rows join the vectors already carried (copied only when there are some).
          Matrix<float>& joined = c.vectors_out[i];
          if (vectors->cols() == 0) {
            HETERPS_RETURN_IF_ERROR(Lookup(c, in, layer, &joined));
          } else {
            HETERPS_RETURN_IF_ERROR(Lookup(c, in, layer, &c.rows));
            joined.resize(n, vectors->cols() + c.rows.cols());
            joined << *vectors, c.rows;
          }
          vectors = &joined;
          break;
        }
        case LayerKind::kFc:
          c.fc[i]->Forward(params[layer.local].data(), *dense, &c.dense_out[i]);
          dense = &c.dense_out[i];
          break;
        case LayerKind::kInteraction:
          c.interaction[i]->Forward(*dense, *vectors, &c.dense_out[i]);
          dense = &c.dense_out[i];
          vectors = &c.empty;
          break;
        default:
          break;
      }
      Time(i, start);
    }
    c.out_dense = dense;
    c.out_vectors = vectors;
    return absl::OkStatus();
  }

  // Pulls the rows of embedding `layer` for the micro-batch into `rows` (n x slots dim).
  absl::Status Lookup(Context& c, const Activations& in, const Layer& layer, Matrix<float>* rows) {
    if (static_cast<int64_t>(in.keys.size()) != in.size * data::kSparseSlots) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", layer.name, ": ", in.keys.size(),
                                                     " keys for ", in.size, " samples"));
    }
    std::vector<uint64_t>& keys = c.keys[layer.local];
    keys.resize(in.size * layer.slots);
    for (int64_t r = 0; r < in.size; ++r) {
      std::copy_n(in.keys.begin() + r * data::kSparseSlots, layer.slots,
                  keys.begin() + r * layer.slots);
    }
    rows->resize(in.size, layer.slots * layer.dim);
    const absl::Time start = absl::Now();
    absl::Status pulled = client->Wait(client->PullSparse(
        layer.table, keys, absl::MakeSpan(rows->data(), static_cast<size_t>(rows->size()))));
    ps_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    return pulled;
  }

  // Backward through the layers from the gradients of what left the stage; d_out_dense is
  // consumed (fc layers overwrite the gradient they are given).
  void Back(Context& c, Matrix<float>* d_out_dense, const Matrix<float>& d_out_vectors,
            ActivationGrads* d_in, ParameterGrads* grads) {
    Matrix<float>* d_dense = d_out_dense;
    const Matrix<float>* d_vectors = &d_out_vectors;
    int64_t vector_cols = d_vectors->cols();  // leading columns still owed to earlier layers
    for (size_t i = layers.size(); i-- > 0;) {
      const Layer& layer = layers[i];
      const absl::Time start = timing ? absl::Now() : absl::InfinitePast();
      // Whether the gradient of this layer's input goes anywhere: to an earlier layer of the
      // stage that is not the raw input, or out of the stage.
      const bool wanted = i > 0 ? layers[i - 1].kind != LayerKind::kInput : d_in != nullptr;
      switch (layer.kind) {
        case LayerKind::kFc:
          c.fc[i]->Backward(params[layer.local].data(), d_dense, wanted ? &c.d_dense[i] : nullptr,
                            grads->dense[layer.local].data());
          d_dense = &c.d_dense[i];
          break;
        case LayerKind::kInteraction:
          c.interaction[i]->Backward(*d_dense, &c.d_dense[i], &c.d_vectors[i]);
          d_dense = &c.d_dense[i];
          d_vectors = &c.d_vectors[i];
          vector_cols = d_vectors->cols();
          break;
        case LayerKind::kEmbedding: {
          // This layer's vectors are the last slots * dim of the columns still owed.
          const int64_t width = layer.slots * layer.dim;
          vector_cols -= width;
          ParameterGrads::Rows& rows = grads->sparse[layer.local];
          const std::vector<uint64_t>& keys = c.keys[layer.local];
          rows.keys.insert(rows.keys.end(), keys.begin(), keys.end());
          const size_t at = rows.grads.size();
          rows.grads.resize(at + c.size * width);
          for (int64_t r = 0; r < c.size; ++r) {
            std::copy_n(d_vectors->row(r).data() + vector_cols, width,
                        rows.grads.data() + at + r * width);
          }
          break;
        }
        default:
          break;
      }
      Time(i, start);
    }
    if (d_in != nullptr) {
      d_in->dense = *d_dense;
      d_in->vectors = d_vectors->leftCols(vector_cols);
    }
  }
};

Stage::Stage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Stage::~Stage() = default;

absl::StatusOr<std::unique_ptr<Stage>> Stage::Create(const config::ModelSpec& spec, int first,
                                                     int last, ps::PsClient* client) {
  const int n = static_cast<int>(spec.layers.size());
  if (first < 0 || first > last || last >= n) {
    return absl::InvalidArgumentError(absl::StrCat(spec.source, ": stage of layers ", first, "..",
                                                   last, " outside the model's 0..", n - 1));
  }
  auto impl = std::make_unique<Impl>();
  impl->client = client;
  impl->first = first;
  impl->last = last;
  int embeddings = 0, fcs = 0;
  for (int i = 0; i < n; ++i) {
    const LayerSpec& s = spec.layers[i];
    HETERPS_RETURN_IF_ERROR(CheckTrainable(spec, s));
    const bool mine = i >= first && i <= last;
    if (i > last && s.kind == LayerKind::kEmbedding) impl->passes_keys = true;
    if (i > last && s.kind == LayerKind::kLogloss) impl->passes_labels = true;
    if (mine) {
      Layer layer{s.kind, s.name};
      layer.spec = &spec.layers[i];
      if (s.kind == LayerKind::kEmbedding) {
        layer.slots = s.slots;
        layer.dim = s.dim;
        layer.table = embeddings;
        layer.local = static_cast<int>(impl->tables.size());
        impl->tables.push_back(embeddings);
        impl->dims.push_back(s.dim);
      } else if (s.kind == LayerKind::kFc) {
        layer.block = fcs;
        layer.local = static_cast<int>(impl->blocks.size());
        impl->blocks.push_back(fcs);
        impl->params.emplace_back(s.out * s.in + s.out);
      } else if (s.kind == LayerKind::kLogloss) {
        impl->loss = true;
      }
      impl->layers.push_back(layer);
    }
    if (s.kind == LayerKind::kEmbedding) ++embeddings;
    if (s.kind == LayerKind::kFc) ++fcs;
  }
  impl->seconds.assign(impl->layers.size(), 0.0);
  return std::unique_ptr<Stage>(new Stage(std::move(impl)));
}

int Stage::first() const { return impl_->first; }
int Stage::last() const { return impl_->last; }
bool Stage::has_loss() const { return impl_->loss; }
bool Stage::passes_keys() const { return impl_->passes_keys; }
bool Stage::passes_labels() const { return impl_->passes_labels; }

int64_t Stage::dense_parameters() const {
  int64_t total = 0;
  for (const AlignedFloats& p : impl_->params) total += static_cast<int64_t>(p.size());
  return total;
}

absl::Status Stage::PullParameters() {
  std::vector<ps::Ticket> tickets;
  for (size_t b = 0; b < impl_->blocks.size(); ++b) {
    tickets.push_back(
        impl_->client->PullDense(kDenseTable, impl_->blocks[b], absl::MakeSpan(impl_->params[b])));
  }
  return WaitAll(impl_->client, tickets, &impl_->ps_seconds);
}

absl::Status Stage::Forward(int ctx, const Activations& in, Activations* out) {
  if (impl_->loss)
    return absl::FailedPreconditionError("the stage with the loss runs ForwardBackward");
  Context& c = impl_->ContextOf(ctx);
  HETERPS_RETURN_IF_ERROR(impl_->Run(c, in));
  out->size = in.size;
  out->dense = *c.out_dense;
  out->vectors = *c.out_vectors;
  if (impl_->passes_keys) {
    out->keys = in.keys;
  } else {
    out->keys.clear();
  }
  if (impl_->passes_labels) {
    out->labels = in.labels;
  } else {
    out->labels.clear();
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Stage::ForwardBackward(int ctx, const Activations& in, float scale,
                                              ActivationGrads* d_in, ParameterGrads* grads) {
  if (!impl_->loss) return absl::FailedPreconditionError("ForwardBackward needs the loss layer");
  if (static_cast<int64_t>(in.labels.size()) != in.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss: ", in.labels.size(), " labels for ", in.size, " samples"));
  }
  Context& c = impl_->ContextOf(ctx);
  HETERPS_RETURN_IF_ERROR(impl_->Run(c, in));
  const absl::Time start = absl::Now();
  const double loss = dense::LoglossSum(*c.out_dense, in.labels.data(), scale, &c.d_logits);
  impl_->Time(impl_->layers.size() - 1, start);
  impl_->Back(c, &c.d_logits, c.empty, d_in, grads);
  return loss;
}

absl::Status Stage::Backward(int ctx, const ActivationGrads& d_out, ActivationGrads* d_in,
                             ParameterGrads* grads) {
  if (static_cast<size_t>(ctx) >= impl_->contexts.size() || impl_->contexts[ctx] == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("backward of context ", ctx, " before its forward"));
  }
  Context& c = *impl_->contexts[ctx];
  if (d_out.dense.rows() != c.size || d_out.dense.cols() != c.out_dense->cols() ||
      d_out.vectors.cols() != c.out_vectors->cols()) {
    return absl::InvalidArgumentError(
        absl::StrCat("backward: gradients of ", d_out.dense.rows(), " x (", d_out.dense.cols(),
                     " + ", d_out.vectors.cols(), ") for activations of ", c.size, " x (",
                     c.out_dense->cols(), " + ", c.out_vectors->cols(), ")"));
  }
  const Matrix<float>& d_vectors = d_out.vectors.cols() > 0 ? d_out.vectors : c.empty;
  c.d_top = d_out.dense;  // Back consumes it
  impl_->Back(c, &c.d_top, d_vectors, d_in, grads);
  return absl::OkStatus();
}

absl::Status Stage::Predict(int ctx, const Activations& in, Activations* out) {
  Context& c = impl_->ContextOf(ctx);
  HETERPS_RETURN_IF_ERROR(impl_->Run(c, in));
  out->size = in.size;
  if (impl_->loss) {
    out->dense = (1.0f / (1.0f + (-c.out_dense->array()).exp())).matrix();
    out->vectors.resize(in.size, 0);
    out->keys.clear();
    out->labels = in.labels;
    return absl::OkStatus();
  }
  out->dense = *c.out_dense;
  out->vectors = *c.out_vectors;
  out->keys = impl_->passes_keys ? in.keys : std::vector<uint64_t>();
  out->labels = in.labels;
  return absl::OkStatus();
}

ParameterGrads Stage::NewGrads() const {
  ParameterGrads grads;
  for (const AlignedFloats& p : impl_->params) grads.dense.emplace_back(p.size(), 0.0f);
  grads.sparse.resize(impl_->tables.size());
  return grads;
}

absl::Status Stage::Push(const ParameterGrads& grads) {
  ps::PsClient* client = impl_->client;
  std::vector<ps::Ticket> tickets;
  for (size_t e = 0; e < grads.sparse.size(); ++e) {
    if (grads.sparse[e].keys.empty()) continue;
    tickets.push_back(
        client->PushSparse(impl_->tables[e], grads.sparse[e].keys, grads.sparse[e].grads));
  }
  for (size_t b = 0; b < grads.dense.size(); ++b) {
    tickets.push_back(client->PushDense(kDenseTable, impl_->blocks[b], grads.dense[b]));
  }
  return WaitAll(client, tickets, &impl_->ps_seconds);
}

absl::Status Stage::Accumulate(const ParameterGrads& grads, int part) {
  ps::PsClient* client = impl_->client;
  std::vector<ps::Ticket> tickets;
  for (size_t e = 0; e < grads.sparse.size(); ++e) {
    if (grads.sparse[e].keys.empty()) continue;
    tickets.push_back(client->AccumulateSparse(impl_->tables[e], grads.sparse[e].keys,
                                               grads.sparse[e].grads, part));
  }
  for (size_t b = 0; b < grads.dense.size(); ++b) {
    tickets.push_back(client->AccumulateDense(kDenseTable, impl_->blocks[b], grads.dense[b], part));
  }
  return WaitAll(client, tickets, &impl_->ps_seconds);
}

double Stage::ps_seconds() const { return impl_->ps_seconds; }

void Stage::set_timing(bool on) {
  impl_->timing = on;
  if (on) impl_->seconds.assign(impl_->layers.size(), 0.0);
}

std::vector<std::pair<std::string, double>> Stage::layer_seconds() const {
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < impl_->layers.size(); ++i) {
    if (impl_->layers[i].kind == LayerKind::kInput) continue;
    out.emplace_back(impl_->layers[i].name, impl_->seconds[i]);
  }
  return out;
}

}  // namespace heterps::worker
