#include "heterps/config/model_spec.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "heterps/base/env.h"
#include "heterps/base/status_macros.h"
#include "heterps/config/internal/yaml_reader.h"

namespace heterps::config {
namespace {

using internal::MapReader;
using internal::NonNegative;
using internal::NumberRule;
using internal::Positive;

const std::vector<std::string> kActivations = {"none", "relu", "sigmoid"};

Activation ToActivation(const std::string& name) {
  if (name == "relu") return Activation::kRelu;
  if (name == "sigmoid") return Activation::kSigmoid;
  return Activation::kNone;
}

// The activation flowing between layers (see model_spec.h).
struct Shape {
  int64_t dense_width = 0;
  int64_t vectors = 0;
  int64_t vector_floats = 0;  // sum of the vectors' widths
  int64_t vector_dim = 0;     // common width of the vectors; -1 when they differ
  int64_t sparse_slots = 0;   // slots of the input, once seen
};

class ModelParser {
 public:
  explicit ModelParser(absl::string_view source) : source_(source) {}

  absl::StatusOr<ModelSpec> Parse(absl::string_view text) {
    HETERPS_ASSIGN_OR_RETURN(YAML::Node root, internal::ParseYaml(text, source_));
    HETERPS_ASSIGN_OR_RETURN(MapReader top, MapReader::Create(root, source_, ""));
    ModelSpec model;
    model.source = source_;
    HETERPS_ASSIGN_OR_RETURN(model.name, top.String("name"));
    if (model.name.empty()) return top.Error("name", "must not be empty");
    HETERPS_ASSIGN_OR_RETURN(model.batch_size, top.Integer("batch_size", Positive()));
    HETERPS_ASSIGN_OR_RETURN(YAML::Node layers, top.Node("layers"));
    YAML::Node data;
    const bool has_data = top.Has("data");
    if (has_data) {
      HETERPS_ASSIGN_OR_RETURN(data, top.Node("data"));
    }
    if (top.Has("optimizer")) {
      HETERPS_ASSIGN_OR_RETURN(YAML::Node optimizer, top.Node("optimizer"));
      HETERPS_RETURN_IF_ERROR(ParseOptimizers(optimizer, model));
    }
    HETERPS_RETURN_IF_ERROR(top.Finish());
    if (!layers.IsSequence() || layers.size() == 0) {
      return top.Error("layers", "must be a non-empty list of layers");
    }
    for (size_t i = 0; i < layers.size(); ++i) {
      HETERPS_RETURN_IF_ERROR(ParseLayer(layers[i], absl::StrCat("layers[", i, "]"), model));
    }
    const LayerSpec& last = model.layers.back();
    if (last.kind != LayerKind::kLogloss) {
      return internal::SpecError(source_, last.line, "layers",
                                 "the last layer must be a logloss layer");
    }
    if (has_data) {
      HETERPS_RETURN_IF_ERROR(ParseData(data, model));
      model.data_declared = true;
    }
    HETERPS_RETURN_IF_ERROR(FitRows(model));
    return model;
  }

 private:
  // optimizer: {embeddings: {...}, dense: {...}}, each part optional.
  absl::Status ParseOptimizers(const YAML::Node& node, ModelSpec& model) {
    HETERPS_ASSIGN_OR_RETURN(MapReader reader, MapReader::Create(node, source_, "optimizer"));
    for (auto [key, out] :
         {std::pair<const char*, OptimizerSpec*>{"embeddings", &model.embedding_optimizer},
          {"dense", &model.dense_optimizer}}) {
      if (!reader.Has(key)) continue;
      HETERPS_ASSIGN_OR_RETURN(YAML::Node part, reader.Node(key));
      HETERPS_ASSIGN_OR_RETURN(*out, ParseOptimizer(part, absl::StrCat("optimizer.", key)));
    }
    return reader.Finish();
  }

