// `heterps plan`: schedule and provision a model on a cluster, print the plan, write its JSON.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "CLI/CLI.hpp"

namespace heterps::tools {

struct PlanFlags {
  std::string model_path;     // empty: the embedded dlrm-small example
  std::string cluster_path;   // empty: the embedded cloud example
  std::string profile_path;   // optional measured per-layer times
  // samples/s; NaN (not given): the embedded default, allowed only with the embedded model.
  double throughput = std::numeric_limits<double>::quiet_NaN();
  double samples = 4373472329.0;
  std::string scheduler = "exact";
  uint64_t seed = 1;
  double time_limit = 60;
  int64_t max_plans = 0;
  std::string policy_in;       // rl: warm-start from this policy file
  std::string policy_out;      // rl: write the trained policy here
  std::string out_path;
  bool json = false;
};

// Registers the subcommand; `flags` must outlive `app`.
CLI::App* AddPlanCommand(CLI::App& app, PlanFlags& flags);

// Runs it. Returns the process exit code: 0 a feasible plan, 1 no feasible plan (the reason on
// stderr), 2 bad input (one line on stderr).
int RunPlan(const PlanFlags& flags);

}  // namespace heterps::tools
