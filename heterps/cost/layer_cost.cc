#include "heterps/cost/layer_cost.h"

#include <algorithm>

namespace heterps::cost {
namespace {

constexpr double kFloat = 4;  // bytes per float
constexpr double kId = 8;     // bytes per sparse id (64-bit key)

}  // namespace

std::vector<LayerCost> DeriveLayerCosts(const config::ModelSpec& model, double batch) {
  using config::LayerKind;
  std::vector<LayerCost> costs;
  double pending_ids = 0;    // sparse ids per sample not yet consumed by an embedding layer
  double vector_floats = 0;  // floats of embedding vectors carried (their dims may differ)
  double act_in = 0;
  for (const config::LayerSpec& layer : model.layers) {
    LayerCost c;
    c.act_in_bytes = act_in;
    switch (layer.kind) {
      case LayerKind::kInput: {
        // Every slot's ids: a multi-hot slot carries ids_per_slot of them until its embedding
        // layer consumes it; a slot no embedding layer reads carries one.
        double slots_read = 0, ids = 0;
        for (const config::LayerSpec& e : model.layers) {
          if (e.kind != LayerKind::kEmbedding) continue;
          slots_read += static_cast<double>(e.slots);
          ids += static_cast<double>(e.slots) * static_cast<double>(e.ids_per_slot);
        }
        pending_ids = ids + std::max(0.0, static_cast<double>(layer.sparse_slots) - slots_read);
        // Parsing a sample: read the raw fields, write the features; log(1 + x) per integer.
        c.fwd_flops = static_cast<double>(layer.dense_features);
        c.mem_bytes =
            2 * kFloat * static_cast<double>(layer.dense_features) + 2 * kId * pending_ids;
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
        pending_ids = std::max(0.0, pending_ids - c.rows);
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
    // What leaves the layer: the dense vector, the embedding vectors, and the raw ids that no
    // embedding layer has consumed yet. A custom layer declares its own size; the loss sends
    // nothing on.
    if (layer.kind == LayerKind::kCustom) {
      c.act_out_bytes = layer.activation_bytes;
    } else if (layer.kind != LayerKind::kLogloss) {
      c.act_out_bytes =
          kFloat * (static_cast<double>(layer.dense_width_out) + vector_floats) + kId * pending_ids;
    }
    act_in = c.act_out_bytes;
    costs.push_back(c);
  }
  return costs;
}

}  // namespace heterps::cost
