// `heterps ctl JOBDIR`: asks a running job to change what it must achieve (docs/elastic.md):
//
//   heterps ctl DIR --throughput 50000           from now on, at least 50,000 samples/s
//   heterps ctl DIR --deadline 2026-11-24T06:00:00Z   finish by then, at the lowest cost
//   heterps ctl DIR --plan plan.json [--ps-shards 3]  switch to this plan
//
// It writes <DIR>/control.json (launcher/cluster_state.h), which the job's coordinator reads
// between steps: the job re-plans and switches when the decision rule says so, or says in its
// log why not. Exit codes: 0 written, 2 bad input (not a job directory, an unreadable plan).
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace heterps::tools {

struct CtlFlags {
  std::string job_dir;
  double throughput = 0;
  std::string deadline;
  std::string plan_path;
  int ps_shards = 0;
};

CLI::App* AddCtlCommand(CLI::App& app, CtlFlags& flags);
int RunCtl(const CtlFlags& flags);

}  // namespace heterps::tools
