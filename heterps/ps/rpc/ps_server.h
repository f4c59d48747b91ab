// One parameter-server shard behind gRPC: the tables of shard `shard` of
// `num_shards`, their SSD tier and checkpoints under a data directory, served
// on host:port (docs/ps.md).
//
//   PsServerOptions options;
//   options.shard = 0;
//   options.num_shards = 2;
//   options.data_dir = "/var/lib/heterps/ps0";
//   options.token = token;                              // the job's shared secret
//   HETERPS_ASSIGN_OR_RETURN(auto server, PsServer::Start(options));
//   ... server->port() ...                              // the bound port (options.port may be 0)
//   server->Shutdown(absl::Seconds(5));
//
// On disk: <data_dir>/tables/sparse-<id>/ holds a sparse table's cold rows
// (RocksDB) when the table has a memory budget; <data_dir>/checkpoints/ holds
// this shard's checkpoints (checkpoint.h).
//
// Security: with a token, every call must carry it in the "x-heterps-token"
// metadata entry; a call without it, or with another, is refused with
// UNAUTHENTICATED and logged (base/log.h) with the method and the peer. A
// server without a token accepts any call, and is therefore refused on any host
// but a loopback one. With a certificate and key, the server speaks TLS only.
//
// Pushes carry an id (client, sequence): a push the server has already applied,
// retried by a client that did not see the answer, is acknowledged without
// being applied again (the server remembers each client's last 4096 pushes).
//
// Thread safety: Shutdown and the accessors may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterps/base/call_stats.h"
#include "heterps/base/env.h"
#include "heterps/ps/sparse_table.h"

namespace heterps::ps::rpc {

// What a server accepts, checked before it allocates: a table's dim and lock shards, a dense
// table's floats (each block and all of them), the tables per server.
inline constexpr int kMaxDim = 4096;
inline constexpr int kMaxLockShards = 4096;
inline constexpr int64_t kMaxDenseFloats = int64_t{1} << 30;  // 4 GiB of values
inline constexpr size_t kMaxTables = 1024;

struct PsServerOptions {
  int shard = 0;
  int num_shards = 1;
  std::string job_id;    // written into and checked in every checkpoint (checkpoint.h)
  std::string data_dir;  // required; created if missing
  std::string host = "127.0.0.1";
  int port = 0;              // 0: a free port, chosen by the system
  std::string token;         // empty: no token (loopback hosts only)
  std::string tls_cert_pem;  // PEM text of the certificate chain; with tls_key_pem, TLS
  std::string tls_key_pem;
  int max_message_bytes = 64 << 20;  // the largest message received
  // Bytes the server may hold for its clients: resident sparse rows, dense tables with their
  // optimizer state, pending (accumulated, uncommitted) updates. A call that would go beyond it
  // is refused with RESOURCE_EXHAUSTED naming the limit and what holds the memory; the server
  // goes on serving. Checked before each call that can add to it, so that one call's rows may
  // overshoot it. 0: no limit.
  int64_t memory_limit_bytes = 0;
  base::Env* env = base::DefaultEnv();  // checkpoints go through it
};

// The memory limit a server takes when none is given: 90% of this host's memory (0, no limit,
// where the system does not say).
int64_t DefaultMemoryLimitBytes();

// Counters for a server's own operation (tables have theirs; see Stats in
// ps.proto).
struct PsServerCounters {
  int64_t calls = 0;
  int64_t refused = 0;
  int64_t duplicate_pushes = 0;
};

// A server's figures, as its Stats call answers them.
struct ShardStats {
  int shard = 0;
  std::vector<std::pair<int, SparseTableStats>> sparse;  // (table id, its counters on this shard)
  std::vector<int64_t> memory_budget_bytes;              // of each sparse table, in its order
  std::vector<int> dense_tables;
  int64_t calls = 0, refused = 0, duplicate_pushes = 0;
  std::vector<base::MethodStats> rpcs;  // the calls served, by method, refused ones as errors
};

class PsServer {
 public:
  // Binds and starts serving. InvalidArgument for bad options (naming the
  // option); Unavailable, naming host:port, when the address cannot be bound
  // (for example, in use).
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options);
  ~PsServer();  // Shutdown(absl::ZeroDuration()) if not done yet

  int port() const;
  std::string address() const;  // host:port
  PsServerCounters counters() const;
  ShardStats stats() const;  // what Stats answers, without a call

  // Stops accepting calls, lets calls in flight finish for up to `grace`, then
  // cancels the rest.
  void Shutdown(absl::Duration grace);

 private:
  class Service;
  struct Impl;
  explicit PsServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::ps::rpc