  absl::StatusOr<OptimizerSpec> ParseOptimizer(const YAML::Node& node, const std::string& path) {
    HETERPS_ASSIGN_OR_RETURN(MapReader reader, MapReader::Create(node, source_, path));
    OptimizerSpec o;
    if (reader.Has("kind")) {
      HETERPS_ASSIGN_OR_RETURN(o.kind, reader.Choice("kind", {"sgd", "adagrad", "adam"}));
    }
    HETERPS_ASSIGN_OR_RETURN(o.learning_rate, reader.Number("lr", NumberRule{false, 0, 0, true}));
    HETERPS_ASSIGN_OR_RETURN(o.initial_accumulator,
                             reader.Number("initial_accumulator", NumberRule{false, -1, 0, false}));
    const NumberRule beta{false, -1, 0, false, 1};
    HETERPS_ASSIGN_OR_RETURN(o.beta1, reader.Number("beta1", beta));
    HETERPS_ASSIGN_OR_RETURN(o.beta2, reader.Number("beta2", beta));
    HETERPS_ASSIGN_OR_RETURN(o.epsilon, reader.Number("epsilon", NumberRule{false, -1, 0, true}));
    HETERPS_RETURN_IF_ERROR(reader.Finish());
    return o;
  }

  absl::Status ParseLayer(const YAML::Node& node, const std::string& path, ModelSpec& model) {
    HETERPS_ASSIGN_OR_RETURN(MapReader reader, MapReader::Create(node, source_, path));
    LayerSpec layer;
    layer.line = reader.line();
    HETERPS_ASSIGN_OR_RETURN(layer.name, reader.String("name"));
    if (layer.name.empty()) return reader.Error("name", "must not be empty");
    HETERPS_ASSIGN_OR_RETURN(
        std::string kind, reader.Choice("kind", {"input", "embedding", "mlp", "fc", "interaction",
                                                 "logloss", "custom"}));
    if (kind != "input" && model.layers.empty()) {
      return reader.Error("kind", "the first layer must be the input layer");
    }
    if (kind == "input" && !model.layers.empty()) {
      return reader.Error("kind", "only the first layer may be an input layer");
    }
    if (!model.layers.empty() && model.layers.back().kind == LayerKind::kLogloss) {
      return reader.Error("kind", "no layer may follow the logloss layer");
    }
    if (kind == "mlp") return ParseMlp(reader, layer, model);
    if (kind == "input") {
      HETERPS_RETURN_IF_ERROR(ParseInput(reader, layer));
    } else if (kind == "embedding") {
      HETERPS_RETURN_IF_ERROR(ParseEmbedding(reader, layer));
    } else if (kind == "fc") {
      layer.kind = LayerKind::kFc;
      HETERPS_ASSIGN_OR_RETURN(layer.in, reader.Integer("in", Positive()));
      HETERPS_ASSIGN_OR_RETURN(layer.out, reader.Integer("out", Positive()));
      HETERPS_ASSIGN_OR_RETURN(std::string act, reader.Choice("activation", kActivations, "none"));
      layer.activation = ToActivation(act);
      HETERPS_RETURN_IF_ERROR(CheckWidth(reader, "in", layer.in));
      shape_.dense_width = layer.out;
    } else if (kind == "interaction") {
      HETERPS_RETURN_IF_ERROR(ParseInteraction(reader, layer));
    } else if (kind == "logloss") {
      HETERPS_RETURN_IF_ERROR(ParseLogloss(reader, layer));
    } else {
      HETERPS_RETURN_IF_ERROR(ParseCustom(reader, layer));
    }
    HETERPS_RETURN_IF_ERROR(reader.Finish());
    return Add(reader, "name", std::move(layer), model);
  }

  // The `data` section: the layout of the training data (docs/config.md).
  absl::Status ParseData(const YAML::Node& node, ModelSpec& model) {
    HETERPS_ASSIGN_OR_RETURN(MapReader reader, MapReader::Create(node, source_, "data"));
    return ParseLayout(reader, source_, model);
  }

  absl::Status ParseLayout(MapReader& reader, const std::string& source, ModelSpec& model) {
    data::Schema& schema = model.data;
    schema = data::Schema();
    schema.source = source;
    HETERPS_ASSIGN_OR_RETURN(std::string delimiter, reader.String("delimiter", "\t"));
    if (delimiter == "tab") delimiter = "\t";
    if (delimiter.size() != 1 || delimiter == "\n" || delimiter == "\r") {
      return reader.Error("delimiter", "must be one character (or \"tab\"), not a line end");
    }
    schema.delimiter = delimiter[0];
    HETERPS_ASSIGN_OR_RETURN(std::string header,
                             reader.Choice("header", {"true", "false"}, "false"));
    schema.header = header == "true";
    HETERPS_ASSIGN_OR_RETURN(YAML::Node columns, reader.Node("columns"));
    HETERPS_RETURN_IF_ERROR(reader.Finish());
    if (!columns.IsSequence() || columns.size() == 0) {
      return reader.Error("columns", "must be a non-empty list of columns");
    }
    for (size_t i = 0; i < columns.size(); ++i) {
      HETERPS_RETURN_IF_ERROR(ParseColumn(columns[i], source, i, schema));
    }
    if (absl::Status s = data::CheckSchema(schema); !s.ok()) return s;
    return FitLayout(reader, model);
  }

