// `heterps node`: one process of a distributed job started by an external launcher (mpirun,
// Slurm) or by `heterps train` (docs/runtime.md).
//
//   mpirun -n 5 heterps node --coordinator HOST:PORT --plan plan.json --data train.tsv
//       --job-dir DIR --token-file job.token [--ps-shards 2] [train's options ...]
//   heterps node --coordinator HOST:PORT --rank R --world W [--token-file F] [--host ADDR]
//
// The rank and the world size come from --rank and --world, else from the launcher's
// environment (OMPI_COMM_WORLD_RANK and _SIZE, PMI_RANK and PMI_SIZE, SLURM_PROCID and
// SLURM_NTASKS). Rank 0 is the coordinator: it listens on --coordinator's port, reads the plan
// and the data and runs the job with train's options; the other ranks ask it for their role. Exit
// codes: 0 the job (or this process's part) ended well, 1 no feasible plan, 2 a failure (one line
// on stderr).
#pragma once

#include <cstdint>
#include <string>

#include "CLI/CLI.hpp"
#include "tools/train_command.h"

namespace heterps::tools {

struct NodeFlags {
  std::string coordinator;  // host:port
  int rank = -1, world = -1;
  int64_t generation = -1;
  std::string token_file;
  std::string host = "127.0.0.1";
  double connect_timeout = 30;  // seconds to reach the coordinator
  TrainFlags job;               // rank 0
};

CLI::App* AddNodeCommand(CLI::App& app, NodeFlags& flags);
int RunNode(const NodeFlags& flags);

}  // namespace heterps::tools
