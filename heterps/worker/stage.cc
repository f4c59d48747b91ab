// A stage and the model-wide pieces it builds on (the tables, the input activations, the
// parameter gradients): over 500 lines, one contract (stage.h).
#include "heterps/worker/stage.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "heterps/base/status_macros.h"
#include "heterps/dense/cpu/cpu_backend.h"
#include "heterps/ps/bags.h"
#include "heterps/ps/block_tree.h"
#include "heterps/ps/gpu/gpu_tier.h"
#include "heterps/ps/optimizer.h"

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
      if (layer.dense_features != spec.data.dense_features() ||
          layer.sparse_slots != spec.data.slots()) {
        return Untrainable(
            spec, layer,
            absl::StrCat(
                "the data has ", spec.data.dense_features(), " dense features and ",
                spec.data.slots(), " slots",
                spec.data_declared ? "" : " (Criteo's layout: the spec has no data section)",
                "; this input has ", layer.dense_features, " and ", layer.sparse_slots));
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

// The keys of slots 0 .. slots-1 of every sample of `in` (whose samples hold `in_slots` slots), as
// ragged as they come: `offsets` stays empty while every slot holds one key. InvalidArgument when
// `in` is not shaped for `in_slots`.
absl::Status GatherKeys(const Activations& in, int64_t in_slots, int64_t slots,
                        absl::string_view what, std::vector<uint64_t>* keys,
                        std::vector<int32_t>* offsets) {
  const int64_t n = in.size;
  if (in.offsets.empty()) {
    if (static_cast<int64_t>(in.keys.size()) != n * in_slots) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": ", in.keys.size(), " keys for ", n,
                                                     " samples of ", in_slots, " slots"));
    }
    offsets->clear();
    keys->resize(n * slots);
    for (int64_t r = 0; r < n; ++r) {
      std::copy_n(in.keys.begin() + r * in_slots, slots, keys->begin() + r * slots);
    }
    return absl::OkStatus();
  }
  if (static_cast<int64_t>(in.offsets.size()) != n * in_slots + 1 || in.offsets.front() != 0 ||
      static_cast<size_t>(in.offsets.back()) != in.keys.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", in.offsets.size(), " offsets for ",
                                                   n, " samples of ", in_slots, " slots and ",
                                                   in.keys.size(), " keys"));
  }
  for (size_t i = 1; i < in.offsets.size(); ++i) {
    if (in.offsets[i] < in.offsets[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": offsets decrease at ", i));
    }
  }
  keys->clear();
  offsets->assign(1, 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t s = 0; s < slots; ++s) {
      const int32_t begin = in.offsets[r * in_slots + s], end = in.offsets[r * in_slots + s + 1];
      keys->insert(keys->end(), in.keys.begin() + begin, in.keys.begin() + end);
      offsets->push_back(static_cast<int32_t>(keys->size()));
    }
  }
  return absl::OkStatus();
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

ps::SparseTableOptions EmbeddingTableOptions(const config::LayerSpec& layer, int table,
                                             const ModelOptions& options) {
  ps::SparseTableOptions sparse;
  sparse.dim = static_cast<int>(layer.dim);
  sparse.optimizer = options.sparse_optimizer;
  sparse.seed = options.seed + 1000 + table;
  sparse.init_range = static_cast<float>(std::sqrt(1.0 / std::max<int64_t>(layer.rows, 1)));
  sparse.memory_budget_bytes = options.sparse_memory_budget_bytes;
  return sparse;
}

std::vector<ps::TierTable> StageTierTables(const config::ModelSpec& spec, int first, int last,
                                           const ModelOptions& options) {
  std::vector<ps::TierTable> tables;
  int table = 0;
  for (int l = 0; l < static_cast<int>(spec.layers.size()); ++l) {
    const LayerSpec& layer = spec.layers[l];
    if (layer.kind != LayerKind::kEmbedding) continue;
    if (l >= first && l <= last) {
      tables.push_back({table, EmbeddingTableOptions(layer, table, options),
                        std::max<int64_t>(layer.rows * std::max<int64_t>(layer.slots, 1), 1)});
    }
    ++table;
  }
  return tables;
}

