// One gRPC service class: every handler shares the tables, the snapshot lock that checkpoints
// take and the push de-duplication. Kept in one file (over 500 lines) so that the locking rules
// are read in one place.
#include "heterps/ps/rpc/ps_server.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <filesystem>
#include <functional>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "heterps/base/host.h"
#include "heterps/base/log.h"
#include "heterps/base/numbers.h"
#include "heterps/base/status_macros.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/key_plan.h"
#include "heterps/ps/pending.h"
#include "heterps/ps/ps_client.h"
#include "heterps/ps/rocksdb_store.h"
#include "heterps/ps/rpc/internal/convert.h"
#include "heterps/ps/rpc/ps.grpc.pb.h"
#include "heterps/ps/shard.h"
#include "heterps/rpc/rpc.h"

namespace heterps::ps::rpc {
namespace {

using heterps::rpc::ToGrpc;
using internal::CountOf;
using internal::FromBytes;

constexpr int kPushesRemembered = 4096;
constexpr size_t kDenseChunkFloats = 256 * 1024;  // 1 MiB per streamed message

// Recent pushes of each client, so that a retried push is applied once.
class PushLog {
 public:
  // Runs `apply` unless the push `id` ran already; a repeat waits for the first
  // run and returns its status. A failed push is forgotten, so that its retry
  // runs again. A zero client id opts out.
  absl::Status Once(const PushId& id, const std::function<absl::Status()>& apply,
                    std::atomic<int64_t>& duplicates) {
    if (id.client() == 0) return apply();
    std::shared_ptr<Entry> entry;
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      Client& client = clients_[id.client()];
      auto [it, fresh] = client.entries.try_emplace(id.sequence());
      if (fresh) {
        it->second = std::make_shared<Entry>();
        client.order.push_back(id.sequence());
        if (client.order.size() > kPushesRemembered) {
          client.entries.erase(client.order.front());
          client.order.pop_front();
        }
        first = true;
      }
      entry = it->second;
    }
    if (!first) {
      ++duplicates;
      entry->done.WaitForNotification();
      return entry->status;
    }
    entry->status = apply();
    if (!entry->status.ok()) {
      absl::MutexLock lock(&mu_);
      Client& client = clients_[id.client()];
      auto it = client.entries.find(id.sequence());
      if (it != client.entries.end() && it->second == entry) client.entries.erase(it);
    }
    entry->done.Notify();
    return entry->status;
  }

 private:
  struct Entry {
    absl::Notification done;
    absl::Status status;
  };
  struct Client {
    absl::flat_hash_map<int64_t, std::shared_ptr<Entry>> entries;
    std::deque<int64_t> order;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Client> clients_ ABSL_GUARDED_BY(mu_);
};

bool SameConfig(const google::protobuf::Message& a, const google::protobuf::Message& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

}  // namespace

class PsServer::Service final : public ParameterServer::Service {
 public:
  explicit Service(const PsServerOptions& options) : options_(options), auth_(options.token) {}

  PsServerCounters counters() const { return {calls_.load(), auth_.refused(), duplicates_.load()}; }

  grpc::Status Info(grpc::ServerContext* ctx, const InfoRequest*, InfoReply* reply) override {
    return Serve(ctx, "Info", [&]() -> absl::Status {
      reply->set_shard(options_.shard);
      reply->set_num_shards(options_.num_shards);
      return absl::OkStatus();
    });
  }

  grpc::Status CreateTable(grpc::ServerContext* ctx, const CreateTableRequest* request,
                           CreateTableReply*) override {
    return Serve(ctx, "CreateTable", [&] { return Create(*request); });
  }

  grpc::Status PullSparse(grpc::ServerContext* ctx, const PullSparseRequest* request,
                          PullSparseReply* reply) override {
    return Serve(ctx, "PullSparse", [&]() -> absl::Status {
      HETERPS_RETURN_IF_ERROR(CheckMemory(0));
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      HETERPS_ASSIGN_OR_RETURN(SparseTable * table, Sparse(request->table()));
      HETERPS_ASSIGN_OR_RETURN(std::vector<uint64_t> keys, Keys(request->keys()));
      const size_t floats = keys.size() * table->dim();
      std::string* out = reply->mutable_values();
      out->resize(floats * sizeof(float));
      return table->Pull(keys, absl::MakeSpan(reinterpret_cast<float*>(out->data()), floats));
    });
  }

  grpc::Status ExportRows(grpc::ServerContext* ctx, const PullSparseRequest* request,
                          RowsReply* reply) override {
    return Serve(ctx, "ExportRows", [&]() -> absl::Status {
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      HETERPS_ASSIGN_OR_RETURN(SparseTable * table, Sparse(request->table()));
      HETERPS_ASSIGN_OR_RETURN(std::vector<uint64_t> keys, Keys(request->keys()));
      RowBatch rows;
      HETERPS_RETURN_IF_ERROR(table->Export(keys, &rows));
      reply->set_values(internal::ToBytes<float>(rows.values));
      reply->set_state(internal::ToBytes<float>(rows.state));
      reply->set_steps(internal::ToBytes<int64_t>(rows.steps));
      return absl::OkStatus();
    });
  }