  absl::Status ParseColumn(const YAML::Node& node, const std::string& source, size_t i,
                           data::Schema& schema) {
    HETERPS_ASSIGN_OR_RETURN(
        MapReader reader, MapReader::Create(node, source, absl::StrCat("data.columns[", i, "]")));
    data::Column column;
    column.line = reader.line();
    HETERPS_ASSIGN_OR_RETURN(std::string role, reader.Choice("role", {"label", "dense", "sparse",
                                                                      "multi_hot", "ignore"}));
    HETERPS_ASSIGN_OR_RETURN(column.name, reader.String("name", ""));
    HETERPS_ASSIGN_OR_RETURN(int64_t count,
                             reader.Integer("count", NumberRule{false, 1, 1, false, 100000}));
    if (count > 1 && column.name.empty()) {
      return reader.Error("count", "needs a name: the columns are called <name>1 .. <name>N");
    }
    if (count > 1 && role == "label") return reader.Error("count", "a single label column");
    const bool dense = role == "dense", ids = role == "sparse" || role == "multi_hot";
    auto only = [&](absl::string_view key, bool allowed, absl::string_view roles) -> absl::Status {
      if (reader.Has(key) && !allowed) {
        return reader.Error(key, absl::StrCat("only for ", roles, " columns"));
      }
      return absl::OkStatus();
    };
    HETERPS_RETURN_IF_ERROR(only("threshold", role == "label", "label"));
    HETERPS_RETURN_IF_ERROR(only("type", dense, "dense"));
    HETERPS_RETURN_IF_ERROR(only("transform", dense, "dense"));
    HETERPS_RETURN_IF_ERROR(only("ids", ids, "sparse and multi_hot"));
    HETERPS_RETURN_IF_ERROR(only("separator", role == "multi_hot", "multi_hot"));
    HETERPS_RETURN_IF_ERROR(only("max_ids", role == "multi_hot", "multi_hot"));
    HETERPS_RETURN_IF_ERROR(only("buckets", ids, "sparse and multi_hot"));
    // Per column of the group: one number for all, or a list of `count`.
    std::vector<uint64_t> buckets(count, 0);
    if (ids && reader.Has("buckets")) {
      HETERPS_ASSIGN_OR_RETURN(YAML::Node node, reader.Node("buckets"));
      HETERPS_RETURN_IF_ERROR(ParseBuckets(node, reader, i, buckets));
    }
    if (role == "label") {
      column.role = data::ColumnRole::kLabel;
      if (reader.Has("threshold")) {
        HETERPS_ASSIGN_OR_RETURN(column.threshold,
                                 reader.Number("threshold", NumberRule{false, 0}));
      }
    }
    if (role == "ignore") column.role = data::ColumnRole::kIgnore;
    if (dense) {
      column.role = data::ColumnRole::kDense;
      HETERPS_ASSIGN_OR_RETURN(std::string type,
                               reader.Choice("type", {"float", "integer"}, "float"));
      column.integer = type == "integer";
      HETERPS_ASSIGN_OR_RETURN(std::string transform,
                               reader.Choice("transform", {"none", "log1p"}, "none"));
      column.transform = transform == "log1p" ? data::Transform::kLog1p : data::Transform::kNone;
    }
    if (ids) {
      column.role = role == "sparse" ? data::ColumnRole::kSparse : data::ColumnRole::kMultiHot;
      HETERPS_ASSIGN_OR_RETURN(std::string format,
                               reader.Choice("ids", {"string", "hex", "decimal"}, "string"));
      column.ids = format == "hex"       ? data::IdFormat::kHex
                   : format == "decimal" ? data::IdFormat::kDecimal
                                         : data::IdFormat::kString;
    }
    if (role == "multi_hot") {
      HETERPS_ASSIGN_OR_RETURN(std::string separator, reader.String("separator", "|"));
      if (separator.size() != 1) return reader.Error("separator", "must be one character");
      column.separator = separator[0];
      HETERPS_ASSIGN_OR_RETURN(int64_t max_ids,
                               reader.Integer("max_ids", NumberRule{false, 256, 1, false, 65537}));
      column.max_ids = static_cast<int>(max_ids);
    }
    HETERPS_RETURN_IF_ERROR(reader.Finish());
    if (count == 1) {
      column.buckets = buckets[0];
      schema.columns.push_back(std::move(column));
      return absl::OkStatus();
    }
    for (int64_t k = 1; k <= count; ++k) {
      data::Column c = column;
      c.name = absl::StrCat(column.name, k);
      c.buckets = buckets[k - 1];
      schema.columns.push_back(std::move(c));
    }
    return absl::OkStatus();
  }

