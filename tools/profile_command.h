// `heterps profile`: measure each layer of a model on this host's CPU and write the profile the
// planner reads (docs/cost_model.md, "Profiles").
//
//   heterps profile [--model M.yaml] [--batch B] [--type NAME] [--repeats R] [--cluster C.yaml]
//                   [--data FILES...] --out profile.json
//
// Builds the model against in-process tables, trains it on batches of --data (the files from their
// first line, in the spec's layout) or random ones shaped as the spec's data (2 to warm up, then
// --repeats timed) and records, per layer, the median forward + backward seconds of
// one batch: fc and interaction layers their compute, embedding layers their pull and push
// through the parameter-server client, the logloss layer the loss. The entries are for resource
// type --type (default host-cpu, the type of examples/clusters/local.yaml). Then the network
// (worker/rpc/network_profile.h): a synchronous step of the whole model through the real client and
// server, with as many replicas as --cluster's (default: the embedded local.yaml) type --type has
// units here, fitted into the profile's network entries with each type's dp_loss. With
// --gpu-cache-gib G, each GPU (or emulated one) is measured with a GPU tier of G GiB on it
// feeding the stage there and the dense parameters held on it, as a synchronous job with that
// tier runs a one-stage plan on it (the profile's tier entries: docs/cost_model.md, "The GPU
// tier"), and each such GPU's network from a step of its own through the tier and a server on
// loopback. Prints the tables. Exit codes: 0 written, 2 bad input or a failure.
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace heterps::tools {

struct ProfileFlags {
  std::string model_path;
  int batch = 0;  // 0: the spec's (the planner reads only profiles at the spec's batch size)
  std::string type = "host-cpu";
  std::vector<std::string> data;  // files or globs to profile on; empty: random batches
  std::string
      cluster_path;  // whose types' units and dp_loss the network is fitted for (empty: local)
  int repeats = 5;
  std::string out;
  int gpu_emulate = 0;       // for testing: also the host twin of a GPU (type gpu-twin)
  double gpu_cache_gib = 0;  // > 0: the GPUs measured with a GPU tier of this size
};

CLI::App* AddProfileCommand(CLI::App& app, ProfileFlags& flags);
int RunProfile(const ProfileFlags& flags);

}  // namespace heterps::tools
