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
      float* m = state;
      float* v = state + dim;
      const double c1 = 1 - std::pow(static_cast<double>(o.beta1), static_cast<double>(step));
      const double c2 = 1 - std::pow(static_cast<double>(o.beta2), static_cast<double>(step));
      for (int i = 0; i < dim; ++i) {
        m[i] = o.beta1 * m[i] + (1 - o.beta1) * grad[i];
        v[i] = o.beta2 * v[i] + (1 - o.beta2) * grad[i] * grad[i];
        const double m_hat = m[i] / c1, v_hat = v[i] / c2;
        value[i] -= static_cast<float>(o.learning_rate * m_hat / (std::sqrt(v_hat) + o.epsilon));
      }
      return;
    }
  }
}

}  // namespace heterps::ps