  grpc::Status ImportRows(grpc::ServerContext* ctx, const ImportRowsRequest* request,
                          PushReply*) override {
    return Serve(ctx, "ImportRows", [&]() -> absl::Status {
      HETERPS_RETURN_IF_ERROR(CheckMemory(0));
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      HETERPS_ASSIGN_OR_RETURN(SparseTable * table, Sparse(request->table()));
      HETERPS_ASSIGN_OR_RETURN(std::vector<uint64_t> keys, Keys(request->keys()));
      const int dim = table->dim();
      const int state = StateFloats(table->options().optimizer.kind) * dim;
      RowBatch rows;
      rows.values.resize(keys.size() * dim);
      rows.state.resize(keys.size() * state);
      rows.steps.resize(keys.size());
      HETERPS_RETURN_IF_ERROR(
          FromBytes<float>(request->values(), absl::MakeSpan(rows.values), "import values"));
      HETERPS_RETURN_IF_ERROR(
          FromBytes<float>(request->state(), absl::MakeSpan(rows.state), "import state"));
      HETERPS_RETURN_IF_ERROR(
          FromBytes<int64_t>(request->steps(), absl::MakeSpan(rows.steps), "import counts"));
      return table->Import(keys, rows);
    });
  }

  grpc::Status PushSparse(grpc::ServerContext* ctx, const PushSparseRequest* request,
                          PushReply*) override {
    return Serve(ctx, "PushSparse", [&]() -> absl::Status {
      HETERPS_RETURN_IF_ERROR(
          CheckMemory(request->accumulate()
                          ? static_cast<int64_t>(request->keys().size() + request->grads().size())
                          : 0));
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      HETERPS_ASSIGN_OR_RETURN(SparseTable * table, Sparse(request->table()));
      HETERPS_ASSIGN_OR_RETURN(std::vector<uint64_t> keys, Keys(request->keys()));
      std::vector<float> grads(keys.size() * table->dim());
      HETERPS_RETURN_IF_ERROR(
          FromBytes<float>(request->grads(), absl::MakeSpan(grads), "push sparse gradients"));
      return pushes_.Once(
          request->id(),
          [&] {
            if (!request->accumulate()) return table->Push(keys, grads);
            shard_.pending().AddSparse(request->table(), request->part(), keys, grads);
            return absl::OkStatus();
          },
          duplicates_);
    });
  }

  grpc::Status ExportDense(grpc::ServerContext* ctx, const DenseSliceRequest* request,
                           DenseSliceMessage* reply) override {
    return Serve(ctx, "ExportDense", [&]() -> absl::Status {
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      HETERPS_ASSIGN_OR_RETURN(DenseTable * table, Dense(request->table()));
      DenseSlice slice;
      HETERPS_RETURN_IF_ERROR(
          table->ReadSlice(request->block(), request->offset(), request->count(), &slice));
      reply->set_table(request->table());
      reply->set_block(request->block());
      reply->set_offset(request->offset());
      reply->set_value(internal::ToBytes<float>(slice.value));
      reply->set_state(internal::ToBytes<float>(slice.state));
      reply->set_steps(slice.steps);
      return absl::OkStatus();
    });
  }

  grpc::Status ImportDense(grpc::ServerContext* ctx, const DenseSliceMessage* request,
                           PushReply*) override {
    return Serve(ctx, "ImportDense", [&]() -> absl::Status {
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      HETERPS_ASSIGN_OR_RETURN(DenseTable * table, Dense(request->table()));
      HETERPS_ASSIGN_OR_RETURN(const size_t count,
                               internal::CountOf<float>(request->value(), "dense slice values"));
      HETERPS_ASSIGN_OR_RETURN(const size_t state,
                               internal::CountOf<float>(request->state(), "dense slice state"));
      DenseSlice slice;
      slice.value.resize(count);
      slice.state.resize(state);
      slice.steps = request->steps();
      HETERPS_RETURN_IF_ERROR(
          FromBytes<float>(request->value(), absl::MakeSpan(slice.value), "dense slice values"));
      HETERPS_RETURN_IF_ERROR(
          FromBytes<float>(request->state(), absl::MakeSpan(slice.state), "dense slice state"));
      return table->WriteSlice(request->block(), request->offset(), slice);
    });
  }

