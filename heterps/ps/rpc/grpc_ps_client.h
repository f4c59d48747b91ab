// The PsClient of a distributed job: the same calls as InProcessPsClient
// (ps_client.h), served by PsServer processes over gRPC.
//
//   GrpcPsClientOptions options;
//   options.servers = {"127.0.0.1:7000", "127.0.0.1:7001"};   // shard i at servers[i]
//   options.token = token;
//   HETERPS_ASSIGN_OR_RETURN(auto client, GrpcPsClient::Connect(options));
//   HETERPS_RETURN_IF_ERROR(client->CreateSparseTable(0, sparse_options));
//   Ticket t = client->PullSparse(0, keys, values);
//   HETERPS_RETURN_IF_ERROR(client->Wait(t));
//
// A call becomes one RPC per server and per chunk: a server's keys are split so
// that no message exceeds `max_message_bytes`, and dense blocks are streamed in
// chunks. The RPCs of a call run concurrently on the client's threads; Wait
// returns when all have answered, with the first error. Each RPC has a deadline
// (`rpc_timeout`); one that fails with UNAVAILABLE (a server not yet up,
// restarting, or gone) is retried up to `max_attempts` times with doubling
// backoff. Pushes carry an id, so that a retried push is applied once
// (ps_server.h). An error names the call, the shard and its address, the
// attempts and gRPC's reason, e.g.
//   "ps shard 1 (127.0.0.1:7001): PullSparse table 0: UNAVAILABLE after 4
//   attempts: ..."
//
// Sparse tables are created on every shard with the same options (so a memory
// budget applies to each shard); dense table t lives on shard t % num_servers.
//
// Thread safety: every method may be called from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "heterps/ps/ps_client.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/rpc/job_tls.h"

namespace heterps::ps::rpc {

struct GrpcPsClientOptions {
  std::vector<std::string> servers;  // "host:port" of shard 0, 1, ...
  std::string token;                 // the job's token; empty if the servers have none
  std::string tls_ca_pem;            // PEM root certificates; non-empty: TLS to every server
  std::string tls_target_name;       // the name the servers' certificates carry, if not their host
  // The certificate chain and key this client shows (the servers require one: mutual TLS).
  std::string tls_cert_pem, tls_key_pem;
  absl::Duration connect_timeout = absl::Seconds(10);
  absl::Duration rpc_timeout = absl::Seconds(30);
  int max_attempts = 4;  // per RPC, for UNAVAILABLE only
  absl::Duration initial_backoff = absl::Milliseconds(50);
  int max_message_bytes = 4 << 20;  // batches are split to stay below it
  int threads = 0;                  // RPC threads; 0: 2 per server, at least 4

  // The TLS of a job's roles (rpc::JobChannel): the servers checked against the job's certificate
  // by its name, and that certificate shown.
  void UseJobTls(const heterps::rpc::JobTls& tls);
};

class GrpcPsClient : public PsClient {
 public:
  // Connects to every server within `connect_timeout` and checks that
  // servers[i] says it is shard i of servers.size(). Unavailable or
  // FailedPrecondition naming the server otherwise.
  static absl::StatusOr<std::unique_ptr<GrpcPsClient>> Connect(const GrpcPsClientOptions& options);
  ~GrpcPsClient() override;

  absl::Status CreateSparseTable(int table, const SparseTableOptions& options) override;
  absl::Status CreateDenseTable(int table, const DenseTableOptions& options) override;