absl::Status CreateModelTables(const config::ModelSpec& spec, ps::PsClient* client,
                               const ModelOptions& options) {
  ps::DenseTableOptions dense;
  dense.optimizer = options.dense_optimizer;
  dense.seed = options.seed;
  // A custom layer is the reason such a model cannot train, whatever else its shapes say.
  for (const LayerSpec& layer : spec.layers) {
    if (layer.kind == LayerKind::kCustom) HETERPS_RETURN_IF_ERROR(CheckTrainable(spec, layer));
  }
  int embeddings = 0;
  for (const LayerSpec& layer : spec.layers) {
    HETERPS_RETURN_IF_ERROR(CheckTrainable(spec, layer));
    if (layer.kind == LayerKind::kEmbedding) {
      HETERPS_RETURN_IF_ERROR(
          client->CreateSparseTable(embeddings, EmbeddingTableOptions(layer, embeddings, options)));
      ++embeddings;
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
  const int64_t slots = batch.slots;
  if (batch.one_hot()) {
    out->keys.assign(batch.keys.begin() + begin * slots, batch.keys.begin() + (begin + n) * slots);
    out->offsets.clear();
  } else {
    const int32_t first = batch.offsets[begin * slots];
    out->keys.assign(batch.keys.begin() + first,
                     batch.keys.begin() + batch.offsets[(begin + n) * slots]);
    out->offsets.resize(n * slots + 1);
    for (int64_t i = 0; i <= n * slots; ++i)
      out->offsets[i] = batch.offsets[begin * slots + i] - first;
  }
  out->dense = Eigen::Map<const Matrix<float>>(batch.dense.data() + begin * batch.dense_width, n,
                                               batch.dense_width);
  out->vectors.resize(n, 0);
}

void ParameterGrads::Reset(int64_t n) {
  blocks = n;
  for (size_t f = 0; !dense_held && f < dense.size(); ++f) {
    dense[f].resize(static_cast<size_t>(n * floats[f]));
    std::fill(dense[f].begin(), dense[f].end(), 0.0f);
  }
  for (Rows& rows : sparse) {
    rows.keys.clear();
    rows.grads.clear();
    rows.ends.assign(static_cast<size_t>(n), 0);
  }
  device.clear();
}

namespace {

// A block tree node's sums plus a sibling's: the dense sums added, each key's sums added, keys
// only the sibling has appended.
void AddNode(StepGrads::Node& into, const StepGrads::Node& more) {
  for (size_t b = 0; b < more.dense.size(); ++b) {
    Eigen::Map<Eigen::ArrayXd>(into.dense[b].data(), into.dense[b].size()) +=
        Eigen::Map<const Eigen::ArrayXd>(more.dense[b].data(), more.dense[b].size());
  }
  for (size_t e = 0; e < into.sparse.size(); ++e) {
    StepGrads::Sparse& mine = into.sparse[e];
    const StepGrads::Sparse& theirs = more.sparse[e];
    if (theirs.keys.empty()) continue;
    const size_t dim = theirs.sums.size() / theirs.keys.size();
    thread_local base::KeyIndex index;
    index.Reset(mine.keys.size() + theirs.keys.size());
    for (size_t k = 0; k < mine.keys.size(); ++k) index.Insert(mine.keys[k], k);
    for (size_t k = 0; k < theirs.keys.size(); ++k) {
      const float* sum = theirs.sums.data() + k * dim;
      auto [at, fresh] = index.Insert(theirs.keys[k], mine.keys.size());
      if (fresh) {
        mine.keys.push_back(theirs.keys[k]);
        mine.sums.insert(mine.sums.end(), sum, sum + dim);
        continue;
      }
      float* into_sum = mine.sums.data() + size_t{at} * dim;
      for (size_t d = 0; d < dim; ++d) into_sum[d] += sum[d];
    }
    index.Trim(base::KeyIndex::kStepKeptBytes);
  }
}

}  // namespace

void StepGrads::Clear() {
  for (auto& [part, node] : nodes) spare_.push_back(std::move(node));
  nodes.clear();
  device.clear();
}

void StepGrads::LeafSparse(const ParameterGrads& micro_batch, int64_t j, size_t e, Sparse* out) {
  const ParameterGrads::Rows& rows = micro_batch.sparse[e];
  const size_t dim = static_cast<size_t>(dims[e]);
  out->keys.clear();
  out->sums.clear();
  const size_t begin = j == 0 ? 0 : rows.ends[j - 1];
  index_.Reset(rows.ends[j] - begin);
  // The block's rows, each key's summed in order from 0.
  for (size_t i = begin; i < rows.ends[j]; ++i) {
    auto [at, fresh] = index_.Insert(rows.keys[i], out->keys.size());
    if (fresh) {
      out->keys.push_back(rows.keys[i]);
      out->sums.resize(out->sums.size() + dim, 0.0f);
    }
    float* sum = out->sums.data() + size_t{at} * dim;
    const float* grad = rows.grads.data() + i * dim;
    for (size_t d = 0; d < dim; ++d) sum[d] += grad[d];
  }
}

void StepGrads::Add(int64_t first_block, const ParameterGrads& micro_batch) {
  device.insert(device.end(), micro_batch.device.begin(), micro_batch.device.end());
  for (int64_t j = 0; j < micro_batch.blocks; ++j) {
    int part = ps::NodePart(0, first_block + j);
    Node node;
    auto sibling = std::find_if(nodes.begin(), nodes.end(),
                                [&](const auto& n) { return n.first == (part ^ 1); });
    if (sibling != nodes.end()) {
      // The leaf added straight into its sibling (in double, as a node of its own would be),
      // which makes their parent.
      node = std::move(sibling->second);
      nodes.erase(sibling);
      for (size_t f = 0; !micro_batch.dense_held && f < micro_batch.dense.size(); ++f) {
        Eigen::Map<Eigen::ArrayXd>(node.dense[f].data(), micro_batch.floats[f]) +=
            Eigen::Map<const Eigen::ArrayXf>(micro_batch.dense_block(f, j), micro_batch.floats[f])
                .cast<double>();
      }
      leaf_.sparse.resize(micro_batch.sparse.size());
      for (size_t e = 0; e < micro_batch.sparse.size(); ++e) {
        LeafSparse(micro_batch, j, e, &leaf_.sparse[e]);
      }
      AddNode(node, leaf_);  // its sparse sums: leaf_ has no dense ones
      part = ps::NodeParent(part);
    } else {
      // A node of its own, in the memory of an earlier one.
      if (!spare_.empty()) {
        node = std::move(spare_.back());
        spare_.pop_back();
      }
      node.dense.resize(micro_batch.dense_held ? 0 : micro_batch.dense.size());
      for (size_t f = 0; f < node.dense.size(); ++f) {
        const float* g = micro_batch.dense_block(f, j);
        node.dense[f].assign(g, g + micro_batch.floats[f]);
      }
      node.sparse.resize(micro_batch.sparse.size());
      for (size_t e = 0; e < micro_batch.sparse.size(); ++e) {
        LeafSparse(micro_batch, j, e, &node.sparse[e]);
      }
    }
    // Up the tree while the sibling is here.
    for (;;) {
      auto up = std::find_if(nodes.begin(), nodes.end(),
                             [&](const auto& n) { return n.first == (part ^ 1); });
      if (up == nodes.end()) break;
      AddNode(node, up->second);
      spare_.push_back(std::move(up->second));
      nodes.erase(up);
      part = ps::NodeParent(part);
    }
    auto at = std::lower_bound(nodes.begin(), nodes.end(), part,
                               [](const auto& n, int p) { return n.first < p; });
    nodes.emplace(at, part, std::move(node));
  }
}

void StepGrads::MergeAll() { ps::MergeNodes(&nodes, /*to_root=*/true, AddNode); }

// A run of the stage's layers: the input (nothing to do), one embedding layer (rows pulled
// from the parameter servers, on this host) or a chain of consecutive dense layers (on the
// stage's backend).
struct Part {
  enum class Kind { kInput, kEmbedding, kDense } kind = Kind::kInput;
  int first = 0, last = 0;  // spec layers
  // kEmbedding
  std::string name;
  int64_t slots = 0, dim = 0;
  bool mean = false;  // pooling of a multi-hot slot: the mean (else the sum)
  int table = 0;      // its sparse table
  int local = 0;      // its index among the stage's embedding layers
  // kDense
  std::unique_ptr<dense::DenseChain> chain;
  std::vector<int> blocks;  // the stage-local fc indices of its fc layers, in order
};

// One micro-batch in flight, on this host: per part, what it produced and the gradients it
// passed back. The chains keep their own state per context.
struct Context {
  std::vector<Matrix<float>> vectors_out;     // embedding parts: the vectors with their rows
  std::vector<std::vector<uint64_t>> keys;    // per embedding layer: the keys it looked up
  std::vector<std::vector<int32_t>> offsets;  // and their slots' ranges (empty: one key each)
  Matrix<float> rows, empty;
  Matrix<float> pulled;  // a multi-hot lookup's rows, one per key, before pooling
  const Matrix<float>* out_dense = nullptr;  // what left the stage
  const Matrix<float>* out_vectors = nullptr;
  Matrix<float> d_top;  // a copy of the gradient given to Backward (the chains consume it)
  int64_t size = 0;
  // Blocks: the micro-batch's, and the chains' context for each (a block runs through a
  // chain on its own).
  int64_t blocks = 1;
  std::vector<int> chain_contexts;
  // Per part, per block (with several blocks): what entered a dense part (kept until backward:
  // the chains point into it) and the gradient its backward starts from (consumed).
  std::vector<std::vector<Matrix<float>>> block_dense, block_vectors;
  Matrix<float> block_d;
  // Per part: its output and the gradients of its inputs, the blocks' joined.
  std::vector<Matrix<float>> joined_out, joined_d_dense, joined_d_vectors;
};

struct Stage::Impl {
  ps::PsClient* client = nullptr;
  std::unique_ptr<dense::DenseBackend> own_backend;  // when none was given: this host's CPU
  dense::DenseBackend* backend = nullptr;
  int first = 0, last = 0;
  int64_t input_slots = 0;  // slots per sample of the input's keys
  bool loss = false, passes_keys = false, passes_labels = false;
  std::vector<Part> parts;
  std::vector<int> blocks;  // dense blocks of the stage's fc layers, in order
  std::vector<AlignedFloats> params;
  std::vector<int> tables;  // of the stage's embedding layers
  std::vector<std::unique_ptr<Context>> contexts;
  std::vector<std::string> layer_names;  // the stage's layers but the input, in order
  bool timing = false;
  int64_t block_rows = 0;  // samples per block; 0: a micro-batch is one block
  int next_chain_context = 0;
  std::vector<double> embedding_seconds;  // per embedding layer
  double ps_seconds = 0;                  // waiting for the parameter servers
  Stage::PassSeconds pass_seconds;
  // The device path (UseDeviceTier): the tier, the part of the chain it feeds, that chain's
  // vector floats per sample.
  ps::GpuTier* device_tier = nullptr;
  size_t device_chain = 0;
  int64_t device_cols = 0;
  // The dense parameters held on the device (HoldDense): their state's floats a parameter.
  bool held = false;
  int held_state_floats = 0;
  // The dense pull PullParameters started and no call has waited for yet: it writes `params`.
  std::vector<ps::Ticket> pulling;

  // Completes the dense pull in flight, if any, and hands the parameters to the chains.
  absl::Status AwaitParameters() {
    if (pulling.empty()) return absl::OkStatus();
    const std::vector<ps::Ticket> tickets = std::move(pulling);
    pulling.clear();
    HETERPS_RETURN_IF_ERROR(WaitAll(client, tickets, &ps_seconds));
    return HandParameters();
  }

  // Hands the keys of `in` to `name` (PsClient::Prefetch or Anticipate), one call per embedding
  // table.
  absl::Status NameKeys(const Activations& in, const char* what,
                        absl::Status (ps::PsClient::*name)(int, absl::Span<const uint64_t>)) {
    std::vector<uint64_t> keys;
    std::vector<int32_t> offsets;
    for (const Part& part : parts) {
      if (part.kind != Part::Kind::kEmbedding) continue;
      HETERPS_RETURN_IF_ERROR(GatherKeys(in, input_slots, part.slots, what, &keys, &offsets));
      HETERPS_RETURN_IF_ERROR((client->*name)(part.table, keys));
    }
    return absl::OkStatus();
  }

  absl::Status RefuseWhileHeld(const char* call) const {
    if (!held) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("stage: ", call, " while the dense parameters are held on the device"));
  }
  // A micro-batch of `blocks` blocks may train: while held, one block (the chains update their
  // parameters from one backward's gradients).
  absl::Status CheckHeldBlocks(int64_t blocks) const {
    if (!held || blocks <= 1) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("stage: a micro-batch of ", blocks,
                     " blocks while the dense parameters are held on the device (they take one)"));
  }
  // Calls `f(part)` for every dense part, until one fails.
  template <typename F>
  absl::Status ForEachChain(F f) {
    for (Part& part : parts) {
      if (part.kind == Part::Kind::kDense) HETERPS_RETURN_IF_ERROR(f(part));
    }
    return absl::OkStatus();
  }

  // Hands `params` to the dense chains.
  absl::Status HandParameters() {
    std::vector<const float*> pointers;
    for (Part& part : parts) {
      if (part.kind != Part::Kind::kDense) continue;
      pointers.clear();
      for (int b : part.blocks) pointers.push_back(params[b].data());
      HETERPS_RETURN_IF_ERROR(part.chain->SetParameters(pointers));
    }
    return absl::OkStatus();
  }

  Context& ContextOf(int ctx) {
    if (static_cast<size_t>(ctx) >= contexts.size()) contexts.resize(ctx + 1);
    std::unique_ptr<Context>& c = contexts[ctx];
    if (c == nullptr) {
      c = std::make_unique<Context>();
      c->vectors_out.resize(parts.size());
      c->keys.resize(tables.size());
      c->offsets.resize(tables.size());
      c->block_dense.resize(parts.size());
      c->block_vectors.resize(parts.size());
      c->joined_out.resize(parts.size());
      c->joined_d_dense.resize(parts.size());
      c->joined_d_vectors.resize(parts.size());
    }
    return *c;
  }

  int64_t BlocksOf(int64_t n) const {
    return block_rows <= 0 || n <= block_rows ? 1 : (n + block_rows - 1) / block_rows;
  }
  // Block j of a micro-batch of n samples: its first sample and its samples.
  std::pair<int64_t, int64_t> BlockRange(int64_t n, int64_t j) const {
    if (block_rows <= 0) return {0, n};
    const int64_t begin = j * block_rows;
    return {begin, std::min(block_rows, n - begin)};
  }

  // Runs dense part p (its chain) on the context's micro-batch, block by block: each block's
  // samples on their own, so that what a sample's outputs and a block's gradients are does not
  // depend on the micro-batch around them.
  absl::StatusOr<const Matrix<float>*> RunChain(Context& c, size_t p, const Matrix<float>& dense,
                                                const Matrix<float>& vectors, bool train) {
    dense::DenseChain& chain = *parts[p].chain;
    if (c.blocks == 1) return chain.Forward(c.chain_contexts[0], dense, vectors, train);
    std::vector<Matrix<float>>& in_dense = c.block_dense[p];
    std::vector<Matrix<float>>& in_vectors = c.block_vectors[p];
    in_dense.resize(c.blocks);
    in_vectors.resize(c.blocks);
    Matrix<float>& out = c.joined_out[p];
    for (int64_t j = 0; j < c.blocks; ++j) {
      const auto [begin, rows] = BlockRange(c.size, j);
      in_dense[j] = dense.middleRows(begin, rows);
      if (vectors.cols() > 0) {
        in_vectors[j] = vectors.middleRows(begin, rows);
      } else {
        in_vectors[j].resize(rows, 0);
      }
      HETERPS_ASSIGN_OR_RETURN(
          const Matrix<float>* o,
          chain.Forward(c.chain_contexts[j], in_dense[j], in_vectors[j], train));
      if (j == 0) out.resize(c.size, o->cols());
      out.middleRows(begin, rows) = *o;
    }
    return &out;
  }

  // Runs the parts on `in`; leaves the result in c.out_dense and c.out_vectors.
  absl::Status Run(int ctx, Context& c, const Activations& in, bool train) {
    const int64_t n = in.size;
    c.size = n;
    c.blocks = BlocksOf(n);
    while (static_cast<int64_t>(c.chain_contexts.size()) < c.blocks) {
      c.chain_contexts.push_back(next_chain_context++);
    }
    c.empty.resize(n, 0);
    const Matrix<float>* dense = &in.dense;
    const Matrix<float>* vectors = in.vectors.cols() > 0 ? &in.vectors : &c.empty;
    // The device path: the bags pooled on the device, into the input of the chain they feed.
    const bool on_device = device_tier != nullptr && c.blocks == 1 && in.vectors.cols() == 0;
    float* device_vectors = nullptr;
    int64_t column = 0;
    if (on_device) {
      HETERPS_ASSIGN_OR_RETURN(device_vectors, parts[device_chain].chain->DeviceVectors(
                                                   c.chain_contexts[0], n, device_cols));
    }
    for (size_t p = 0; p < parts.size(); ++p) {
      Part& part = parts[p];
      if (part.kind == Part::Kind::kEmbedding) {
        const absl::Time start = absl::Now();
        // The rows join the vectors already carried (copied only when there are some).
        Matrix<float>& joined = c.vectors_out[p];
        if (on_device) {
          HETERPS_RETURN_IF_ERROR(LookupOnDevice(c, in, part, device_vectors, column));
          column += part.slots * part.dim;
        } else if (vectors->cols() == 0) {
          HETERPS_RETURN_IF_ERROR(Lookup(c, in, part, &joined));
        } else {
          HETERPS_RETURN_IF_ERROR(Lookup(c, in, part, &c.rows));
          joined.resize(n, vectors->cols() + c.rows.cols());
          joined << *vectors, c.rows;
        }
        if (!on_device) vectors = &joined;
        const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
        if (train) pass_seconds.lookup += seconds;
        if (timing) embedding_seconds[part.local] += seconds;
      } else if (part.kind == Part::Kind::kDense) {
        HETERPS_RETURN_IF_ERROR(AwaitParameters());
        const absl::Time start = absl::Now();
        const bool consumes = part.chain->consumes_vectors();
        if (on_device && p == device_chain) {
          HETERPS_ASSIGN_OR_RETURN(
              dense, part.chain->ForwardDeviceVectors(c.chain_contexts[0], *dense, train));
        } else {
          HETERPS_ASSIGN_OR_RETURN(dense,
                                   RunChain(c, p, *dense, consumes ? *vectors : c.empty, train));
        }
        if (consumes) vectors = &c.empty;
        if (train) pass_seconds.dense += absl::ToDoubleSeconds(absl::Now() - start);
      }
    }
    c.out_dense = dense;
    c.out_vectors = vectors;
    return absl::OkStatus();
  }

  // The keys of embedding `part` for the micro-batch, into the context (c.keys, c.offsets).
  absl::Status KeysOf(Context& c, const Activations& in, const Part& part) {
    return GatherKeys(in, input_slots, part.slots, absl::StrCat("layer ", part.name),
                      &c.keys[part.local], &c.offsets[part.local]);
  }

  // The device path's lookup of embedding `part`: its bags into columns [column, column + slots
  // dim) of the device's rows at `out` (device_cols floats a row).
  absl::Status LookupOnDevice(Context& c, const Activations& in, const Part& part, float* out,
                              int64_t column) {
    HETERPS_RETURN_IF_ERROR(KeysOf(c, in, part));
    const absl::Time start = absl::Now();
    absl::Status status =
        device_tier->LookupBags(part.table, BagsOf(c, part), out, device_cols, column);
    // Profiling: the layer's time is its kernels' too, not the dense layer's after it.
    if (timing && status.ok()) status = backend->gpu_device()->Synchronize();
    ps_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    return status;
  }

  // Pushes the device path's gradients (AccumulateBags as `part`, else PushBags).
  absl::Status PushDevice(const std::vector<DeviceGrads>& pushes, std::optional<int> part) {
    const absl::Time start = absl::Now();
    absl::Status status;
    for (const DeviceGrads& o : pushes) {
      const Part& p = parts[o.part];
      const ps::Bags bags = BagsOf(*contexts[o.ctx], p);
      status.Update(
          part.has_value()
              ? device_tier->AccumulateBags(p.table, bags, o.grads, device_cols, o.column, *part)
              : device_tier->PushBags(p.table, bags, o.grads, device_cols, o.column));
    }
    ps_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    return status;
  }

  // Pulls the rows of embedding `part` for the micro-batch into `rows` (n x slots dim), pooling
  // the slots that hold several keys or none.
  absl::Status Lookup(Context& c, const Activations& in, const Part& part, Matrix<float>* rows) {
    HETERPS_RETURN_IF_ERROR(KeysOf(c, in, part));
    const std::vector<uint64_t>& keys = c.keys[part.local];
    const bool one_hot = c.offsets[part.local].empty();
    Matrix<float>* into = one_hot ? rows : &c.pulled;
    into->resize(static_cast<int64_t>(keys.size()) / (one_hot ? part.slots : 1),
                 (one_hot ? part.slots : 1) * part.dim);
    const absl::Time start = absl::Now();
    absl::Status pulled = client->Wait(client->PullSparse(
        part.table, keys, absl::MakeSpan(into->data(), static_cast<size_t>(into->size()))));
    ps_seconds += absl::ToDoubleSeconds(absl::Now() - start);
    if (!pulled.ok() || one_hot) return pulled;
    rows->resize(in.size, part.slots * part.dim);
    ps::PoolBags(BagsOf(c, part), part.dim, c.pulled.data(), rows->data(), rows->cols(), 0);
    return absl::OkStatus();
  }

  // The bags of embedding `part`'s lookup for the context's micro-batch (Lookup's keys).
  ps::Bags BagsOf(const Context& c, const Part& part) const {
    return {c.keys[part.local], c.offsets[part.local], c.size, part.slots, part.mean};
  }

  // Backward of dense part p from `d` (its output's gradient; consumed; null for the chain with
  // the loss), block by block as RunChain ran it, each block's parameter gradients into its own
  // block of `grads`.
  absl::StatusOr<dense::DenseChain::InputGrads> BackChain(Context& c, size_t p, Matrix<float>* d,
                                                          bool wanted, ParameterGrads* grads) {
    Part& part = parts[p];
    std::vector<float*> blocks;
    auto block_grads = [&](int64_t j) {
      blocks.clear();
      if (held) return absl::MakeSpan(blocks);  // none: they stay on the device
      for (int b : part.blocks) {
        blocks.push_back(grads->dense[b].data() + j * grads->floats[b]);
      }
      return absl::MakeSpan(blocks);
    };
    if (c.blocks == 1) {
      return part.chain->Backward(c.chain_contexts[0], d, wanted, block_grads(0));
    }
    dense::DenseChain::InputGrads out;
    for (int64_t j = 0; j < c.blocks; ++j) {
      const auto [begin, rows] = BlockRange(c.size, j);
      Matrix<float>* d_block = nullptr;
      if (d != nullptr) {
        c.block_d = d->middleRows(begin, rows);
        d_block = &c.block_d;
      }
      HETERPS_ASSIGN_OR_RETURN(
          const dense::DenseChain::InputGrads g,
          part.chain->Backward(c.chain_contexts[j], d_block, wanted, block_grads(j)));
      if (g.dense != nullptr) {
        if (j == 0) c.joined_d_dense[p].resize(c.size, g.dense->cols());
        c.joined_d_dense[p].middleRows(begin, rows) = *g.dense;
        out.dense = &c.joined_d_dense[p];
      }
      if (g.vectors != nullptr) {
        if (j == 0) c.joined_d_vectors[p].resize(c.size, g.vectors->cols());
        c.joined_d_vectors[p].middleRows(begin, rows) = *g.vectors;
        out.vectors = &c.joined_d_vectors[p];
      }
    }
    return out;
  }

  // Backward through the parts from the gradients of what left the stage (d_out_dense may be
  // consumed; null for the stage with the loss, whose last chain starts from its loss).
  absl::Status Back(int ctx, Context& c, Matrix<float>* d_out_dense,
                    const Matrix<float>& d_out_vectors, ActivationGrads* d_in,
                    ParameterGrads* grads) {
    Matrix<float>* d_dense = d_out_dense;
    const Matrix<float>* d_vectors = &d_out_vectors;
    const Matrix<float>* d_dense_in = nullptr;  // the gradient of the last chain's input
    int64_t vector_cols = d_vectors->cols();    // leading columns still owed to earlier parts
    const float* device_grads = nullptr;        // the device path: the vectors' gradient there
    for (size_t p = parts.size(); p-- > 0;) {
      Part& part = parts[p];
      if (part.kind == Part::Kind::kDense) {
        // The gradient of the chain's dense input goes to an earlier chain, or out.
        bool wanted = d_in != nullptr;
        for (size_t q = 0; q < p; ++q) wanted |= parts[q].kind == Part::Kind::kDense;
        Matrix<float>* d = d_dense_in == nullptr ? d_dense : &c.d_top;
        const absl::Time start = absl::Now();
        if (d_dense_in != nullptr) c.d_top = *d_dense_in;  // the chains consume what they get
        HETERPS_ASSIGN_OR_RETURN(const dense::DenseChain::InputGrads g,
                                 BackChain(c, p, d, wanted, grads));
        pass_seconds.dense += absl::ToDoubleSeconds(absl::Now() - start);
        d_dense_in = g.dense;
        if (g.device_vectors != nullptr) {
          device_grads = g.device_vectors;
          d_vectors = &c.empty;
          vector_cols = device_cols;
        } else if (part.chain->consumes_vectors()) {
          d_vectors = g.vectors;
          vector_cols = d_vectors->cols();
        }
      } else if (part.kind == Part::Kind::kEmbedding) {
        // This layer's vectors are the last slots * dim of the columns still owed.
        const absl::Time start = absl::Now();
        const int64_t width = part.slots * part.dim;
        vector_cols -= width;
        ParameterGrads::Rows& rows = grads->sparse[part.local];
        if (device_grads != nullptr) {
          // The device path: pushed from the device (Push, Accumulate), no rows here.
          grads->device.push_back({ctx, p, vector_cols, device_grads});
          rows.ends[0] = rows.keys.size();
          continue;
        }
        const std::vector<uint64_t>& keys = c.keys[part.local];
        const std::vector<int32_t>& offsets = c.offsets[part.local];
        rows.keys.insert(rows.keys.end(), keys.begin(), keys.end());
        const size_t at = rows.grads.size();
        rows.grads.resize(at + keys.size() * part.dim);
        ps::SpreadBagGrads(BagsOf(c, part), part.dim, d_vectors->data(), d_vectors->cols(),
                           vector_cols, rows.grads.data() + at);
        // Where each block's rows end.
        for (int64_t j = 0; j < c.blocks; ++j) {
          const auto [begin, n] = BlockRange(c.size, j);
          const int64_t end = begin + n;
          const int64_t before = offsets.empty() ? end * part.slots : offsets[end * part.slots];
          rows.ends[j] = at / part.dim + static_cast<size_t>(before);
        }
        const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
        pass_seconds.rows += seconds;
        if (timing) embedding_seconds[part.local] += seconds;
      }
    }
    if (d_in != nullptr) {
      // A stage without a dense layer passes the gradient it was given straight back.
      d_in->dense = d_dense_in != nullptr ? *d_dense_in : *d_out_dense;
      d_in->vectors = d_vectors->leftCols(vector_cols);
    }
    return absl::OkStatus();
  }
};