  grpc::Status PullDense(grpc::ServerContext* ctx, const PullDenseRequest* request,
                         grpc::ServerWriter<DenseChunk>* writer) override {
    return Serve(ctx, "PullDense", [&]() -> absl::Status {
      std::vector<float> values;
      {
        absl::ReaderMutexLock snapshot(&snapshot_mu_);
        HETERPS_ASSIGN_OR_RETURN(DenseTable * table, Dense(request->table()));
        HETERPS_ASSIGN_OR_RETURN(const std::vector<int> blocks,
                                 BlocksOf(*table, request->table(), request->block(),
                                          request->more_blocks(), request->sizes()));
        values.resize(FloatsOf(*table, blocks));
        HETERPS_RETURN_IF_ERROR(ForEachBlock(
            *table, blocks, values.data(),
            [&](int block, absl::Span<float> out) { return table->Pull(block, out); }));
      }
      for (size_t at = 0; at < values.size(); at += kDenseChunkFloats) {
        DenseChunk chunk;
        const size_t n = std::min(kDenseChunkFloats, values.size() - at);
        *chunk.mutable_values() =
            internal::ToBytes<float>(absl::MakeConstSpan(values.data() + at, n));
        if (!writer->Write(chunk)) return absl::CancelledError("the client went away");
      }
      return absl::OkStatus();
    });
  }

