// How workers talk to the parameter servers, in the shape of ps-lite: batched pulls and pushes on
// key arrays that return a ticket, and Wait(ticket).
//
//   InProcessPsClient client(2);   // two server shards in this process (in_process_client.h)
//   Ticket t = client.PullSparse(0, keys, values);     // values: keys.size() * dim floats
//   HETERPS_RETURN_IF_ERROR(client.Wait(t));
//
// Two ways to update: Push applies a gradient now (asynchronous training, and a single process);
// Accumulate leaves it on the server, summed with the other contributions of the same step, until
// Commit applies one update per key and per block (synchronous training: the replicas' gradients
// of a mini-batch are applied once, as one process would apply them; pending.h).
//
// Semantics every implementation keeps (the gRPC client included):
// - keys may repeat and come in any order; a pull fetches each distinct key once and writes every
//   position; a push sums the gradients of a repeated key and applies one update per key;
// - key k lives on server base::ServerOf(k, num_servers) (base/mix_key.h; docs/ps.md);
// - buffers passed to a call must stay valid, and unchanged, until its Wait returns.
//
// Thread safety: implementations may be called from several threads; a ticket is waited for
// once, by any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "heterps/base/call_stats.h"
#include "heterps/ps/table_types.h"

namespace heterps::ps {

using Ticket = int64_t;

// One block of a several-block dense call (PsClient::PullDenseBlocks, PushDenseBlocks): the
// block, and the caller's floats for it.
struct DensePull {
  int block = 0;
  absl::Span<float> values;  // filled by the pull: the block's size
};
struct DensePush {
  int block = 0;
  absl::Span<const float> grads;  // the block's gradient: the block's size
};

class PsClient {
 public:
  virtual ~PsClient() = default;
  virtual int num_servers() const = 0;
  // Creates sparse table `table` on every server (creating it again with the same options is not
  // an error for the gRPC client; it is AlreadyExists in process), or dense table `table` on
  // server table % num_servers.
  virtual absl::Status CreateSparseTable(int table, const SparseTableOptions& options) = 0;
  virtual absl::Status CreateDenseTable(int table, const DenseTableOptions& options) = 0;
  virtual Ticket PullSparse(int table, absl::Span<const uint64_t> keys,
                            absl::Span<float> values) = 0;
  virtual Ticket PushSparse(int table, absl::Span<const uint64_t> keys,
                            absl::Span<const float> grads) = 0;
  // Dense tables live whole on server table % num_servers.
  virtual Ticket PullDense(int table, int block, absl::Span<float> values) = 0;
  virtual Ticket PushDense(int table, int block, absl::Span<const float> grads) = 0;
  // Several blocks of dense table `table` at once, each named once (a server refuses a block
  // named twice): every DensePull's values receive its block; every DensePush's gradient is
  // applied to its block as PushDense would, in the order given. Each span must have its block's
  // size (InvalidArgument naming the block otherwise; the gRPC client's push then applies none of
  // its blocks, the default's the others). Returns
  // the tickets to wait for: one where the client sends the blocks together (the gRPC client: one
  // call each way instead of one per block), one per block otherwise (the default: PullDense and
  // PushDense per block). Only the floats the spans point to need to outlive the call.
  virtual std::vector<Ticket> PullDenseBlocks(int table, absl::Span<const DensePull> blocks);
  virtual std::vector<Ticket> PushDenseBlocks(int table, absl::Span<const DensePush> blocks);
  // Like the pushes, but the servers hold the gradients as contribution `part` (>= 0: a node of
  // the step's block tree, block_tree.h) until Commit, which merges the parts up the tree
  // (pending.h). A part sends each table (each block) once per step, its keys distinct. A dense
  // part comes in doubles (its blocks' float gradients summed, not yet rounded), merged in double
  // and rounded once (docs/runtime.md, "The same run whatever the layout").
  virtual Ticket AccumulateSparse(int table, absl::Span<const uint64_t> keys,
                                  absl::Span<const float> grads, int part) = 0;
  virtual Ticket AccumulateDense(int table, int block, absl::Span<const double> grads,
                                 int part) = 0;
  // Applies every server's pending gradients; returns when all are applied.
  virtual absl::Status Commit() = 0;
  // Whole rows (value, optimizer state, update count) of distinct `keys` of sparse table `table`,
  // for a client that applies the optimizer itself (the GPU embedding tier): created as a pull
  // creates them. `out` must stay valid until Wait.
  virtual Ticket ExportRows(int table, absl::Span<const uint64_t> keys, RowBatch* out) = 0;
  // Replaces the rows of distinct `keys` with `rows` (shaped as ExportRows').
  virtual Ticket ImportRows(int table, absl::Span<const uint64_t> keys, const RowBatch& rows) = 0;
  // Floats [offset, offset + count) of dense block `block` with their optimizer state and the
  // block's update count (DenseSlice), for clients that apply the dense optimizer themselves (a
  // synchronous stage's replicas); and their replacement, which also sets the block's count.
  // `out` and `slice` must stay valid until Wait. InvalidArgument for a range outside the block.
  virtual Ticket ExportDense(int table, int block, int64_t offset, int64_t count,
                             DenseSlice* out) = 0;
  virtual Ticket ImportDense(int table, int block, int64_t offset, const DenseSlice& slice) = 0;
  // A hint: the keys of `table` the coming pulls and pushes will touch (a tier loads them ahead).
  // The default ignores it.
  virtual absl::Status Prefetch(int table, absl::Span<const uint64_t> keys) {
    return absl::OkStatus();
  }
  // A hint after Prefetch: the keys of `table` the window after the coming one will touch (the
  // next step's), so that a tier fetches the rows it will then miss while the coming window runs
  // (gpu_tier.h, "Looking ahead"). The default ignores it.
  virtual absl::Status Anticipate(int table, absl::Span<const uint64_t> keys) {
    return absl::OkStatus();
  }
  // Makes every update this client holds back visible to the servers (a tier writes its dirty
  // rows back). The default has nothing held back.
  virtual absl::Status Flush() { return absl::OkStatus(); }
  // Training across regions (docs/regions.md). TrackDeltas: every server tracks the changed rows
  // of its tables, and of those it creates later, from now on (sparse_table.h). ExportDeltas:
  // every server's tracked rows of sparse table `table` whose change passes `threshold` (keys,
  // appended in key order within each server, and dim floats each), their bases moved on;
  // AddDeltas: deltas added to the rows of `keys` (routed by key; a key given twice gets both)
  // and to their bases. ExportDenseDeltas and AddDenseDeltas: the same for block `block` of dense
  // table `table` (dense_table.h; `delta` left empty where there is nothing to send).
  // ExportPending: every server's contributions held for the commit (pending.h), one entry per
  // table and part (and block), for another region's servers to add with the same parts
  // (AccumulateSparse, AccumulateDense). Synchronous. Unimplemented for a client that cannot (the
  // default); the servers' errors, naming the server.
  virtual absl::Status TrackDeltas();
  virtual absl::Status ExportDeltas(int table, float threshold, std::vector<uint64_t>* keys,
                                    std::vector<float>* deltas);
  virtual absl::Status AddDeltas(int table, absl::Span<const uint64_t> keys,
                                 absl::Span<const float> deltas);
  virtual absl::Status ExportDenseDeltas(int table, int block, float threshold,
                                         std::vector<float>* delta);
  virtual absl::Status AddDenseDeltas(int table, int block, absl::Span<const float> delta);
  virtual absl::Status ExportPending(PendingParts* out);
  // A GEO window (docs/regions.md; sparse_table.h's ExportWindow and ApplyWindow): ExportWindow
  // is ExportDeltas with the bases left where they are (keys in key order within each server);
  // ApplyWindow hands every server the window's merge for its rows of `keys` (sorted, distinct)
  // with `own`, what this region sent of each (zeros for a row it did not send), which takes the
  // bases onto the merge, the same in every region. The dense pair: the same for one block.
  // Synchronous; Unimplemented for a client that cannot (the default).
  virtual absl::Status ExportWindow(int table, float threshold, std::vector<uint64_t>* keys,
                                    std::vector<float>* deltas);
  virtual absl::Status ApplyWindow(int table, absl::Span<const uint64_t> keys,
                                   absl::Span<const float> merged, absl::Span<const float> own);
  virtual absl::Status ExportDenseWindow(int table, int block, float threshold,
                                         std::vector<float>* delta);
  virtual absl::Status ApplyDenseWindow(int table, int block, absl::Span<const float> merged,
                                        absl::Span<const float> own);

  // The calls this client made to remote servers, by method (base/call_stats.h); none for a
  // client without a network between it and its servers.
  virtual std::vector<base::MethodStats> CallStats() const { return {}; }
  // The outcome of the call that returned `ticket`; NotFound for an unknown or spent ticket.
  virtual absl::Status Wait(Ticket ticket) = 0;
};

}  // namespace heterps::ps