Stage::Stage(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Stage::~Stage() {
  // The client writes a pull in flight into the parameters' buffers until it is waited for.
  impl_->AwaitParameters().IgnoreError();
}

absl::StatusOr<std::unique_ptr<Stage>> Stage::Create(const config::ModelSpec& spec, int first,
                                                     int last, ps::PsClient* client,
                                                     dense::DenseBackend* backend) {
  const int n = static_cast<int>(spec.layers.size());
  if (first < 0 || first > last || last >= n) {
    return absl::InvalidArgumentError(absl::StrCat(spec.source, ": stage of layers ", first, "..",
                                                   last, " outside the model's 0..", n - 1));
  }
  auto impl = std::make_unique<Impl>();
  impl->client = client;
  impl->first = first;
  impl->last = last;
  if (backend == nullptr) {
    impl->own_backend = dense::NewCpuBackend();
    backend = impl->own_backend.get();
  }
  impl->backend = backend;
  impl->input_slots = spec.layers.front().sparse_slots;
  int embeddings = 0, fcs = 0;
  for (int i = 0; i < n; ++i) {
    const LayerSpec& s = spec.layers[i];
    HETERPS_RETURN_IF_ERROR(CheckTrainable(spec, s));
    const bool mine = i >= first && i <= last;
    if (i > last && s.kind == LayerKind::kEmbedding) impl->passes_keys = true;
    if (i > last && s.kind == LayerKind::kLogloss) impl->passes_labels = true;
    if (mine) {
      if (s.kind != LayerKind::kInput) impl->layer_names.push_back(s.name);
      if (s.kind == LayerKind::kLogloss) impl->loss = true;
      std::vector<Part>& parts = impl->parts;
      if (dense::IsDenseLayer(s.kind)) {
        // Consecutive dense layers make one chain.
        if (parts.empty() || parts.back().kind != Part::Kind::kDense) {
          parts.emplace_back();
          parts.back().kind = Part::Kind::kDense;
          parts.back().first = i;
        }
        parts.back().last = i;
        if (s.kind == LayerKind::kFc) {
          parts.back().blocks.push_back(static_cast<int>(impl->blocks.size()));
          impl->blocks.push_back(fcs);
          impl->params.emplace_back(s.out * s.in + s.out);
        }
      } else {
        Part part;
        part.first = part.last = i;
        part.name = s.name;
        if (s.kind == LayerKind::kEmbedding) {
          part.kind = Part::Kind::kEmbedding;
          part.slots = s.slots;
          part.dim = s.dim;
          part.mean = s.pooling == config::Pooling::kMean;
          part.table = embeddings;
          part.local = static_cast<int>(impl->tables.size());
          impl->tables.push_back(embeddings);
        }
        parts.push_back(std::move(part));
      }
    }
    if (s.kind == LayerKind::kEmbedding) ++embeddings;
    if (s.kind == LayerKind::kFc) ++fcs;
  }
  for (Part& part : impl->parts) {
    if (part.kind != Part::Kind::kDense) continue;
    HETERPS_ASSIGN_OR_RETURN(part.chain, backend->NewChain(spec, part.first, part.last));
  }
  impl->embedding_seconds.assign(impl->tables.size(), 0.0);
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

std::vector<std::pair<int, int64_t>> Stage::dense_blocks() const {
  std::vector<std::pair<int, int64_t>> out;
  for (size_t b = 0; b < impl_->blocks.size(); ++b) {
    out.emplace_back(impl_->blocks[b], static_cast<int64_t>(impl_->params[b].size()));
  }
  return out;
}

const std::vector<AlignedFloats>& Stage::dense_values() const { return impl_->params; }

absl::Status Stage::UpdateDense(
    const std::function<absl::Status(std::vector<AlignedFloats>& values)>& update) {
  HETERPS_RETURN_IF_ERROR(impl_->RefuseWhileHeld("UpdateDense"));
  HETERPS_RETURN_IF_ERROR(impl_->AwaitParameters());
  std::vector<size_t> sizes;
  for (const AlignedFloats& p : impl_->params) sizes.push_back(p.size());
  HETERPS_RETURN_IF_ERROR(update(impl_->params));
  for (size_t b = 0; b < impl_->params.size(); ++b) {
    if (b >= sizes.size() || impl_->params[b].size() != sizes[b]) {
      return absl::InternalError(absl::StrCat("dense block ", impl_->blocks[b], " has ",
                                              impl_->params[b].size(), " floats after an update"));
    }
  }
  return impl_->HandParameters();
}

absl::Status Stage::PullParameters() {
  HETERPS_RETURN_IF_ERROR(impl_->RefuseWhileHeld("PullParameters"));
  // A pull no call has waited for yet writes the same buffers: it completes first.
  HETERPS_RETURN_IF_ERROR(impl_->AwaitParameters());
  // One call for every block where the client can (the servers hold them in one table).
  std::vector<ps::DensePull> pulls;
  for (size_t b = 0; b < impl_->blocks.size(); ++b) {
    pulls.push_back({impl_->blocks[b], absl::MakeSpan(impl_->params[b])});
  }
  for (const ps::Ticket t : impl_->client->PullDenseBlocks(kDenseTable, pulls)) {
    impl_->pulling.push_back(t);
  }
  return absl::OkStatus();
}

absl::Status Stage::Prefetch(const Activations& in) {
  return impl_->NameKeys(in, "prefetch", &ps::PsClient::Prefetch);
}

absl::Status Stage::Anticipate(const Activations& next) {
  return impl_->NameKeys(next, "anticipate", &ps::PsClient::Anticipate);
}

absl::Status Stage::Forward(int ctx, const Activations& in, Activations* out) {
  if (impl_->loss)
    return absl::FailedPreconditionError("the stage with the loss runs ForwardBackward");
  Context& c = impl_->ContextOf(ctx);
  HETERPS_RETURN_IF_ERROR(impl_->Run(ctx, c, in, /*train=*/true));
  out->size = in.size;
  out->dense = *c.out_dense;
  out->vectors = *c.out_vectors;
  if (impl_->passes_keys) {
    out->keys = in.keys;
    out->offsets = in.offsets;
  } else {
    out->keys.clear();
    out->offsets.clear();
  }
  if (impl_->passes_labels) {
    out->labels = in.labels;
  } else {
    out->labels.clear();
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Stage::ForwardBackward(int ctx, const Activations& in, float scale,
                                              ActivationGrads* d_in, ParameterGrads* grads,
                                              std::vector<double>* block_losses) {
  if (!impl_->loss) return absl::FailedPreconditionError("ForwardBackward needs the loss layer");
  if (static_cast<int64_t>(in.labels.size()) != in.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss: ", in.labels.size(), " labels for ", in.size, " samples"));
  }
  HETERPS_RETURN_IF_ERROR(impl_->CheckHeldBlocks(impl_->BlocksOf(in.size)));
  Context& c = impl_->ContextOf(ctx);
  HETERPS_RETURN_IF_ERROR(impl_->Run(ctx, c, in, /*train=*/true));
  double loss = 0;
  if (block_losses != nullptr) block_losses->clear();
  const absl::Time start = absl::Now();
  for (int64_t j = 0; j < c.blocks; ++j) {
    const int64_t begin = impl_->BlockRange(c.size, j).first;
    HETERPS_ASSIGN_OR_RETURN(
        const double block,
        impl_->parts.back().chain->Loss(c.chain_contexts[j], in.labels.data() + begin, scale));
    loss += block;
    if (block_losses != nullptr) block_losses->push_back(block);
  }
  impl_->pass_seconds.dense += absl::ToDoubleSeconds(absl::Now() - start);
  grads->dense_held = impl_->held;
  grads->Reset(c.blocks);
  HETERPS_RETURN_IF_ERROR(impl_->Back(ctx, c, nullptr, c.empty, d_in, grads));
  return loss;
}

absl::Status Stage::Backward(int ctx, const ActivationGrads& d_out, ActivationGrads* d_in,
                             ParameterGrads* grads) {
  if (static_cast<size_t>(ctx) >= impl_->contexts.size() || impl_->contexts[ctx] == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("backward of context ", ctx, " before its forward"));
  }
  Context& c = *impl_->contexts[ctx];
  if (c.out_dense == nullptr || d_out.dense.rows() != c.size ||
      d_out.dense.cols() != c.out_dense->cols() || d_out.vectors.cols() != c.out_vectors->cols() ||
      (d_out.vectors.cols() > 0 && d_out.vectors.rows() != c.size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("backward: gradients of ", d_out.dense.rows(), " x (", d_out.dense.cols(),
                     " + ", d_out.vectors.cols(), ") for activations of ", c.size, " x (",
                     c.out_dense->cols(), " + ", c.out_vectors->cols(), ")"));
  }
  HETERPS_RETURN_IF_ERROR(impl_->CheckHeldBlocks(c.blocks));
  HETERPS_RETURN_IF_ERROR(impl_->AwaitParameters());
  const Matrix<float>& d_vectors = d_out.vectors.cols() > 0 ? d_out.vectors : c.empty;
  c.d_top = d_out.dense;  // the chains consume it
  grads->dense_held = impl_->held;
  grads->Reset(c.blocks);
  return impl_->Back(ctx, c, &c.d_top, d_vectors, d_in, grads);
}

absl::Status Stage::Predict(int ctx, const Activations& in, Activations* out) {
  Context& c = impl_->ContextOf(ctx);
  HETERPS_RETURN_IF_ERROR(impl_->Run(ctx, c, in, /*train=*/false));
  out->size = in.size;
  if (impl_->loss) {
    out->dense = (1.0f / (1.0f + (-c.out_dense->array()).exp())).matrix();
    out->vectors.resize(in.size, 0);
    out->keys.clear();
    out->offsets.clear();
    out->labels = in.labels;
    return absl::OkStatus();
  }
  out->dense = *c.out_dense;
  out->vectors = *c.out_vectors;
  out->keys = impl_->passes_keys ? in.keys : std::vector<uint64_t>();
  out->offsets = impl_->passes_keys ? in.offsets : std::vector<int32_t>();
  out->labels = in.labels;
  return absl::OkStatus();
}

void Stage::set_block_rows(int64_t rows) { impl_->block_rows = rows; }
int64_t Stage::block_rows() const { return impl_->block_rows; }

ParameterGrads Stage::NewGrads() const {
  ParameterGrads grads;
  for (const AlignedFloats& p : impl_->params) {
    grads.floats.push_back(static_cast<int64_t>(p.size()));
    grads.dense.emplace_back(p.size(), 0.0f);
  }
  grads.sparse.resize(impl_->tables.size());
  grads.Reset(1);
  return grads;
}

StepGrads Stage::NewStepGrads() const {
  StepGrads grads;
  for (const Part& part : impl_->parts) {
    if (part.kind == Part::Kind::kEmbedding) grads.dims.push_back(part.dim);
  }
  return grads;
}

bool Stage::can_hold_dense() const {
  return impl_->backend->gpu_device() != nullptr && !impl_->blocks.empty();
}
bool Stage::holds_dense() const { return impl_->held; }

absl::Status Stage::HoldDense(const ps::OptimizerOptions& optimizer,
                              const std::vector<AlignedFloats>& values,
                              const std::vector<std::vector<float>>& state) {
  Impl& s = *impl_;
  if (!can_hold_dense()) {
    return absl::FailedPreconditionError(
        "stage: the dense parameters can be held on a GPU only (this stage's are on the host, or "
        "it has none)");
  }
  HETERPS_RETURN_IF_ERROR(s.RefuseWhileHeld("HoldDense"));
  const int per = ps::StateFloats(optimizer.kind);
  if (values.size() != s.blocks.size() || state.size() != s.blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stage: ", values.size(), " value and ",
                                                   state.size(), " state blocks to hold for ",
                                                   s.blocks.size()));
  }
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    const size_t n = s.params[b].size();
    if (values[b].size() != n || state[b].size() != per * n) {
      return absl::InvalidArgumentError(
          absl::StrCat("stage: dense block ", s.blocks[b], ": ", values[b].size(), " values and ",
                       state[b].size(), " state floats to hold for ", n, " parameters"));
    }
  }
  HETERPS_RETURN_IF_ERROR(s.AwaitParameters());
  const dense::DenseChain::HeldOptimizer held{static_cast<int>(optimizer.kind),
                                              optimizer.learning_rate, optimizer.beta1,
                                              optimizer.beta2, optimizer.epsilon};
  HETERPS_RETURN_IF_ERROR(s.ForEachChain([&](Part& part) {
    std::vector<const float*> v, st;
    for (int b : part.blocks) {
      v.push_back(values[b].data());
      st.push_back(state[b].data());
    }
    return part.chain->Hold(held, v, st);
  }));
  s.held = true;
  s.held_state_floats = per;
  return absl::OkStatus();
}

