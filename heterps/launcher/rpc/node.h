// One process of a distributed job other than the coordinator (docs/runtime.md): it asks the
// coordinator what it is (by its rank), serves that role (a parameter-server shard, or a replica
// of a stage), registers where, and serves until the job is over.
//
//   NodeOptions options;
//   options.coordinator = "127.0.0.1:7000"; options.rank = 3; options.world = 6;
//   options.token = token;
//   return RunNode(options, &stop).ok() ? 0 : 1;
//
// It ends when the coordinator says the job (or this attempt of it) is over, or when the
// coordinator stops answering for `orphan_timeout` (it is gone: no process outlives its job).
// When `stop` turns true (SIGTERM), it asks the coordinator to stop the job cleanly (at the next
// step, with a checkpoint) and serves until told to end.
//
// Thread safety: RunNode blocks the calling thread; `stop` may be set from a signal handler.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "heterps/rpc/job_tls.h"

namespace heterps::launcher::rpc {

struct NodeOptions {
  std::string coordinator;  // host:port
  int rank = 1, world = 2;
  int64_t generation = -1;  // the attempt that started this process; -1: whichever is current
  std::string token;
  heterps::rpc::JobTls tls;        // the job's certificate, where its roles speak TLS
  std::string host = "127.0.0.1";  // the address this process serves on
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration orphan_timeout = absl::Seconds(10);
};

// Errors: an unreachable coordinator (Unavailable naming it), a rank the job does not have, a
// role that cannot start (a port, a data directory), a job that ends before this process joins.
absl::Status RunNode(const NodeOptions& options, const std::atomic<bool>* stop);

}  // namespace heterps::launcher::rpc
