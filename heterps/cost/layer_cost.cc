#include "heterps/cost/layer_cost.h"

#include <algorithm>

namespace heterps::cost {
namespace {

constexpr double kFloat = 4;  // bytes per float
constexpr double kId = 8;     // bytes per sparse id (64-bit key)

// The bytes of ids a sample carries from the input while an embedding layer lies ahead (every
// slot's ids, as the input read them: docs/cost_model.md), and the ids alone.
struct InputIds {
  double ids = 0, bytes = 0;
};
InputIds IdsOfTheInput(const config::ModelSpec& model) {
  InputIds out;
  int64_t slots = 0;
  bool ragged = false;
  for (const config::LayerSpec& layer : model.layers) {
    if (layer.kind == config::LayerKind::kInput) slots = layer.sparse_slots;
  }
  // Slot s holds the ids its readers expect (the most, where two readers differ); a slot no
  // embedding layer reads holds one.
  for (int64_t s = 0; s < slots; ++s) {
    double ids = 1;
    for (const config::LayerSpec& e : model.layers) {
      if (e.kind != config::LayerKind::kEmbedding || s >= e.slots) continue;
      ids = std::max(ids, static_cast<double>(e.ids_per_slot));
      ragged = ragged || e.ids_per_slot > 1;
    }
    out.ids += ids;
  }
  // A multi-hot batch carries each slot's offset into its keys (int32).
  out.bytes = kId * out.ids + (ragged ? 4 * static_cast<double>(slots) : 0);
  return out;
}

}  // namespace

std::vector<LayerCost> DeriveLayerCosts(const config::ModelSpec& model, double batch) {
  using config::LayerKind;
  std::vector<LayerCost> costs;
  const InputIds input_ids = IdsOfTheInput(model);
  // The last embedding layer and the loss: a layer before the one passes the input's ids on,
  // before the other the labels.
  int last_embedding = -1, loss = -1;
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l) {
    if (model.layers[l].kind == LayerKind::kEmbedding) last_embedding = l;
    if (model.layers[l].kind == LayerKind::kLogloss) loss = l;
  }
  double vector_floats = 0;  // floats of embedding vectors carried (their dims may differ)
  double act_in = 0, grad_in = 0;
  for (int l = 0; l < static_cast<int>(model.layers.size()); ++l) {
    const config::LayerSpec& layer = model.layers[l];
    LayerCost c;
    c.act_in_bytes = act_in;
    c.grad_in_bytes = grad_in;
    switch (layer.kind) {
      case LayerKind::kInput: {
        // Parsing a sample: read the raw fields, write the features and ids; log(1 + x) per
        // integer.
        c.fwd_flops = static_cast<double>(layer.dense_features);
        c.mem_bytes =
            2 * kFloat * static_cast<double>(layer.dense_features) + 2 * kId * input_ids.ids;
        c.ops = 1;
        break;
      }
      case LayerKind::kEmbedding: {
        c.sparse = true;
        double slots = static_cast<double>(layer.slots), dim = static_cast<double>(layer.dim);
        c.rows = slots * layer.ids_per_slot;
        c.row_bytes = kFloat * dim;
        c.sparse_params = slots * static_cast<double>(layer.rows) * dim;
        c.fwd_flops = c.rows * dim;  // pooling: one add per looked-up float
        // Gather the rows and write the pooled vectors; backward: read the vector gradients and
        // write one gradient row per looked-up row.
        c.mem_bytes = 2 * (c.rows * c.row_bytes + slots * c.row_bytes);
        c.ops = 2 * slots;  // a gather and a scatter per table
        vector_floats += slots * dim;
        break;
      }
      case LayerKind::kFc: {
        double in = static_cast<double>(layer.in), out = static_cast<double>(layer.out);
        c.dense_params = in * out + out;
        c.fwd_flops = 2 * in * out + 2 * out;  // GEMM, bias, activation
        // Forward reads x and writes y; backward reads dy and x and writes dx; the weights are
        // read twice and their gradient written once per batch.
        c.mem_bytes = kFloat * (3 * in + 2 * out) + 3 * kFloat * c.dense_params / batch;
        c.ops = layer.activation == config::Activation::kNone ? 4 : 6;
        break;
      }
      case LayerKind::kInteraction: {
        double out = static_cast<double>(layer.dense_width_out);
        double in = static_cast<double>(layer.dense_width_in) + vector_floats;
        if (layer.op == config::InteractionOp::kDot) {
          double n = static_cast<double>(layer.vectors_in + (layer.dense_width_in > 0 ? 1 : 0));
          double dim = static_cast<double>(layer.vector_dim_in);
          c.fwd_flops = n * (n - 1) * dim;  // n (n - 1) / 2 dot products of 2 dim FLOPs
          c.ops = 4;
        } else {
          c.ops = 2;
        }
        c.mem_bytes = 2 * kFloat * (in + out);
        vector_floats = 0;
        break;
      }
      case LayerKind::kLogloss:
        c.fwd_flops = 10;  // sigmoid, log, and the gradient
        c.mem_bytes = 4 * kFloat;
        c.ops = 2;
        break;
      case LayerKind::kCustom:
        c.fwd_flops = layer.flops;
        c.dense_params = layer.params;
        c.mem_bytes = 3 * (act_in + layer.activation_bytes) + 3 * kFloat * layer.params / batch;
        c.ops = 6;
        break;
    }
    // What leaves the layer, as a stage boundary carries it (worker::Activations): the dense
    // vector and the embedding vectors; the input's ids while an embedding layer lies ahead; the
    // label while the loss does. What comes back: the dense vector's and the vectors' gradients.
    // A custom layer declares its own size (both ways); the loss sends nothing on.
    if (layer.kind == LayerKind::kCustom) {
      c.act_out_bytes = c.grad_out_bytes = layer.activation_bytes;
    } else if (layer.kind != LayerKind::kLogloss) {
      c.grad_out_bytes = kFloat * (static_cast<double>(layer.dense_width_out) + vector_floats);
      c.act_out_bytes =
          c.grad_out_bytes + (l < last_embedding ? input_ids.bytes : 0) + (l < loss ? kFloat : 0);
    }
    act_in = c.act_out_bytes;
    grad_in = c.grad_out_bytes;
    costs.push_back(c);
  }
  return costs;
}

}  // namespace heterps::cost
