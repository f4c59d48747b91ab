// Test helpers: a chain of a backend checked against the CPU chain of the same layers, on
// random parameters, inputs and gradients, forward and backward, two micro-batches in flight
// (tests only).
#pragma once

#include <string>

#include "heterps/config/model_spec.h"
#include "heterps/dense/backend.h"

namespace heterps::dense::testing {

config::ModelSpec Spec(const std::string& path);

// Layers first..last of `spec` on `backend` against the CPU: outputs, the loss, the inputs' and
// the parameters' gradients to 1e-4 relative (gtest failures otherwise).
void ExpectChainsAgree(const config::ModelSpec& spec, int first, int last, DenseBackend* backend);

}  // namespace heterps::dense::testing
