// The GPUs of this host in the local catalog `heterps train` and `heterps profile` plan with (and
// the re-planner, for each version of a watched cluster spec, as the job's start did): one
// type per GPU model found (units: how many), and with --gpu-emulate N, N units of the host twin
// of a GPU ("twin:0" ..), a device for tests that runs GPU code on this host's cores (docs/gpu.md).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "heterps/config/cluster_spec.h"

namespace heterps::launcher {

// Adds the types to `cluster` (which must hold this host's CPU type, local_device "cpu"): for a
// GPU model, its FP32 rate, memory and bandwidth from the device and the cited on-demand price of
// the nearest cloud instance (per GPU); for the twin, the CPU type's figures and price (it is the
// CPU). Returns a line per device added, for the user.
std::vector<std::string> AddLocalGpus(config::ClusterSpec* cluster, int emulate);

}  // namespace heterps::launcher
