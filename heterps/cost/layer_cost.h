// A layer's cost characteristics, derived from its spec: what the cost model needs to know.
//
// docs/cost_model.md gives every formula. All figures are per sample except `ops`.
#pragma once

#include <vector>

#include "heterps/config/model_spec.h"

namespace heterps::cost {

struct LayerCost {
  bool sparse = false;         // looks up embedding rows (runs against the parameter server)
  double fwd_flops = 0;        // f_l: forward FLOPs per sample (backward is counted as 2x this)
  double mem_bytes = 0;        // bytes_l: memory traffic per sample, forward + backward
  double rows = 0;             // r_l: embedding rows looked up per sample
  double row_bytes = 0;        // 4 d_l: bytes of one looked-up row
  double dense_params = 0;     // w_l: dense parameters (floats)
  double sparse_params = 0;    // floats in the layer's embedding tables (held by the PS)
  // What a stage boundary carries per sample (worker::Activations forward, ActivationGrads back):
  double act_in_bytes = 0;     // a_in_l: bytes entering the layer
  double act_out_bytes = 0;    // a_out_l: bytes leaving the layer
  double grad_in_bytes = 0;    // g_in_l: bytes of the gradients the layer sends back
  double grad_out_bytes = 0;   // g_out_l: bytes of the gradients it receives
  double ops = 0;              // ops_l: operations (kernels) per batch, forward + backward
};

// The characteristics of every layer of `model`, in order. `batch` is the mini-batch size
// (weights are read once per batch, so their traffic per sample depends on it).
std::vector<LayerCost> DeriveLayerCosts(const config::ModelSpec& model, double batch);

}  // namespace heterps::cost
