// The model spec: the layers of a CTR/recommendation model in order, as read from model.yaml.
//
// The same spec drives planning (heterps/cost derives each layer's FLOPs, bytes, rows looked up and
// parameters from it) and, later, training (the trainer builds exactly these layers), so a plan
// always names layers that really exist.
//
// The layers form a chain. Between two layers flows a sample's *activation*: a dense vector of
// `dense_width` floats plus `vectors` embedding vectors (of `vector_dim` floats each when their
// widths agree; `dot` needs that, `concat` does not) and, before the embedding layers, the raw
// sparse ids. `embedding` layers add vectors, `interaction` layers fold
// the dense vector and the vectors into one flat dense vector, `fc` layers transform the dense
// vector, `logloss` ends the chain on a width-1 logit. docs/config.md is the full reference.
//
// Example:
//   HETERPS_ASSIGN_OR_RETURN(ModelSpec model, LoadModelSpec("examples/models/dlrm-small.yaml"));
//   for (const LayerSpec& layer : model.layers) ...
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/base/env.h"
#include "heterps/data/schema.h"

namespace heterps::config {

enum class LayerKind { kInput, kEmbedding, kFc, kInteraction, kLogloss, kCustom };
enum class Activation { kNone, kRelu, kSigmoid };
enum class Pooling { kSum, kMean };
enum class InteractionOp { kConcat, kDot };

absl::string_view LayerKindName(LayerKind kind);
absl::string_view ActivationName(Activation activation);

// One layer. Only the fields of its kind are meaningful; the others stay zero.
struct LayerSpec {
  std::string name;  // unique in the model; `mlp` blocks expand to "<name>.0", "<name>.1", ...
  LayerKind kind = LayerKind::kFc;
  int line = 0;  // 1-based line of the layer in its spec file, for messages

  // kInput: features per sample.
  int64_t dense_features = 0;  // integer features (Criteo: 13)
  int64_t sparse_slots = 0;    // categorical slots (Criteo: 26)

  // kEmbedding: one table per slot.
  int64_t slots = 0;          // slots this layer looks up; default: all of the input's slots
  int64_t rows = 0;           // rows per table
  int64_t dim = 0;            // floats per row
  double ids_per_slot = 1.0;  // average ids per slot per sample (multi-hot), >= 1
  Pooling pooling = Pooling::kSum;

  // kFc: dense_out = activation(W dense_in + b).
  int64_t in = 0;
  int64_t out = 0;
  Activation activation = Activation::kNone;

  // kInteraction.
  InteractionOp op = InteractionOp::kConcat;

  // kCustom (planning only): explicit per-sample cost.
  double flops = 0;             // forward FLOPs per sample
  double params = 0;            // dense parameters
  double activation_bytes = 0;  // output activation bytes per sample; default 4 * out

  // Activation shape entering and leaving the layer, filled in by validation.
  int64_t dense_width_in = 0, dense_width_out = 0;
  int64_t vectors_in = 0, vectors_out = 0;  // embedding vectors carried
  int64_t vector_dim_in = 0, vector_dim_out = 0;        // their dim; -1 where their dims differ
  int64_t vector_floats_in = 0, vector_floats_out = 0;  // their floats, all dims added
};

// One optimizer's settings as the spec's `optimizer` section gives them (docs/config.md). A
// figure left out is the command line's (`--lr`, `--dense-lr`) or heterps' default; the
// parameter server applies them (ps::OptimizerOptions).
struct OptimizerSpec {
  std::string kind;                 // "sgd", "adagrad", "adam"; empty: not given
  double learning_rate = 0;         // > 0; 0: not given
  double initial_accumulator = -1;  // adagrad, >= 0; < 0: not given (default 0)
  double beta1 = -1, beta2 = -1;    // adam, in [0, 1); < 0: not given (0.9, 0.999)
  double epsilon = -1;              // adagrad and adam, > 0; < 0: not given (1e-8)
};

struct ModelSpec {
  std::string name;
  std::string source;      // file the spec came from, for messages
  int64_t batch_size = 0;  // samples per mini-batch
  std::vector<LayerSpec> layers;
  // The layout of the training data: the spec's `data` section, or Criteo's when it has none
  // (`data_declared` false). A declared layout fits the input layer (its dense and sparse counts)
  // and the embedding layers (a multi-hot column is looked up by multi-hot layers only).
  data::Schema data = data::CriteoSchema();
  bool data_declared = false;
  // The spec's `optimizer` section: the embeddings' optimizer and the dense layers'.
  OptimizerSpec embedding_optimizer, dense_optimizer;

  // Index of the layer called `name`, or -1.
  int FindLayer(absl::string_view name) const;
};

// Parses and validates a model spec. `source` names the text in messages (a path, or
// "<embedded>/dlrm-small.yaml"). Errors are InvalidArgument with one line:
// "<source>:<line>: <field path>: <problem>".
absl::StatusOr<ModelSpec> ParseModelSpec(absl::string_view yaml_text, absl::string_view source);

// Sets every embedding layer's ids_per_slot to the mean of `per_slot` (ids per sample of each of
// the input's slots, as measured on the data: data::MeasureIdsPerSlot) over the slots it looks
// up, for planning with what the data really holds (a measured figure may be below 1, where
// slots are often empty). InvalidArgument when `per_slot` does not have one figure per slot of
// the input.
absl::Status UseMeasuredIds(const std::vector<double>& per_slot, ModelSpec* spec);

// Reads and parses a file through `env`; NotFound if it cannot be read.
absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path,
                                        base::Env* env = base::DefaultEnv());

// The spec's text with its top-level `batch_size` set to `batch_size` (> 0), every other byte
// and every line where it was, so that errors found in the result name the lines of the original
// file. The text must parse (ParseModelSpec's errors otherwise).
absl::StatusOr<std::string> WithBatchSize(absl::string_view yaml_text, absl::string_view source,
                                          int64_t batch_size);

}  // namespace heterps::config