  grpc::Status PushDense(grpc::ServerContext* ctx, grpc::ServerReader<PushDenseChunk>* reader,
                         PushReply*) override {
    return Serve(ctx, "PushDense", [&]() -> absl::Status {
      PushDenseChunk first;
      if (!reader->Read(&first)) return absl::InvalidArgumentError("push dense: no chunks");
      // The table and block are checked before the rest of the stream is read, and the stream
      // may hold no more than the block: a client cannot make the server hold what it will refuse.
      HETERPS_ASSIGN_OR_RETURN(DenseTable * table, Dense(first.table()));
      HETERPS_ASSIGN_OR_RETURN(
          const std::vector<int> blocks,
          BlocksOf(*table, first.table(), first.block(), first.more_blocks(), first.sizes()));
      // An accumulating part comes in doubles (ps_client.h).
      const size_t width = first.accumulate() ? sizeof(double) : sizeof(float);
      const size_t floats = FloatsOf(*table, blocks);
      const size_t limit = floats * width;
      HETERPS_RETURN_IF_ERROR(CheckMemory(first.accumulate() ? static_cast<int64_t>(limit) : 0));
      std::string grads_bytes = first.grads();
      PushDenseChunk chunk;
      while (grads_bytes.size() <= limit && reader->Read(&chunk)) grads_bytes += chunk.grads();
      const std::string what =
          absl::StrCat("push dense table ", first.table(),
                       blocks.size() > 1 ? " blocks " : " block ", absl::StrJoin(blocks, ","));
      if (grads_bytes.size() > limit) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": more than ", limit, " bytes of gradients"));
      }
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      // Each block's update in the order named. The sizes were checked before any is applied, and
      // neither update can fail after that: a push that failed part way would be forgotten by
      // the push log and its retry would apply the first blocks again.
      if (first.accumulate()) {
        std::vector<double> parts(floats);
        HETERPS_RETURN_IF_ERROR(FromBytes<double>(grads_bytes, absl::MakeSpan(parts), what));
        return pushes_.Once(
            first.id(),
            [&] {
              return ForEachBlock(
                  *table, blocks, parts.data(), [&](int block, absl::Span<double> part) {
                    return shard_.pending().AddDense(first.table(), block, first.part(), part);
                  });
            },
            duplicates_);
      }
      std::vector<float> grads(floats);
      HETERPS_RETURN_IF_ERROR(FromBytes<float>(grads_bytes, absl::MakeSpan(grads), what));
      return pushes_.Once(
          first.id(),
          [&] {
            return ForEachBlock(*table, blocks, grads.data(), [&](int block, absl::Span<float> g) {
              return table->Push(block, g);
            });
          },
          duplicates_);
    });
  }

  grpc::Status Commit(grpc::ServerContext* ctx, const CommitRequest*, CommitReply*) override {
    return Serve(ctx, "Commit", [&]() -> absl::Status {
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      return shard_.Commit(PendingUpdates::DefaultThreads());
    });
  }

  grpc::Status SaveCheckpoint(grpc::ServerContext* ctx, const SaveCheckpointRequest* request,
                              SaveCheckpointReply* reply) override {
    return Serve(ctx, "SaveCheckpoint", [&]() -> absl::Status {
      absl::MutexLock snapshot(&snapshot_mu_);
      HETERPS_RETURN_IF_ERROR(
          ps::SaveCheckpoint(options_.env, CheckpointRoot(), request->step(), Tables(), Id()));
      // The one before stays: a job restores the last step that every shard completed.
      HETERPS_RETURN_IF_ERROR(PruneCheckpoints(options_.env, CheckpointRoot(), 2));
      reply->set_path(absl::StrCat(CheckpointRoot(), "/ckpt-", request->step()));
      return absl::OkStatus();
    });
  }

  grpc::Status LoadCheckpoint(grpc::ServerContext* ctx, const LoadCheckpointRequest* request,
                              LoadCheckpointReply* reply) override {
    return Serve(ctx, "LoadCheckpoint", [&]() -> absl::Status {
      absl::MutexLock snapshot(&snapshot_mu_);
      if (request->from_shards() > 0 && request->from_shards() != options_.num_shards) {
        if (!request->has_step()) {
          return absl::InvalidArgumentError("re-sharding a checkpoint needs its step");
        }
        // The other shards' data directories are this one's siblings, ps-<i>.
        const std::string parent =
            std::filesystem::path(options_.data_dir).lexically_normal().parent_path().string();
        std::vector<std::string> roots;
        for (int i = 0; i < request->from_shards(); ++i) {
          roots.push_back(CheckpointRootOf(absl::StrCat(parent, "/ps-", i)));
        }
        HETERPS_ASSIGN_OR_RETURN(
            int64_t step,
            LoadCheckpointResharded(options_.env, roots, request->step(), Id(), Tables()));
        reply->set_step(step);
        return absl::OkStatus();
      }
      HETERPS_ASSIGN_OR_RETURN(
          int64_t step,
          request->has_step()
              ? ps::LoadCheckpoint(options_.env, CheckpointRoot(), request->step(), Tables(), Id())
              : LoadLatestCheckpoint(options_.env, CheckpointRoot(), Tables(), Id()));
      reply->set_step(step);
      return absl::OkStatus();
    });
  }

  grpc::Status Digest(grpc::ServerContext* ctx, const DigestRequest*, DigestReply* reply) override {
    return Serve(ctx, "Digest", [&]() -> absl::Status {
      absl::MutexLock snapshot(&snapshot_mu_);
      HETERPS_ASSIGN_OR_RETURN(const uint64_t digest, DigestTables(Tables()));
      reply->set_digest(digest);
      return absl::OkStatus();
    });
  }

  grpc::Status TrackDeltas(grpc::ServerContext* ctx, const TrackDeltasRequest*,
                           PushReply*) override {
    return Serve(ctx, "TrackDeltas", [&]() -> absl::Status {
      shard_.TrackDeltas();
      return absl::OkStatus();
    });
  }

  grpc::Status ExportDeltas(grpc::ServerContext* ctx, const ExportDeltasRequest* request,
                            DeltasMessage* reply) override {
    return Serve(ctx, "ExportDeltas", [&]() -> absl::Status {
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      reply->set_table(request->table());
      reply->set_dense(request->dense());
      reply->set_block(request->block());
      std::vector<float> deltas;
      if (request->dense()) {
        HETERPS_ASSIGN_OR_RETURN(DenseTable * table, Dense(request->table()));
        HETERPS_RETURN_IF_ERROR(
            request->window()
                ? table->ExportWindow(request->block(), request->threshold(), &deltas)
                : table->ExportDeltas(request->block(), request->threshold(), &deltas));
      } else {
        HETERPS_ASSIGN_OR_RETURN(SparseTable * table, Sparse(request->table()));
        std::vector<uint64_t> keys;
        // As many rows as one answer carries (a key and dim floats each): more is an error before
        // any base moves, rather than deltas lost in an answer too large to send.
        const int64_t row_bytes = sizeof(uint64_t) + sizeof(float) * table->dim();
        const int64_t max_rows =
            std::max<int64_t>(1, (options_.max_message_bytes - (int64_t{64} << 10)) / row_bytes);
        HETERPS_RETURN_IF_ERROR(
            request->window()
                ? table->ExportWindow(request->threshold(), &keys, &deltas, max_rows)
                : table->ExportDeltas(request->threshold(), &keys, &deltas, max_rows));
        reply->set_keys(internal::ToBytes<uint64_t>(keys));
      }
      reply->set_deltas(internal::ToBytes<float>(deltas));
      return absl::OkStatus();
    });
  }

  grpc::Status AddDeltas(grpc::ServerContext* ctx, const DeltasMessage* request,
                         PushReply*) override {
    return Serve(ctx, "AddDeltas", [&]() -> absl::Status {
      absl::ReaderMutexLock snapshot(&snapshot_mu_);
      HETERPS_ASSIGN_OR_RETURN(const size_t floats, CountOf<float>(request->deltas(), "deltas"));
      std::vector<float> deltas(floats);
      HETERPS_RETURN_IF_ERROR(
          FromBytes<float>(request->deltas(), absl::MakeSpan(deltas), "deltas"));
      std::vector<float> own;  // a window's merge: what this region sent
      if (request->window()) {
        HETERPS_ASSIGN_OR_RETURN(const size_t sent, CountOf<float>(request->own(), "own"));
        own.resize(sent);
        HETERPS_RETURN_IF_ERROR(FromBytes<float>(request->own(), absl::MakeSpan(own), "own"));
      }
      if (request->dense()) {
        HETERPS_ASSIGN_OR_RETURN(DenseTable * table, Dense(request->table()));
        return pushes_.Once(
            request->id(),
            [&] {
              return request->window() ? table->ApplyWindow(request->block(), deltas, own)
                                       : table->AddDeltas(request->block(), deltas);
            },
            duplicates_);
      }
      HETERPS_ASSIGN_OR_RETURN(SparseTable * table, Sparse(request->table()));
      HETERPS_ASSIGN_OR_RETURN(std::vector<uint64_t> keys, Keys(request->keys()));
      return pushes_.Once(
          request->id(),
          [&] {
            return request->window() ? table->ApplyWindow(keys, deltas, own)
                                     : table->AddDeltas(keys, deltas);
          },
          duplicates_);
    });
  }

  grpc::Status ExportPending(grpc::ServerContext* ctx, const ExportPendingRequest*,
                             PendingMessage* reply) override {
    return Serve(ctx, "ExportPending", [&]() -> absl::Status {
      const PendingParts parts = shard_.pending().Export();
      for (const PendingParts::Sparse& p : parts.sparse) {
        PendingMessage::Sparse* out = reply->add_sparse();
        out->set_table(p.table);
        out->set_part(p.part);
        out->set_keys(internal::ToBytes<uint64_t>(p.keys));
        out->set_grads(internal::ToBytes<float>(p.grads));
      }
      for (const PendingParts::Dense& p : parts.dense) {
        PendingMessage::Dense* out = reply->add_dense();
        out->set_table(p.table);
        out->set_block(p.block);
        out->set_part(p.part);
        out->set_grads(internal::ToBytes<double>(p.grads));
      }
      return absl::OkStatus();
    });
  }

  grpc::Status Stats(grpc::ServerContext* ctx, const StatsRequest*, StatsReply* reply) override {
    return Serve(ctx, "Stats", [&]() -> absl::Status {
      const ShardStats stats = Snapshot();
      reply->set_shard(stats.shard);
      for (size_t i = 0; i < stats.sparse.size(); ++i) {
        const auto& [id, s] = stats.sparse[i];
        SparseStats* out = reply->add_sparse();
        out->set_table(id);
        out->set_memory_rows(s.memory_rows);
        out->set_memory_bytes(s.memory_bytes);
        out->set_cold_rows(s.cold_rows);
        out->set_created(s.created);
        out->set_hits(s.hits);
        out->set_misses(s.misses);
        out->set_spills(s.spills);
        out->set_memory_budget_bytes(stats.memory_budget_bytes[i]);
      }
      for (int id : stats.dense_tables) reply->add_dense_tables(id);
      reply->set_calls(stats.calls);
      reply->set_refused(stats.refused);
      reply->set_duplicate_pushes(stats.duplicate_pushes);
      heterps::rpc::ToProto(stats.rpcs, reply->mutable_rpcs());
      return absl::OkStatus();
    });
  }

  ShardStats Snapshot() const {
    ShardStats stats;
    stats.shard = options_.shard;
    for (int id : shard_.sparse_ids()) {
      const SparseTable* table = shard_.sparse(id);
      stats.sparse.emplace_back(id, table->Stats());
      stats.memory_budget_bytes.push_back(table->options().memory_budget_bytes);
    }
    stats.dense_tables = shard_.dense_ids();
    const PsServerCounters c = counters();
    stats.calls = c.calls;
    stats.refused = c.refused;
    stats.duplicate_pushes = c.duplicate_pushes;
    stats.rpcs = call_stats_.Snapshot();
    return stats;
  }

 private:
  template <typename Body>
  grpc::Status Serve(grpc::ServerContext* ctx, absl::string_view method, Body body) {
    ++calls_;
    const absl::Time start = absl::Now();
    if (grpc::Status denied = auth_.Check(ctx, method); !denied.ok()) {
      call_stats_.Record(method, false, absl::Now() - start);
      return denied;
    }
    absl::Status status = body();
    // UNAVAILABLE on the wire means "try again" to clients; a server's own
    // storage failing is not that.
    if (status.code() == absl::StatusCode::kUnavailable) {
      status = absl::InternalError(status.message());
    }
    call_stats_.Record(method, status.ok(), absl::Now() - start);
    return ToGrpc(status);
  }

  // What one table may ask of a server, checked before anything is allocated.
  static absl::Status CheckLimits(const CreateTableRequest& request) {
    auto over = [&](absl::string_view what, int64_t value, int64_t limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table ", request.table(), ": ", what, " ", base::WithCommas(static_cast<double>(value)),
          " is over the limit of ", base::WithCommas(static_cast<double>(limit))));
    };
    if (request.has_sparse()) {
      const auto& s = request.sparse();
      if (s.dim() > kMaxDim) return over("dim", s.dim(), kMaxDim);
      if (s.lock_shards() > kMaxLockShards) {
        return over("lock_shards", s.lock_shards(), kMaxLockShards);
      }
    }
    if (request.has_dense()) {
      int64_t floats = 0;
      for (int64_t size : request.dense().block_sizes()) {
        if (size < 0 || size > kMaxDenseFloats) return over("a block of", size, kMaxDenseFloats);
        floats += size;
        if (floats > kMaxDenseFloats) return over("floats in all blocks:", floats, kMaxDenseFloats);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Create(const CreateTableRequest& request) {
    const int id = request.table();
    if (id < 0) return absl::InvalidArgumentError(absl::StrCat("table id ", id, " < 0"));
    HETERPS_RETURN_IF_ERROR(CheckLimits(request));
    absl::MutexLock snapshot(&snapshot_mu_);
    absl::MutexLock lock(&tables_mu_);
    if (request.has_sparse()) {
      if (auto it = sparse_configs_.find(id); it != sparse_configs_.end()) {
        if (SameConfig(it->second, request.sparse())) return absl::OkStatus();
        return absl::AlreadyExistsError(
            absl::StrCat("sparse table ", id, " exists with another configuration"));
      }
      if (static_cast<size_t>(shard_.num_tables()) >= kMaxTables) {
        return absl::ResourceExhaustedError(
            absl::StrCat("table ", id, ": this server holds ", kMaxTables, " tables, the limit"));
      }
      HETERPS_ASSIGN_OR_RETURN(SparseTableOptions options, internal::FromProto(request.sparse()));
      std::unique_ptr<ColdStore> cold;
      if (options.memory_budget_bytes > 0) {
        HETERPS_ASSIGN_OR_RETURN(
            cold, RocksDbColdStore::Open(absl::StrCat(options_.data_dir, "/tables/sparse-", id)));
      }
      HETERPS_ASSIGN_OR_RETURN(auto table, SparseTable::Create(options, std::move(cold)));
      HETERPS_RETURN_IF_ERROR(shard_.AddSparse(id, std::move(table)));
      sparse_configs_.emplace(id, request.sparse());
      return absl::OkStatus();
    }
    if (request.has_dense()) {
      if (id % options_.num_shards != options_.shard) {
        return absl::FailedPreconditionError(absl::StrCat("dense table ", id, " belongs on shard ",
                                                          id % options_.num_shards,
                                                          ", not on shard ", options_.shard));
      }
      if (auto it = dense_configs_.find(id); it != dense_configs_.end()) {
        if (SameConfig(it->second, request.dense())) return absl::OkStatus();
        return absl::AlreadyExistsError(
            absl::StrCat("dense table ", id, " exists with another configuration"));
      }
      if (static_cast<size_t>(shard_.num_tables()) >= kMaxTables) {
        return absl::ResourceExhaustedError(
            absl::StrCat("table ", id, ": this server holds ", kMaxTables, " tables, the limit"));
      }
      HETERPS_ASSIGN_OR_RETURN(DenseTableOptions options, internal::FromProto(request.dense()));
      int64_t floats = 0;
      for (int64_t size : options.block_sizes) floats += size;
      const int64_t bytes =
          floats * static_cast<int64_t>(sizeof(float)) * (1 + StateFloats(options.optimizer.kind));
      HETERPS_RETURN_IF_ERROR(CheckMemory(bytes));
      HETERPS_ASSIGN_OR_RETURN(auto table, DenseTable::Create(options));
      HETERPS_RETURN_IF_ERROR(shard_.AddDense(id, std::move(table)));
      dense_configs_.emplace(id, request.dense());
      dense_bytes_ += bytes;
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("table ", id, ": neither sparse nor dense"));
  }

  // OK while what the server holds, and `adding` bytes more, stay within its memory limit;
  // RESOURCE_EXHAUSTED saying what holds the memory otherwise. The sparse tables' resident bytes
  // are summed at most every 50 ms (each sum locks every table's shards).
  absl::Status CheckMemory(int64_t adding) ABSL_LOCKS_EXCLUDED(usage_mu_) {
    const int64_t limit = options_.memory_limit_bytes;
    if (limit <= 0) return absl::OkStatus();
    const int64_t pending = shard_.pending().bytes();
    // Never usage_mu_ and the shard's lock at once.
    const absl::Time now = absl::Now();
    bool stale = false;
    {
      absl::MutexLock lock(&usage_mu_);
      stale = now - usage_at_ > absl::Milliseconds(50);
    }
    if (stale) {
      const int64_t sparse = shard_.sparse_memory_bytes();
      absl::MutexLock lock(&usage_mu_);
      sparse_bytes_ = sparse;
      usage_at_ = now;
    }
    int64_t tables = dense_bytes_.load();
    {
      absl::MutexLock lock(&usage_mu_);
      tables += sparse_bytes_;
    }
    if (tables + pending + adding <= limit) return absl::OkStatus();
    auto mib = [](int64_t bytes) { return absl::StrFormat("%.1f MiB", bytes / 1048576.0); };
    return absl::ResourceExhaustedError(absl::StrCat(
        "the server's memory limit of ", mib(limit), " is reached (its tables hold ", mib(tables),
        ", pending updates ", mib(pending),
        adding > 0 ? absl::StrCat(", the call adds ", mib(adding)) : "",
        "): raise the limit, or give the sparse tables a memory budget to keep their cold rows on "
        "SSD"));
  }

  // The keys of a request, each checked to belong to this shard.
  absl::StatusOr<std::vector<uint64_t>> Keys(const std::string& bytes) {
    HETERPS_ASSIGN_OR_RETURN(size_t n, CountOf<uint64_t>(bytes, "keys"));
    std::vector<uint64_t> keys(n);
    HETERPS_RETURN_IF_ERROR(FromBytes<uint64_t>(bytes, absl::MakeSpan(keys), "keys"));
    for (uint64_t key : keys) {
      if (ServerOf(key, options_.num_shards) != options_.shard) {
        return absl::FailedPreconditionError(
            absl::StrCat("key ", key, " belongs on shard ", ServerOf(key, options_.num_shards),
                         ", not on shard ", options_.shard, " of ", options_.num_shards));
      }
    }
    return keys;
  }

  absl::StatusOr<SparseTable*> Sparse(int id) {
    SparseTable* table = shard_.sparse(id);
    if (table == nullptr) return absl::NotFoundError(absl::StrCat("no sparse table ", id));
    return table;
  }

  absl::StatusOr<DenseTable*> Dense(int id) {
    DenseTable* table = shard_.dense(id);
    if (table == nullptr) return absl::NotFoundError(absl::StrCat("no dense table ", id));
    return table;
  }

  static absl::Status CheckBlock(const DenseTable& table, int id, int block) {
    if (block < 0 || block >= table.num_blocks()) {
      return absl::InvalidArgumentError(absl::StrCat("dense table ", id, " has no block ", block,
                                                     " (it has ", table.num_blocks(), ")"));
    }
    return absl::OkStatus();
  }
  // The blocks one dense call names (`block`, then `more`), each checked, and each named once:
  // a call never asks for more than the table holds (a pull naming one block a million times
  // would otherwise make the server allocate a million copies of it). Where the call passes
  // `sizes`, each block must have its size: blocks whose sizes were swapped would otherwise
  // exchange their floats unnoticed, the total being right.
  static absl::StatusOr<std::vector<int>> BlocksOf(
      const DenseTable& table, int id, int block,
      const google::protobuf::RepeatedField<int32_t>& more,
      const google::protobuf::RepeatedField<int64_t>& sizes) {
    if (more.size() >= table.num_blocks()) {
      return absl::InvalidArgumentError(absl::StrCat("dense table ", id, ": a call names ",
                                                     more.size() + 1, " blocks, the table has ",
                                                     table.num_blocks()));
    }
    std::vector<int> blocks{block};
    blocks.insert(blocks.end(), more.begin(), more.end());
    std::vector<bool> named(table.num_blocks(), false);
    for (const int b : blocks) {
      HETERPS_RETURN_IF_ERROR(CheckBlock(table, id, b));
      if (named[b]) {
        return absl::InvalidArgumentError(
            absl::StrCat("dense table ", id, ": block ", b, " named twice in one call"));
      }
      named[b] = true;
    }
    if (sizes.empty()) return blocks;
    if (sizes.size() != static_cast<int>(blocks.size())) {
      return absl::InvalidArgumentError(absl::StrCat("dense table ", id, ": a call names ",
                                                     blocks.size(), " blocks and ", sizes.size(),
                                                     " sizes"));
    }
    for (size_t i = 0; i < blocks.size(); ++i) {
      if (sizes[i] != table.block_size(blocks[i])) {
        return absl::InvalidArgumentError(absl::StrCat("dense table ", id, " block ", blocks[i],
                                                       " has ", table.block_size(blocks[i]),
                                                       " floats, the call passed ", sizes[i]));
      }
    }
    return blocks;
  }
  // Calls f(block, its values) for each of `blocks`, whose values lie end to end from `data` (the
  // order a several-block call carries them in); stops at the first error.
  template <typename T, typename F>
  static absl::Status ForEachBlock(const DenseTable& table, const std::vector<int>& blocks, T* data,
                                   F f) {
    for (const int block : blocks) {
      const size_t n = table.block_size(block);
      HETERPS_RETURN_IF_ERROR(f(block, absl::Span<T>(data, n)));
      data += n;
    }
    return absl::OkStatus();
  }
  static size_t FloatsOf(const DenseTable& table, const std::vector<int>& blocks) {
    size_t floats = 0;
    for (const int b : blocks) floats += table.block_size(b);
    return floats;
  }

  // Each job's checkpoints apart: a job never prunes or loads another's.
  std::string CheckpointRoot() const { return CheckpointRootOf(options_.data_dir); }
  std::string CheckpointRootOf(const std::string& data_dir) const {
    return options_.job_id.empty() ? data_dir + "/checkpoints"
                                   : absl::StrCat(data_dir, "/checkpoints/", options_.job_id);
  }
  CheckpointId Id() const { return {options_.job_id, options_.shard, options_.num_shards}; }

  CheckpointTables Tables() const { return shard_.Tables(); }

  const PsServerOptions options_;
  // Data calls hold it shared; checkpoints and table creation hold it
  // exclusively, so that a checkpoint is a consistent snapshot of this shard.
  absl::Mutex snapshot_mu_;
  // This server's tables and the updates pending for them (ps/shard.h), and the configuration
  // each table was created with (a second CreateTable must name the same).
  Shard shard_;
  mutable absl::Mutex tables_mu_;
  std::map<int, SparseTableConfig> sparse_configs_ ABSL_GUARDED_BY(tables_mu_);
  std::map<int, DenseTableConfig> dense_configs_ ABSL_GUARDED_BY(tables_mu_);
  PushLog pushes_;
  std::atomic<int64_t> dense_bytes_{0};  // dense tables' values and state
  absl::Mutex usage_mu_;
  int64_t sparse_bytes_ ABSL_GUARDED_BY(usage_mu_) = 0;  // as last summed
  absl::Time usage_at_ ABSL_GUARDED_BY(usage_mu_) = absl::InfinitePast();
  std::atomic<int64_t> calls_{0}, duplicates_{0};
  base::CallStats call_stats_;
  heterps::rpc::TokenCheck auth_;
};

struct PsServer::Impl {
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  int port = 0;
  absl::Mutex mu;
  bool stopped ABSL_GUARDED_BY(mu) = false;
};

PsServer::PsServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PsServer::~PsServer() { Shutdown(absl::ZeroDuration()); }

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options) {
  if (options.num_shards < 1 || options.shard < 0 || options.shard >= options.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shard ", options.shard, " of ", options.num_shards, ": need 0 <= shard < shards"));
  }
  if (options.data_dir.empty()) return absl::InvalidArgumentError("data_dir is required");
  if (!options.job_id.empty()) HETERPS_RETURN_IF_ERROR(CheckJobId(options.job_id));
  if (options.token.empty() && !base::IsLoopbackHost(options.host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "refusing to serve on ", options.host, " without a token: give one, or bind to 127.0.0.1"));
  }
  if (options.env == nullptr) return absl::InvalidArgumentError("env is required");
  if (absl::Status made = options.env->CreateDirs(options.data_dir + "/tables"); !made.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot create data directory ", options.data_dir, ": ", made.message()));
  }

  auto impl = std::make_unique<Impl>();
  impl->service = std::make_unique<Service>(options);
  heterps::rpc::Endpoint endpoint;
  endpoint.host = options.host;
  endpoint.port = options.port;
  endpoint.tls_cert_pem = options.tls_cert_pem;
  endpoint.tls_key_pem = options.tls_key_pem;
  endpoint.max_message_bytes = options.max_message_bytes;
  HETERPS_ASSIGN_OR_RETURN(heterps::rpc::Server server,
                           heterps::rpc::StartServer(endpoint, {impl->service.get()}));
  impl->server = std::move(server.server);
  impl->port = server.port;
  impl->address = server.address;
  return std::unique_ptr<PsServer>(new PsServer(std::move(impl)));
}

int PsServer::port() const { return impl_->port; }

std::string PsServer::address() const { return impl_->address; }

int64_t DefaultMemoryLimitBytes() {
  return static_cast<int64_t>(0.9 * static_cast<double>(base::PhysicalMemoryBytes()));
}

PsServerCounters PsServer::counters() const { return impl_->service->counters(); }

ShardStats PsServer::stats() const { return impl_->service->Snapshot(); }

void PsServer::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->stopped) return;
    impl_->stopped = true;
  }
  impl_->server->Shutdown(absl::ToChronoTime(absl::Now() + grace));
  impl_->server->Wait();
}

}  // namespace heterps::ps::rpc