  int num_servers() const override;
  Ticket PullSparse(int table, absl::Span<const uint64_t> keys, absl::Span<float> values) override;
  Ticket PushSparse(int table, absl::Span<const uint64_t> keys,
                    absl::Span<const float> grads) override;
  Ticket PullDense(int table, int block, absl::Span<float> values) override;
  Ticket PushDense(int table, int block, absl::Span<const float> grads) override;
  // One call each way for all the blocks (PullDense and PushDense name the further blocks).
  std::vector<Ticket> PullDenseBlocks(int table, absl::Span<const DensePull> blocks) override;
  std::vector<Ticket> PushDenseBlocks(int table, absl::Span<const DensePush> blocks) override;
  Ticket AccumulateSparse(int table, absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                          int part) override;
  Ticket AccumulateDense(int table, int block, absl::Span<const double> grads, int part) override;
  absl::Status Commit() override;
  Ticket ExportRows(int table, absl::Span<const uint64_t> keys, RowBatch* out) override;
  Ticket ImportRows(int table, absl::Span<const uint64_t> keys, const RowBatch& rows) override;
  Ticket ExportDense(int table, int block, int64_t offset, int64_t count, DenseSlice* out) override;
  Ticket ImportDense(int table, int block, int64_t offset, const DenseSlice& slice) override;
  absl::Status Wait(Ticket ticket) override;
  // Between regions (PsClient). ExportDeltas makes one attempt per server, never retried: a
  // server moves its bases on as it answers, so a retry would find nothing to send, and an answer
  // lost is an error (the job goes back to its last checkpoint). AddDeltas is added once however
  // often it is retried.
  absl::Status TrackDeltas() override;
  absl::Status ExportDeltas(int table, float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas) override;
  absl::Status AddDeltas(int table, absl::Span<const uint64_t> keys,
                         absl::Span<const float> deltas) override;
  absl::Status ExportDenseDeltas(int table, int block, float threshold,
                                 std::vector<float>* delta) override;
  absl::Status AddDenseDeltas(int table, int block, absl::Span<const float> delta) override;
  absl::Status ExportPending(PendingParts* out) override;
  // A GEO window: the export leaves the bases where they are, so it is retried as any call; the
  // merge is applied once however often it is retried, in messages of the client's size.
  absl::Status ExportWindow(int table, float threshold, std::vector<uint64_t>* keys,
                            std::vector<float>* deltas) override;
  absl::Status ApplyWindow(int table, absl::Span<const uint64_t> keys,
                           absl::Span<const float> merged, absl::Span<const float> own) override;
  absl::Status ExportDenseWindow(int table, int block, float threshold,
                                 std::vector<float>* delta) override;
  absl::Status ApplyDenseWindow(int table, int block, absl::Span<const float> merged,
                                absl::Span<const float> own) override;

  // Every shard writes a checkpoint of `step` under its data directory
  // (checkpoint.h). An error names each shard that failed; the shards that
  // succeeded keep theirs.
  absl::Status SaveCheckpoint(int64_t step);
  // Every shard loads its checkpoint of `step` (absent: its latest); returns the step, which all
  // shards must agree on.
  absl::StatusOr<int64_t> LoadCheckpoint(std::optional<int64_t> step = std::nullopt,
                                         int from_shards = 0);
  // Every shard's figures, each call within `timeout` (0: rpc_timeout) and tried once where a
  // timeout is given: a caller that reports on a job (status.json) must not wait on a server that
  // does not answer.
  absl::StatusOr<std::vector<ShardStats>> Stats(absl::Duration timeout = absl::ZeroDuration());
  // The calls this client made, by method, every attempt of a retried call counted.
  std::vector<base::MethodStats> CallStats() const override;
  // The digest of every parameter on every shard (checkpoint.h, DigestTables): the shards' sum.
  absl::StatusOr<uint64_t> Digest();

 private:
  struct Impl;
  explicit GrpcPsClient(std::unique_ptr<Impl> impl);
  Ticket SendSparse(int table, absl::Span<const uint64_t> keys, absl::Span<const float> grads,
                    bool accumulate, int part);
  // T: float (a push) or double (an accumulating part).
  // One stream for `blocks` (as many as `grads`), grads[i] the values of blocks[i], end to end.
  template <typename T>
  Ticket SendDense(int table, absl::Span<const int> blocks,
                   absl::Span<const absl::Span<const T>> grads, bool accumulate, int part);
  // ExportDeltas and ExportWindow; AddDeltas and ApplyWindow (own: null for AddDeltas); their
  // dense twins.
  absl::Status ExportChanges(int table, float threshold, bool window, std::vector<uint64_t>* keys,
                             std::vector<float>* deltas);
  absl::Status SendDeltas(int table, absl::Span<const uint64_t> keys,
                          absl::Span<const float> deltas, const absl::Span<const float>* own);
  absl::Status ExportDenseChanges(int table, int block, float threshold, bool window,
                                  std::vector<float>* delta);
  absl::Status SendDenseDeltas(int table, int block, absl::Span<const float> delta,
                               const absl::Span<const float>* own);
  std::unique_ptr<Impl> impl_;
};

}  // namespace heterps::ps::rpc
