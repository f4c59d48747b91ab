// Every dense backend this build has, by device kind: "cpu" always; the GPU backends where they
// are built (docs/gpu.md).
//
//   HETERPS_ASSIGN_OR_RETURN(auto backend, DefaultBackends().Create(stage.device, options));
#pragma once

#include "heterps/dense/backend.h"

namespace heterps::dense {

BackendRegistry DefaultBackends();

}  // namespace heterps::dense
