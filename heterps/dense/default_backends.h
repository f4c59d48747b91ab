// Every dense backend, by device kind: "cpu" (this host's cores), "twin" (the host twin of a GPU)
// and "cuda" (a GPU; Unavailable in a build without CUDA or on a host without the GPU).
// docs/gpu.md.
//
//   HETERPS_ASSIGN_OR_RETURN(auto backend, DefaultBackends().Create(stage.device, options));
#pragma once

#include "heterps/dense/backend.h"

namespace heterps::dense {

BackendRegistry DefaultBackends();

}  // namespace heterps::dense
