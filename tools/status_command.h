// `heterps status JOBDIR`: the coordinator's view of a running (or finished) job, read from the
// <JOBDIR>/status.json it rewrites every second (docs/runtime.md): progress, throughput against
// the plan's, every replica's busy, idle and send time and its queue, every parameter-server
// shard's tier counters. Exit codes: 0 shown, 2 no status in that directory.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace heterps::tools {

struct StatusFlags {
  std::string job_dir;
};

CLI::App* AddStatusCommand(CLI::App& app, StatusFlags& flags);
int RunStatus(const StatusFlags& flags);

}  // namespace heterps::tools
