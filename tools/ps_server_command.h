// `heterps ps-server`: one parameter-server shard as a process (heterps/ps/rpc/ps_server.h).
//
//   heterps ps-server --port 7000 --shard 0 --num-shards 2 --data-dir /data/ps0 --token-file T
//
// Prints "ps-server shard I of N listening on HOST:PORT" on stdout once it serves (with
// --port 0, the port the system chose; --port-file also writes it to a file, atomically), logs
// refused calls on stderr, and on SIGTERM or SIGINT stops accepting calls, lets those in flight
// finish (up to 5 s) and exits 0. Bad flags, an unreadable token file or a port in use: one line
// on stderr and exit code 2.
#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace heterps::tools {

struct PsServerFlags {
  std::string host = "127.0.0.1";
  int port = 0;
  int shard = 0;
  int num_shards = 1;
  std::string data_dir;
  std::string job_id;
  std::string token_file;
  std::string tls_cert;
  std::string tls_key;
  std::string port_file;
  double memory_limit_mib = 0;  // 0: 90% of this host's memory
  int metrics_port = -1;        // -1: no /metrics endpoint; 0: any free port
  std::string metrics_host = "127.0.0.1";
  std::string metrics_port_file;
};

// Registers the subcommand; `flags` must outlive `app`.
CLI::App* AddPsServerCommand(CLI::App& app, PsServerFlags& flags);

// Serves until SIGTERM or SIGINT. Returns the process exit code.
int RunPsServer(const PsServerFlags& flags);

}  // namespace heterps::tools
