// The dense layers on this host's cores: chains of FcLayer, InteractionLayer and the logloss
// (layers.h) on Eigen, working in place on the host matrices the stage hands them. Device "cpu".
//
// Thread safety: as DenseBackend.
#pragma once

#include <memory>

#include "heterps/dense/backend.h"

namespace heterps::dense {

std::unique_ptr<DenseBackend> NewCpuBackend();

// A CPU chain of layers first..last of `spec` (all dense), for backends that keep a part of
// their work on the host. InvalidArgument naming the spec's file and line for another kind.
absl::StatusOr<std::unique_ptr<DenseChain>> NewCpuChain(const config::ModelSpec& spec, int first,
                                                        int last);

// The layers first..last of `spec` checked to be dense: InvalidArgument naming the spec's file
// and line of the first that is not, or a range outside the spec.
absl::Status CheckDenseRange(const config::ModelSpec& spec, int first, int last);

}  // namespace heterps::dense