absl::Status Stage::ApplyHeldDense(absl::Span<const int64_t> steps) {
  Impl& s = *impl_;
  if (!s.held) return absl::FailedPreconditionError("stage: ApplyHeldDense before HoldDense");
  if (steps.size() != s.blocks.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stage: ", steps.size(), " update counts for ",
                                                   s.blocks.size(), " dense blocks"));
  }
  const absl::Time start = absl::Now();
  const absl::Status status = s.ForEachChain([&](Part& part) {
    std::vector<int64_t> counts;
    for (int b : part.blocks) counts.push_back(steps[b]);
    return part.chain->ApplyHeld(counts);
  });
  s.pass_seconds.dense += absl::ToDoubleSeconds(absl::Now() - start);
  return status;
}

absl::Status Stage::ReadHeldDense(std::vector<AlignedFloats>* values,
                                  std::vector<std::vector<float>>* state) {
  Impl& s = *impl_;
  if (!s.held) return absl::FailedPreconditionError("stage: ReadHeldDense before HoldDense");
  values->resize(s.blocks.size());
  state->resize(s.blocks.size());
  for (size_t b = 0; b < s.blocks.size(); ++b) {
    (*values)[b].resize(s.params[b].size());
    (*state)[b].resize(s.held_state_floats * s.params[b].size());
  }
  return s.ForEachChain([&](Part& part) {
    std::vector<float*> v, st;
    for (int b : part.blocks) {
      v.push_back((*values)[b].data());
      st.push_back((*state)[b].data());
    }
    return part.chain->ReadHeld(v, st);
  });
}

