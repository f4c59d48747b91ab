// The distributed path of `heterps train`, and rank 0 of `heterps node`: plan (or read the plan),
// show it, run the job (heterps/launcher/rpc/coordinator.h), summarize it.
#pragma once

#include <string>

#include "tools/train_command.h"

namespace heterps::tools {

struct LaunchSettings {
  bool local = true;               // start every role on this host; false: an external launcher
  std::string host = "127.0.0.1";  // the address the coordinator (and local roles) serve on
  int port = 0;                    // the coordinator's port; 0: a free one (local launches only)
  std::string token_file;          // the job's token; empty: a new one in the job directory
  int world = 0;                   // external launches: the processes the launcher started
};

int RunDistributedTrain(const TrainFlags& flags, const LaunchSettings& launch);

}  // namespace heterps::tools