  // `buckets`: a whole number >= 1 for every column of the group, or a list of one per column.
  absl::Status ParseBuckets(const YAML::Node& node, const MapReader& reader, size_t i,
                            std::vector<uint64_t>& buckets) {
    constexpr double kMax = 4.6e18;  // below 2^62
    const std::string path = absl::StrCat("data.columns[", i, "].buckets");
    auto one = [&](const YAML::Node& value, const std::string& where) -> absl::StatusOr<uint64_t> {
      const std::string text = value.IsScalar() ? value.Scalar() : "";
      uint64_t n = 0;
      if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
          !absl::SimpleAtoi(text, &n) || n < 1 || static_cast<double>(n) > kMax) {
        return internal::SpecError(
            source_, value.Mark().line + 1, where,
            absl::StrCat("must be a whole number of ids from 1 to 4.6e18, got '", text, "'"));
      }
      return n;
    };
    if (!node.IsSequence()) {
      HETERPS_ASSIGN_OR_RETURN(const uint64_t n, one(node, path));
      buckets.assign(buckets.size(), n);
      return absl::OkStatus();
    }
    if (node.size() != buckets.size()) {
      return reader.Error("buckets", absl::StrCat("a list of ", node.size(), " for ",
                                                  buckets.size(), " columns (count)"));
    }
    for (size_t k = 0; k < node.size(); ++k) {
      HETERPS_ASSIGN_OR_RETURN(buckets[k], one(node[k], absl::StrCat(path, "[", k, "]")));
    }
    return absl::OkStatus();
  }

  // Each embedding layer's rows per table against its slots' buckets: from them when the layer
  // declares none (the mean of bucket count + 1, the empty id's row, rounded up), never more
  // than the largest of them can reach.
  absl::Status FitRows(ModelSpec& model) const {
    size_t embedding = 0;
    for (LayerSpec& layer : model.layers) {
      if (layer.kind != LayerKind::kEmbedding) continue;
      const MapReader& reader = embeddings_[embedding++];
      uint64_t most = 0;
      double total = 0;
      bool all = true;
      for (int slot = 0; slot < layer.slots; ++slot) {
        const uint64_t b = slot < model.data.slots() ? model.data.slot_column(slot).buckets : 0;
        all &= b > 0;
        most = std::max(most, b);
        total += static_cast<double>(b) + 1;
      }
      if (layer.rows == 0) {
        if (!all) {
          return reader.Missing(
              "rows",
              " (or declare buckets for every one of the layer's slots in the data section)");
        }
        layer.rows = static_cast<int64_t>(std::ceil(total / static_cast<double>(layer.slots)));
      } else if (all && static_cast<double>(layer.rows) > static_cast<double>(most) + 1) {
        return reader.Error(
            "rows",
            absl::StrCat(layer.rows, " per table, but the slots' buckets give at most ", most + 1,
                         " keys each (the empty id's included): lower it, or leave it out to "
                         "take it from the buckets"));
      }
    }
    return absl::OkStatus();
  }