bool Stage::UseDeviceTier(ps::GpuTier* tier) {
  Impl& s = *impl_;
  if (tier == nullptr || static_cast<ps::PsClient*>(tier) != s.client || s.first != 0) {
    return false;
  }
  const gpu::Device* device = s.backend->gpu_device();
  if (device == nullptr || device != &tier->device()) return false;
  // The input, the embedding layers (every one the tier's), then the chain that folds them.
  size_t p = 0;
  int64_t cols = 0;
  for (; p < s.parts.size(); ++p) {
    const Part& part = s.parts[p];
    if (part.kind == Part::Kind::kDense) break;
    if (part.kind != Part::Kind::kEmbedding) continue;
    if (!tier->Holds(part.table)) return false;
    cols += part.slots * part.dim;
  }
  if (cols == 0 || p == s.parts.size() || !s.parts[p].chain->consumes_vectors()) return false;
  // Embedding layers after that chain feed a later one from the host: not this path.
  for (size_t q = p + 1; q < s.parts.size(); ++q) {
    if (s.parts[q].kind == Part::Kind::kEmbedding) return false;
  }
  s.device_tier = tier;
  s.device_chain = p;
  s.device_cols = cols;
  return true;
}

absl::Status Stage::Push(const ParameterGrads& grads) {
  HETERPS_RETURN_IF_ERROR(impl_->PushDevice(grads.device, std::nullopt));
  ps::PsClient* client = impl_->client;
  std::vector<ps::Ticket> tickets;
  for (size_t e = 0; e < grads.sparse.size(); ++e) {
    if (grads.sparse[e].keys.empty()) continue;
    tickets.push_back(
        client->PushSparse(impl_->tables[e], grads.sparse[e].keys, grads.sparse[e].grads));
  }
  // Several blocks' gradients summed in block order.
  std::vector<AlignedFloats> sums;
  std::vector<ps::DensePush> dense;
  const size_t blocks = grads.dense_held ? 0 : grads.dense.size();  // held: on the device
  for (size_t b = 0; b < blocks; ++b) {
    if (grads.blocks == 1) {
      dense.push_back({impl_->blocks[b], absl::MakeConstSpan(grads.dense[b])});
      continue;
    }
    sums.emplace_back(grads.dense_block(b, 0), grads.dense_block(b, 0) + grads.floats[b]);
    for (int64_t j = 1; j < grads.blocks; ++j) {
      const float* more = grads.dense_block(b, j);
      for (int64_t i = 0; i < grads.floats[b]; ++i) sums.back()[i] += more[i];
    }
  }
  for (size_t b = 0; grads.blocks > 1 && b < blocks; ++b) {
    dense.push_back({impl_->blocks[b], absl::MakeConstSpan(sums[b])});
  }
  const std::vector<ps::Ticket> pushes = client->PushDenseBlocks(kDenseTable, dense);
  tickets.insert(tickets.end(), pushes.begin(), pushes.end());
  return WaitAll(client, tickets, &impl_->ps_seconds);
}

