#include "heterps/ps/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace heterps::ps {

absl::StatusOr<OptimizerKind> ParseOptimizerKind(absl::string_view name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "adagrad") return OptimizerKind::kAdagrad;
  if (name == "adam") return OptimizerKind::kAdam;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown optimizer '", name, "' (expected one of: sgd, adagrad, adam)"));
}

absl::string_view OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdagrad: return "adagrad";
    case OptimizerKind::kAdam: return "adam";
  }
  return "?";
}

int StateFloats(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return 0;
    case OptimizerKind::kAdagrad: return 1;
    case OptimizerKind::kAdam: return 2;
  }
  return 0;
}

void InitState(const OptimizerOptions& options, float* state, int dim) {
  const int n = StateFloats(options.kind) * dim;
  const float start = options.kind == OptimizerKind::kAdagrad ? options.initial_accumulator : 0;
  for (int i = 0; i < n; ++i) state[i] = start;
}

void ApplyUpdate(const OptimizerOptions& o, float* value, float* state, const float* grad, int dim,
                 int64_t step) {
  switch (o.kind) {
    case OptimizerKind::kSgd:
      for (int i = 0; i < dim; ++i) value[i] -= o.learning_rate * grad[i];
      return;
    case OptimizerKind::kAdagrad:
      for (int i = 0; i < dim; ++i) {
        state[i] += grad[i] * grad[i];
        value[i] -= o.learning_rate * grad[i] / (std::sqrt(state[i]) + o.epsilon);
      }
      return;
    case OptimizerKind::kAdam: {
      // Value, moments and gradient never overlap (a row is [value | m | v]); saying so, and
      // reading the options into locals, lets the compiler vectorize the loop: the same
      // operations in the same order, so the same bits as one element at a time.
      float* __restrict w = value;
      float* __restrict m = state;
      float* __restrict v = state + dim;
      const float* __restrict g = grad;
      const float b1 = o.beta1, b2 = o.beta2, rest1 = 1 - o.beta1, rest2 = 1 - o.beta2;
      const double lr = o.learning_rate, eps = o.epsilon;
      const double c1 = 1 - std::pow(static_cast<double>(o.beta1), static_cast<double>(step));
      const double c2 = 1 - std::pow(static_cast<double>(o.beta2), static_cast<double>(step));
      for (int i = 0; i < dim; ++i) {
        const float mi = b1 * m[i] + rest1 * g[i];
        const float vi = b2 * v[i] + rest2 * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        const double m_hat = mi / c1, v_hat = vi / c2;
        w[i] -= static_cast<float>(lr * m_hat / (std::sqrt(v_hat) + eps));
      }
      return;
    }
  }
}

}  // namespace heterps::ps
