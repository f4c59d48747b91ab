// Server-side optimizers: the update a parameter server applies to a row (or a dense block) when
// a gradient is pushed. The state lives next to the values, `StateFloats(kind)` floats per
// parameter, so that a row is one contiguous run of floats: [value (dim) | state (k * dim)].
//
//   sgd      w -= lr g
//   adagrad  a += g^2;  w -= lr g / (sqrt(a) + eps)                 (a starts at initial_accumulator)
//   adam     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//            w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)   (t: the row's own step count)
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterps::ps {

enum class OptimizerKind { kSgd, kAdagrad, kAdam };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdagrad;
  float learning_rate = 0.01f;       // lr
  float initial_accumulator = 0.0f;  // adagrad: starting value of a (PyTorch's default)
  float beta1 = 0.9f;                // adam
  float beta2 = 0.999f;              // adam
  float epsilon = 1e-8f;             // adagrad and adam
};

// "sgd", "adagrad" or "adam"; InvalidArgument listing them otherwise.
absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name);
absl::string_view OptimizerName(OptimizerKind kind);

// State floats per parameter: 0 (sgd), 1 (adagrad), 2 (adam).
int StateFloats(OptimizerKind kind);

// Fills the state of `dim` fresh parameters (`state` holds StateFloats * dim floats).
void InitState(const OptimizerOptions& options, float* state, int dim);

// One update of `dim` parameters. `state` as above; `step` is the update's 1-based count for
// these parameters (Adam's bias correction).
void ApplyUpdate(const OptimizerOptions& options, float* value, float* state, const float* grad,
                 int dim, int64_t step);

}  // namespace heterps::ps