  // The layout against the input layer's counts and the embedding layers' kind of lookup.
  absl::Status FitLayout(const MapReader& reader, const ModelSpec& model) {
    const data::Schema& schema = model.data;
    const LayerSpec& input = model.layers.front();
    if (schema.dense_features() != input.dense_features || schema.slots() != input.sparse_slots) {
      return reader.Error(
          "columns", absl::StrCat(schema.dense_features(), " dense and ", schema.slots(),
                                  " sparse/multi_hot columns, but the input layer (", source_, ":",
                                  input.line, ") declares dense: ", input.dense_features,
                                  " and sparse: ", input.sparse_slots));
    }
    for (int slot = 0; slot < schema.slots(); ++slot) {
      if (!schema.multi_hot(slot)) continue;
      for (const LayerSpec& layer : model.layers) {
        if (layer.kind != LayerKind::kEmbedding || layer.slots <= slot || layer.ids_per_slot > 1) {
          continue;
        }
        const data::Column& column = schema.slot_column(slot);
        return internal::SpecError(
            schema.source, column.line, absl::StrCat("data.columns (", column.name, ")"),
            absl::StrCat("a multi_hot column (slot ", slot, "), but embedding layer ", layer.name,
                         " (", source_, ":", layer.line,
                         ") looks it up one-hot: set its ids_per_slot to the average ids per "
                         "sample of its slots (> 1)"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ParseInput(MapReader& reader, LayerSpec& layer) {
    layer.kind = LayerKind::kInput;
    HETERPS_ASSIGN_OR_RETURN(layer.dense_features, reader.Integer("dense", NonNegative(0)));
    HETERPS_ASSIGN_OR_RETURN(layer.sparse_slots, reader.Integer("sparse", NonNegative(0)));
    if (layer.dense_features + layer.sparse_slots == 0) {
      return reader.Error("dense", "the input needs at least one dense or sparse feature");
    }
    shape_.dense_width = layer.dense_features;
    shape_.sparse_slots = layer.sparse_slots;
    return absl::OkStatus();
  }

  absl::Status ParseEmbedding(MapReader& reader, LayerSpec& layer) {
    layer.kind = LayerKind::kEmbedding;
    if (shape_.sparse_slots == 0) {
      return reader.Error("kind", "an embedding layer needs sparse slots in the input layer");
    }
    // Absent (0): taken from the data section's buckets (FitRows).
    HETERPS_ASSIGN_OR_RETURN(layer.rows, reader.Integer("rows", NumberRule{false, 0, 0, true}));
    HETERPS_ASSIGN_OR_RETURN(layer.dim, reader.Integer("dim", Positive()));
    NumberRule slots_rule{false, static_cast<double>(shape_.sparse_slots), 0, true};
    HETERPS_ASSIGN_OR_RETURN(layer.slots, reader.Integer("slots", slots_rule));
    if (layer.slots > shape_.sparse_slots) {
      return reader.Error("slots", absl::StrCat(layer.slots, " is more than the input's ",
                                                shape_.sparse_slots, " sparse slots"));
    }
    HETERPS_ASSIGN_OR_RETURN(layer.ids_per_slot,
                             reader.Number("ids_per_slot", NumberRule{false, 1, 1, false}));
    HETERPS_ASSIGN_OR_RETURN(std::string pooling, reader.Choice("pooling", {"sum", "mean"}, "sum"));
    layer.pooling = pooling == "mean" ? Pooling::kMean : Pooling::kSum;
    shape_.vector_dim = shape_.vectors == 0 || shape_.vector_dim == layer.dim ? layer.dim : -1;
    shape_.vectors += layer.slots;
    shape_.vector_floats += layer.slots * layer.dim;
    embeddings_.push_back(reader);  // every field asked: FitRows's messages see them all
    return absl::OkStatus();
  }

  absl::Status ParseInteraction(MapReader& reader, LayerSpec& layer) {
    layer.kind = LayerKind::kInteraction;
    HETERPS_ASSIGN_OR_RETURN(std::string op, reader.Choice("op", {"concat", "dot"}));
    if (shape_.vectors == 0) {
      return reader.Error("op", "there are no embedding vectors to combine before this layer");
    }
    if (op == "concat") {
      layer.op = InteractionOp::kConcat;
      shape_.dense_width += shape_.vector_floats;
    } else {
      layer.op = InteractionOp::kDot;
      if (shape_.vector_dim < 0 ||
          (shape_.dense_width != 0 && shape_.dense_width != shape_.vector_dim)) {
        return reader.Error(
            "op", absl::StrCat("dot needs the dense vector and every embedding vector to have "
                               "one width; the dense vector has ",
                               shape_.dense_width, ", the embeddings ",
                               shape_.vector_dim < 0 ? std::string("differ")
                                                     : absl::StrCat(shape_.vector_dim)));
      }
      int64_t n = shape_.vectors + (shape_.dense_width > 0 ? 1 : 0);
      shape_.dense_width += n * (n - 1) / 2;
    }
    shape_.vectors = 0;
    shape_.vector_floats = 0;
    shape_.vector_dim = 0;
    return absl::OkStatus();
  }

  absl::Status ParseLogloss(MapReader& reader, LayerSpec& layer) {
    layer.kind = LayerKind::kLogloss;
    if (shape_.vectors > 0) {
      return reader.Error("kind", "embedding vectors reach the loss without an interaction layer");
    }
    if (shape_.dense_width != 1) {
      return reader.Error("kind", absl::StrCat("logloss needs a single logit, but the previous "
                                               "layer's output width is ",
                                               shape_.dense_width));
    }
    return absl::OkStatus();
  }

  absl::Status ParseCustom(MapReader& reader, LayerSpec& layer) {
    layer.kind = LayerKind::kCustom;
    HETERPS_ASSIGN_OR_RETURN(layer.flops, reader.Number("flops", Positive()));
    HETERPS_ASSIGN_OR_RETURN(layer.params, reader.Number("params", NonNegative(0)));
    if (reader.Has("in")) {
      HETERPS_ASSIGN_OR_RETURN(layer.in, reader.Integer("in", Positive()));
      HETERPS_RETURN_IF_ERROR(CheckWidth(reader, "in", layer.in));
    }
    HETERPS_ASSIGN_OR_RETURN(layer.out, reader.Integer("out", Positive()));
    NumberRule bytes_rule{false, 4.0 * static_cast<double>(layer.out), 0, true};
    HETERPS_ASSIGN_OR_RETURN(layer.activation_bytes, reader.Number("activation_bytes", bytes_rule));
    shape_.dense_width = layer.out;
    return absl::OkStatus();
  }

  absl::Status ParseMlp(MapReader& reader, LayerSpec& base, ModelSpec& model) {
    HETERPS_ASSIGN_OR_RETURN(YAML::Node sizes, reader.Node("sizes"));
    HETERPS_ASSIGN_OR_RETURN(std::string act, reader.Choice("activation", kActivations, "relu"));
    HETERPS_ASSIGN_OR_RETURN(std::string last_act,
                             reader.Choice("last_activation", kActivations, act.c_str()));
    HETERPS_RETURN_IF_ERROR(reader.Finish());
    if (!sizes.IsSequence() || sizes.size() < 2) {
      return reader.Error("sizes", "must be a list of at least two widths, [in, ..., out]");
    }
    std::vector<int64_t> widths;
    for (size_t i = 0; i < sizes.size(); ++i) {
      int64_t width = 0;
      bool ok = sizes[i].IsScalar();
      if (ok) {
        try {
          width = sizes[i].as<int64_t>();
        } catch (const YAML::Exception&) {
          ok = false;
        }
      }
      if (!ok || width <= 0) {
        return internal::SpecError(source_, internal::LineOf(sizes[i]),
                                   absl::StrCat(reader.path(), ".sizes[", i, "]"),
                                   "must be a positive whole number");
      }
      widths.push_back(width);
    }
    HETERPS_RETURN_IF_ERROR(CheckWidth(reader, "sizes", widths[0]));
    // The block's own name is taken too, so that "top" and "top.0" cannot both mean something.
    auto [it, inserted] = lines_.emplace(base.name, base.line);
    if (!inserted) {
      return reader.Error("name", absl::StrCat("duplicate layer name '", base.name,
                                               "' (first at line ", it->second, ")"));
    }
    for (size_t i = 0; i + 1 < widths.size(); ++i) {
      LayerSpec layer = base;
      layer.name = absl::StrCat(base.name, ".", i);
      layer.kind = LayerKind::kFc;
      layer.in = widths[i];
      layer.out = widths[i + 1];
      layer.activation = ToActivation(i + 2 == widths.size() ? last_act : act);
      shape_.dense_width = layer.out;
      HETERPS_RETURN_IF_ERROR(Add(reader, "name", std::move(layer), model));
    }
    return absl::OkStatus();
  }

  // The dense input width a layer declares must match what flows into it.
  absl::Status CheckWidth(const MapReader& reader, absl::string_view key, int64_t width) {
    if (width == shape_.dense_width) return absl::OkStatus();
    return reader.Error(key, absl::StrCat(width,
                                          " does not match the previous layer's output "
                                          "width ",
                                          shape_.dense_width));
  }

  // Records the layer's shape (already advanced in shape_) and checks that its name is new.
  absl::Status Add(const MapReader& reader, absl::string_view key, LayerSpec layer,
                   ModelSpec& model) {
    auto [it, inserted] = lines_.emplace(layer.name, layer.line);
    if (!inserted) {
      return reader.Error(key, absl::StrCat("duplicate layer name '", layer.name,
                                            "' (first at line ", it->second, ")"));
    }
    if (!model.layers.empty()) {
      const LayerSpec& prev = model.layers.back();
      layer.dense_width_in = prev.dense_width_out;
      layer.vectors_in = prev.vectors_out;
      layer.vector_dim_in = prev.vector_dim_out;
      layer.vector_floats_in = prev.vector_floats_out;
    }
    layer.dense_width_out = shape_.dense_width;
    layer.vectors_out = shape_.vectors;
    layer.vector_dim_out = shape_.vector_dim;
    layer.vector_floats_out = shape_.vector_floats;
    model.layers.push_back(std::move(layer));
    return absl::OkStatus();
  }

  std::string source_;
  Shape shape_;
  std::vector<MapReader> embeddings_;  // per embedding layer in order, for FitRows's messages
  absl::flat_hash_map<std::string, int> lines_;  // layer name -> line, for duplicates
};

}  // namespace

absl::string_view LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kInput:
      return "input";
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kFc:
      return "fc";
    case LayerKind::kInteraction:
      return "interaction";
    case LayerKind::kLogloss:
      return "logloss";
    case LayerKind::kCustom:
      return "custom";
  }
  return "?";
}

absl::string_view ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return "none";
    case Activation::kRelu:
      return "relu";
    case Activation::kSigmoid:
      return "sigmoid";
  }
  return "?";
}

int ModelSpec::FindLayer(absl::string_view name) const {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<ModelSpec> ParseModelSpec(absl::string_view yaml_text, absl::string_view source) {
  return ModelParser(source).Parse(yaml_text);
}

absl::Status UseMeasuredIds(const std::vector<double>& per_slot, ModelSpec* spec) {
  const int64_t slots = spec->layers.front().sparse_slots;
  if (static_cast<int64_t>(per_slot.size()) != slots) {
    return absl::InvalidArgumentError(absl::StrCat(spec->source, ": ", per_slot.size(),
                                                   " measured slots for an input of ", slots));
  }
  for (LayerSpec& layer : spec->layers) {
    if (layer.kind != LayerKind::kEmbedding || layer.slots < 1) continue;
    double sum = 0;
    for (int64_t s = 0; s < layer.slots; ++s) sum += per_slot[s];
    layer.ids_per_slot = sum / static_cast<double>(layer.slots);
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelSpec> LoadModelSpec(const std::string& path, base::Env* env) {
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, path));
  return ParseModelSpec(text, path);
}

absl::StatusOr<std::string> WithBatchSize(absl::string_view yaml_text, absl::string_view source,
                                          int64_t batch_size) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch size ", batch_size, " must be >= 1"));
  }
  HETERPS_RETURN_IF_ERROR(ParseModelSpec(yaml_text, source).status());
  HETERPS_ASSIGN_OR_RETURN(YAML::Node root, internal::ParseYaml(yaml_text, source));
  const YAML::Node value = root["batch_size"];
  const YAML::Mark mark = value.Mark();
  if (mark.pos < 0 || static_cast<size_t>(mark.pos) >= yaml_text.size()) {
    return absl::InternalError(absl::StrCat(source, ": batch_size: cannot locate its value"));
  }
  // The value's token: a quoted scalar to its closing quote, a plain one to the first blank, the
  // start of a comment or the end of the line.
  const size_t begin = static_cast<size_t>(mark.pos);
  size_t end = begin;
  const char quote = yaml_text[begin];
  if (quote == '"' || quote == '\'') {
    end = yaml_text.find(quote, begin + 1);
    end = end == absl::string_view::npos ? yaml_text.size() : end + 1;
  } else {
    while (end < yaml_text.size() && !absl::ascii_isspace(yaml_text[end]) &&
           yaml_text[end] != '#') {
      ++end;
    }
  }
  return absl::StrCat(yaml_text.substr(0, begin), batch_size, yaml_text.substr(end));
}

}  // namespace heterps::config