absl::Status Stage::Accumulate(const StepGrads& grads, bool dense,
                               const std::function<absl::Status()>& meanwhile) {
  std::optional<int> device_part;  // the device path's rows: the part of the step's one node
  if (!grads.device.empty()) {
    std::set<int> micro_batches;  // their contexts
    for (const DeviceGrads& o : grads.device) micro_batches.insert(o.ctx);
    const size_t contexts = micro_batches.size();
    if (grads.nodes.size() != 1 || contexts > 1) {
      return absl::InternalError(absl::StrCat(
          "stage: the device path's embedding gradients need one micro-batch of one block a "
          "step; this step has ",
          contexts > 1 ? absl::StrCat(contexts, " micro-batches")
                       : absl::StrCat(grads.nodes.size(), " nodes")));
    }
    device_part = grads.nodes.front().first;
  }
  ps::PsClient* client = impl_->client;
  std::vector<ps::Ticket> tickets;
  for (const auto& [part, node] : grads.nodes) {
    for (size_t e = 0; e < node.sparse.size(); ++e) {
      if (node.sparse[e].keys.empty()) continue;
      tickets.push_back(client->AccumulateSparse(impl_->tables[e], node.sparse[e].keys,
                                                 node.sparse[e].sums, part));
    }
    for (size_t b = 0; dense && b < node.dense.size(); ++b) {
      tickets.push_back(
          client->AccumulateDense(kDenseTable, impl_->blocks[b], node.dense[b], part));
    }
  }
  // The device's pushes while the host's travel.
  absl::Status status =
      device_part ? impl_->PushDevice(grads.device, *device_part) : absl::OkStatus();
  if (meanwhile) status.Update(meanwhile());
  status.Update(WaitAll(client, tickets, &impl_->ps_seconds));
  return status;
}

double Stage::ps_seconds() const { return impl_->ps_seconds; }
Stage::PassSeconds Stage::pass_seconds() const { return impl_->pass_seconds; }

void Stage::set_timing(bool on) {
  impl_->timing = on;
  if (on) impl_->embedding_seconds.assign(impl_->tables.size(), 0.0);
  for (Part& part : impl_->parts) {
    if (part.kind == Part::Kind::kDense) part.chain->set_timing(on);
  }
}

std::vector<std::pair<std::string, double>> Stage::layer_seconds() const {
  std::vector<std::pair<std::string, double>> out;
  for (const Part& part : impl_->parts) {
    if (part.kind == Part::Kind::kEmbedding) {
      out.emplace_back(part.name, impl_->embedding_seconds[part.local]);
    } else if (part.kind == Part::Kind::kDense) {
      const std::vector<double> seconds = part.chain->layer_seconds();
      for (int i = part.first; i <= part.last; ++i) {
        out.emplace_back(impl_->layer_names[out.size()], seconds[i - part.first]);
      }
    }
  }
  return out;
}

}  // namespace heterps::worker
