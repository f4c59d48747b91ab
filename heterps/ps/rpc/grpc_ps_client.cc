// One class, GrpcPsClient: its calls share the tickets, the chunking of batches by server and
// message size, the retries and the push ids. Kept in one file (over 500 lines) so that the
// retry and chunking rules are read in one place.
#include "heterps/ps/rpc/grpc_ps_client.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <functional>
#include <random>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/thread_pool.h"
#include "heterps/ps/key_plan.h"
#include "heterps/ps/rpc/internal/convert.h"
#include "heterps/ps/rpc/ps.grpc.pb.h"
#include "heterps/rpc/rpc.h"

namespace heterps::ps::rpc {
namespace {

using internal::FromBytes;
using internal::ToBytes;

constexpr int kMessageSlackBytes = 4096;  // room for a message's other fields

// The RPCs of one ticket: done when none is pending; `finish` runs in Wait
// after success.
using Task = std::function<absl::Status()>;

// The RPCs of one ticket: done when none is pending; `finish` runs in Wait after success. Its
// tasks wait in `queued` for whichever comes first: a pool thread, or the thread that waits for
// the ticket (which runs them itself rather than sleep).
struct Call {
  absl::Mutex mu;
  std::deque<Task> queued ABSL_GUARDED_BY(mu);
  int pending ABSL_GUARDED_BY(mu) = 0;  // tasks queued or running
  absl::Status status ABSL_GUARDED_BY(mu);
  std::function<void()> finish;
  // Buffers the RPCs read from or write to, alive until Wait.
  KeyPlan plan;
  std::vector<std::vector<float>> rows;
  std::vector<RowBatch> batches;  // ExportRows and ImportRows: per server

  // Runs the next queued task, if any; false when none was left.
  bool RunOne() {
    Task task;
    {
      absl::MutexLock lock(&mu);
      if (queued.empty()) return false;
      task = std::move(queued.front());
      queued.pop_front();
    }
    absl::Status result = task();
    absl::MutexLock lock(&mu);
    if (!result.ok() && status.ok()) status = std::move(result);
    --pending;
    return true;
  }
};

// The floats per key of a batch: `floats` must be a positive whole number of
// rows of `keys`.
absl::StatusOr<int> RowFloats(absl::string_view op, size_t floats, size_t keys) {
  if (keys == 0 && floats == 0) return 0;
  if (keys == 0 || floats == 0 || floats % keys != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", floats, " floats are not whole rows for ", keys, " keys"));
  }
  return static_cast<int>(floats / keys);
}

}  // namespace

struct GrpcPsClient::Impl {
  GrpcPsClientOptions options;
  // Before the stubs: their channels count every message's bytes here.
  mutable base::CallStats call_stats;
  std::vector<std::unique_ptr<ParameterServer::Stub>> stubs;
  std::unique_ptr<base::ThreadPool> pool;
  uint64_t client_id = 0;
  std::atomic<int64_t> sequence{1};
  absl::Mutex mu;
  absl::flat_hash_map<Ticket, std::shared_ptr<Call>> calls ABSL_GUARDED_BY(mu);
  Ticket next ABSL_GUARDED_BY(mu) = 0;

  int num_servers() const { return static_cast<int>(stubs.size()); }

  void Prepare(grpc::ClientContext& context, absl::Duration timeout) const {
    heterps::rpc::PrepareCall(context, options.token, timeout);
  }

  std::string Where(int shard) const {
    return absl::StrCat("ps shard ", shard, " (", options.servers[shard], ")");
  }

  // Runs `rpc` against `shard`, retrying UNAVAILABLE; the error names the shard
  // and `what`. Each attempt is counted under the method, `what`'s first word.
  // `timeout` (not 0): each attempt's deadline instead of rpc_timeout, and one attempt only.
  absl::Status Rpc(int shard, absl::string_view what,
                   const std::function<grpc::Status(grpc::ClientContext&)>& rpc,
                   absl::Duration timeout = absl::ZeroDuration()) const {
    const absl::string_view method = what.substr(0, what.find(' '));
    absl::Duration backoff = options.initial_backoff;
    const int max_attempts = timeout > absl::ZeroDuration() ? 1 : options.max_attempts;
    grpc::Status status;
    int attempt = 1;
    for (;; ++attempt) {
      grpc::ClientContext context;
      Prepare(context, timeout > absl::ZeroDuration() ? timeout : options.rpc_timeout);
      const absl::Time start = absl::Now();
      status = rpc(context);
      call_stats.Record(method, status.ok(), absl::Now() - start);
      if (status.ok()) return absl::OkStatus();
      if (status.error_code() != grpc::StatusCode::UNAVAILABLE || attempt >= max_attempts) {
        break;
      }
      absl::SleepFor(backoff);
      backoff *= 2;
    }
    const auto code = static_cast<absl::StatusCode>(status.error_code());
    return absl::Status(
        code, absl::StrCat(Where(shard), ": ", what, ": ", absl::StatusCodeToString(code),
                           attempt > 1 ? absl::StrCat(" after ", attempt, " attempts") : "", ": ",
                           status.error_message()));
  }

  PushId NextPushId() {
    PushId id;
    id.set_client(client_id);
    id.set_sequence(sequence.fetch_add(1));
    return id;
  }

  // Registers `call` and runs `tasks` on the pool; a failed `precheck` fails
  // the ticket at once.
  Ticket Launch(std::shared_ptr<Call> call, std::vector<Task> tasks,
                absl::Status precheck = absl::OkStatus()) {
    Ticket ticket;
    {
      absl::MutexLock lock(&mu);
      ticket = next++;
      calls.emplace(ticket, call);
    }
    {
      absl::MutexLock lock(&call->mu);
      call->status = precheck;
      if (!precheck.ok()) return ticket;
      call->pending = static_cast<int>(tasks.size());
      for (Task& task : tasks) call->queued.push_back(std::move(task));
    }
    for (size_t i = 0; i < tasks.size(); ++i) pool->Schedule([call] { call->RunOne(); });
    return ticket;
  }

  absl::Status Wait(Ticket ticket) {
    std::shared_ptr<Call> call;
    {
      absl::MutexLock lock(&mu);
      auto it = calls.find(ticket);
      if (it == calls.end()) {
        return absl::NotFoundError(absl::StrCat("no pending ticket ", ticket));
      }
      call = std::move(it->second);
      calls.erase(it);
    }
    while (call->RunOne()) {
    }
    absl::Status status;
    {
      absl::MutexLock lock(&call->mu);
      call->mu.Await(absl::Condition(
          +[](Call* c) ABSL_EXCLUSIVE_LOCKS_REQUIRED(c->mu) { return c->pending == 0; },
          call.get()));
      status = call->status;
    }
    if (status.ok() && call->finish) call->finish();
    return status;
  }

  // Runs one task per shard (or those in `shards`) and waits for all of them.
  absl::Status OnShards(const std::vector<int>& shards, const std::function<absl::Status(int)>& f) {
    std::vector<Task> tasks;
    for (int s : shards) tasks.push_back([f, s] { return f(s); });
    return Wait(Launch(std::make_shared<Call>(), std::move(tasks)));
  }

  std::vector<int> AllShards() const {
    std::vector<int> shards(num_servers());
    for (int s = 0; s < num_servers(); ++s) shards[s] = s;
    return shards;
  }

  // Keys per sparse RPC for rows of `dim` floats.
  size_t ChunkKeys(int dim) const {
    const int64_t room = std::max(options.max_message_bytes - kMessageSlackBytes, 1024);
    return std::max<size_t>(1, room / (sizeof(uint64_t) + sizeof(float) * dim));
  }
  size_t ChunkFloats() const {
    return std::max<size_t>(256, (options.max_message_bytes - kMessageSlackBytes) / sizeof(float));
  }
};

GrpcPsClient::GrpcPsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrpcPsClient::~GrpcPsClient() = default;

void GrpcPsClientOptions::UseJobTls(const heterps::rpc::JobTls& tls) {
  const heterps::rpc::ChannelOptions channel = heterps::rpc::JobChannel(tls);
  tls_ca_pem = channel.tls_ca_pem;
  tls_target_name = channel.tls_target_name;
  tls_cert_pem = channel.tls_cert_pem;
  tls_key_pem = channel.tls_key_pem;
}

absl::StatusOr<std::unique_ptr<GrpcPsClient>> GrpcPsClient::Connect(
    const GrpcPsClientOptions& options) {
  if (options.servers.empty()) return absl::InvalidArgumentError("no parameter servers given");
  if (options.max_attempts < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_attempts ", options.max_attempts, " < 1"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::random_device random;
  while (impl->client_id == 0) {
    impl->client_id = (static_cast<uint64_t>(random()) << 32) ^ random();
  }
  heterps::rpc::ChannelOptions channel;
  channel.tls_ca_pem = options.tls_ca_pem;
  channel.tls_target_name = options.tls_target_name;
  channel.tls_cert_pem = options.tls_cert_pem;
  channel.tls_key_pem = options.tls_key_pem;
  channel.max_send_bytes = options.max_message_bytes;
  channel.bytes = &impl->call_stats;
  for (const std::string& server : options.servers) {
    impl->stubs.push_back(ParameterServer::NewStub(heterps::rpc::NewChannel(server, channel)));
  }
  impl->pool = std::make_unique<base::ThreadPool>(
      options.threads > 0 ? options.threads : std::max(4, 2 * impl->num_servers()));

  Impl* c = impl.get();
  HETERPS_RETURN_IF_ERROR(c->OnShards(c->AllShards(), [c](int s) -> absl::Status {
    grpc::ClientContext context;
    c->Prepare(context, c->options.connect_timeout);
    context.set_wait_for_ready(true);
    InfoReply reply;
    const grpc::Status status = c->stubs[s]->Info(&context, InfoRequest(), &reply);
    if (!status.ok()) {
      const auto code = static_cast<absl::StatusCode>(status.error_code());
      return absl::Status(
          code, absl::StrCat(c->Where(s), ": not reachable within ",
                             absl::FormatDuration(c->options.connect_timeout), ": ",
                             absl::StatusCodeToString(code), ": ", status.error_message()));
    }
    if (reply.shard() != s || reply.num_shards() != c->num_servers()) {
      return absl::FailedPreconditionError(absl::StrCat(
          c->Where(s), ": the server is shard ", reply.shard(), " of ", reply.num_shards(),
          ", but the client has it as shard ", s, " of ", c->num_servers()));
    }
    return absl::OkStatus();
  }));
  return std::unique_ptr<GrpcPsClient>(new GrpcPsClient(std::move(impl)));
}

int GrpcPsClient::num_servers() const { return impl_->num_servers(); }

absl::Status GrpcPsClient::CreateSparseTable(int table, const SparseTableOptions& options) {
  CreateTableRequest request;
  request.set_table(table);
  *request.mutable_sparse() = internal::ToProto(options);
  Impl* c = impl_.get();
  return c->OnShards(c->AllShards(), [c, &request, table](int s) {
    CreateTableReply reply;
    return c->Rpc(s, absl::StrCat("CreateTable sparse ", table), [&](grpc::ClientContext& ctx) {
      return c->stubs[s]->CreateTable(&ctx, request, &reply);
    });
  });
}

absl::Status GrpcPsClient::CreateDenseTable(int table, const DenseTableOptions& options) {
  CreateTableRequest request;
  request.set_table(table);
  *request.mutable_dense() = internal::ToProto(options);
  const int s = table % num_servers();
  CreateTableReply reply;
  return impl_->Rpc(s, absl::StrCat("CreateTable dense ", table), [&](grpc::ClientContext& ctx) {
    return impl_->stubs[s]->CreateTable(&ctx, request, &reply);
  });
}

Ticket GrpcPsClient::PullSparse(int table, absl::Span<const uint64_t> keys,
                                absl::Span<float> values) {
  auto call = std::make_shared<Call>();
  absl::StatusOr<int> row = RowFloats("pull", values.size(), keys.size());
  if (!row.ok() || keys.empty()) return impl_->Launch(call, {}, row.status());
  const int dim = *row;
  const int n = num_servers();
  call->plan = PlanKeys(keys, n);
  call->rows.resize(n);
  std::vector<Task> tasks;
  Impl* c = impl_.get();
  for (int s = 0; s < n; ++s) {
    const std::vector<uint64_t>& shard_keys = call->plan.keys[s];
    call->rows[s].resize(shard_keys.size() * dim);
    const size_t chunk = c->ChunkKeys(dim);
    for (size_t at = 0; at < shard_keys.size(); at += chunk) {
      const size_t count = std::min(chunk, shard_keys.size() - at);
      float* out = call->rows[s].data() + at * dim;
      Call* raw = call.get();
      tasks.push_back([c, raw, s, at, count, dim, out, table]() -> absl::Status {
        PullSparseRequest request;
        request.set_table(table);
        *request.mutable_keys() =
            ToBytes<uint64_t>(absl::MakeConstSpan(raw->plan.keys[s].data() + at, count));
        PullSparseReply reply;
        const std::string what = absl::StrCat("PullSparse table ", table);
        HETERPS_RETURN_IF_ERROR(c->Rpc(s, what, [&](grpc::ClientContext& ctx) {
          return c->stubs[s]->PullSparse(&ctx, request, &reply);
        }));
        const size_t expected = count * dim * sizeof(float);
        if (reply.values().size() != expected) {
          return absl::InvalidArgumentError(
              absl::StrCat(c->Where(s), ": ", what, ": the call passed ", dim,
                           " floats per key but the table's rows have ",
                           reply.values().size() / sizeof(float) / count));
        }
        std::memcpy(out, reply.values().data(), expected);
        return absl::OkStatus();
      });
    }
  }
  call->finish = [raw = call.get(), values, dim] {
    for (size_t i = 0; i < raw->plan.where.size(); ++i) {
      auto [s, j] = raw->plan.where[i];
      std::copy_n(raw->rows[s].begin() + static_cast<ptrdiff_t>(j) * dim, dim,
                  values.begin() + static_cast<ptrdiff_t>(i) * dim);
    }
  };
  return c->Launch(call, std::move(tasks));
}

namespace {

// Keys per ExportRows or ImportRows RPC: rows of up to 2,048 floats with Adam's state stay under
// 64 MB.
constexpr size_t kRowChunk = 2048;

// Sizes `out` for `n` rows of `dim` and `state` floats.
void SizeRows(size_t n, size_t dim, size_t state, RowBatch* out) {
  out->values.resize(n * dim);
  out->state.resize(n * state);
  out->steps.resize(n);
}

// Row `from` of `in` into row `to` of `out` (rows of `dim` and `state` floats).
void CopyRow(const RowBatch& in, size_t from, size_t dim, size_t state, RowBatch* out, size_t to) {
  std::copy_n(in.values.data() + from * dim, dim, out->values.data() + to * dim);
  std::copy_n(in.state.data() + from * state, state, out->state.data() + to * state);
  out->steps[to] = in.steps[from];
}

}  // namespace

Ticket GrpcPsClient::ExportRows(int table, absl::Span<const uint64_t> keys, RowBatch* out) {
  auto call = std::make_shared<Call>();
  const int n = num_servers();
  call->plan = PlanKeys(keys, n);
  // Chunk c of server s answers into batches[chunk index]; assembled in key order in finish.
  std::vector<std::pair<int, size_t>> chunks;  // (server, first key)
  for (int s = 0; s < n; ++s) {
    for (size_t at = 0; at < call->plan.keys[s].size(); at += kRowChunk) chunks.push_back({s, at});
  }
  call->batches.resize(chunks.size());
  std::vector<Task> tasks;
  Impl* c = impl_.get();
  Call* raw = call.get();
  for (size_t i = 0; i < chunks.size(); ++i) {
    const auto [s, at] = chunks[i];
    tasks.push_back([c, raw, s = s, at = at, i, table]() -> absl::Status {
      const std::vector<uint64_t>& shard_keys = raw->plan.keys[s];
      const size_t count = std::min(kRowChunk, shard_keys.size() - at);
      PullSparseRequest request;
      request.set_table(table);
      *request.mutable_keys() =
          ToBytes<uint64_t>(absl::MakeConstSpan(shard_keys.data() + at, count));
      RowsReply reply;
      const std::string what = absl::StrCat("ExportRows table ", table);
      HETERPS_RETURN_IF_ERROR(c->Rpc(s, what, [&](grpc::ClientContext& ctx) {
        return c->stubs[s]->ExportRows(&ctx, request, &reply);
      }));
      RowBatch& batch = raw->batches[i];
      if (reply.values().size() % (count * sizeof(float)) != 0 ||
          reply.state().size() % (count * sizeof(float)) != 0 ||
          reply.steps().size() != count * sizeof(int64_t)) {
        return absl::InternalError(absl::StrCat(c->Where(s), ": ", what, ": a malformed answer"));
      }
      batch.values.resize(reply.values().size() / sizeof(float));
      batch.state.resize(reply.state().size() / sizeof(float));
      batch.steps.resize(count);
      std::memcpy(batch.values.data(), reply.values().data(), reply.values().size());
      std::memcpy(batch.state.data(), reply.state().data(), reply.state().size());
      std::memcpy(batch.steps.data(), reply.steps().data(), reply.steps().size());
      return absl::OkStatus();
    });
  }
  call->finish = [raw, out, chunks, n] {
    // Every key's row in the caller's order, from the chunk that holds it: server s's rows
    // j = 0, 1, ... in chunks first[s], first[s] + 1, ... of kRowChunk rows.
    std::vector<size_t> first(n, chunks.size());
    size_t dim = 0, state = 0;
    for (size_t i = chunks.size(); i-- > 0;) {
      first[chunks[i].first] = i;
      const RowBatch& b = raw->batches[i];
      dim = b.values.size() / b.steps.size();
      state = b.state.size() / b.steps.size();
    }
    SizeRows(raw->plan.where.size(), dim, state, out);
    for (size_t p = 0; p < raw->plan.where.size(); ++p) {
      const auto [s, j] = raw->plan.where[p];
      CopyRow(raw->batches[first[s] + j / kRowChunk], j % kRowChunk, dim, state, out, p);
    }
  };
  return c->Launch(call, std::move(tasks));
}

Ticket GrpcPsClient::ImportRows(int table, absl::Span<const uint64_t> keys, const RowBatch& rows) {
  auto call = std::make_shared<Call>();
  Impl* c = impl_.get();
  if (keys.empty()) return c->Launch(call, {});
  if (rows.steps.size() != keys.size() || rows.values.size() % keys.size() != 0 ||
      rows.state.size() % keys.size() != 0) {
    return c->Launch(
        call, {},
        absl::InvalidArgumentError(absl::StrCat("import: rows do not fit ", keys.size(), " keys")));
  }
  const size_t dim = rows.values.size() / keys.size(), state = rows.state.size() / keys.size();
  const int n = num_servers();
  // The rows, regrouped by server.
  call->plan = PlanKeys(keys, n);
  call->batches.resize(n);
  for (int s = 0; s < n; ++s) SizeRows(call->plan.keys[s].size(), dim, state, &call->batches[s]);
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto [s, j] = call->plan.where[i];
    CopyRow(rows, i, dim, state, &call->batches[s], j);
  }
  std::vector<Task> tasks;
  Call* raw = call.get();
  for (int s = 0; s < n; ++s) {
    for (size_t at = 0; at < raw->plan.keys[s].size(); at += kRowChunk) {
      tasks.push_back([c, raw, s, at, dim, state, table]() -> absl::Status {
        const std::vector<uint64_t>& shard_keys = raw->plan.keys[s];
        const RowBatch& batch = raw->batches[s];
        const size_t count = std::min(kRowChunk, shard_keys.size() - at);
        ImportRowsRequest request;
        request.set_table(table);
        *request.mutable_keys() =
            ToBytes<uint64_t>(absl::MakeConstSpan(shard_keys.data() + at, count));
        *request.mutable_values() =
            ToBytes<float>(absl::MakeConstSpan(batch.values.data() + at * dim, count * dim));
        *request.mutable_state() =
            ToBytes<float>(absl::MakeConstSpan(batch.state.data() + at * state, count * state));
        *request.mutable_steps() =
            ToBytes<int64_t>(absl::MakeConstSpan(batch.steps.data() + at, count));
        PushReply reply;
        return c->Rpc(s, absl::StrCat("ImportRows table ", table), [&](grpc::ClientContext& ctx) {
          return c->stubs[s]->ImportRows(&ctx, request, &reply);
        });
      });
    }
  }
  return c->Launch(call, std::move(tasks));
}

Ticket GrpcPsClient::PushSparse(int table, absl::Span<const uint64_t> keys,
                                absl::Span<const float> grads) {
  return SendSparse(table, keys, grads, false, 0);
}

Ticket GrpcPsClient::AccumulateSparse(int table, absl::Span<const uint64_t> keys,
                                      absl::Span<const float> grads, int part) {
  return SendSparse(table, keys, grads, true, part);
}

Ticket GrpcPsClient::SendSparse(int table, absl::Span<const uint64_t> keys,
                                absl::Span<const float> grads, bool accumulate, int part) {
  auto call = std::make_shared<Call>();
  absl::StatusOr<int> row = RowFloats("push", grads.size(), keys.size());
  if (!row.ok() || keys.empty()) return impl_->Launch(call, {}, row.status());
  const int dim = *row;
  const int n = num_servers();
  call->plan = PlanKeys(keys, n);
  call->rows.resize(n);
  for (int s = 0; s < n; ++s) call->rows[s].assign(call->plan.keys[s].size() * dim, 0.0f);
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [s, j] = call->plan.where[i];
    float* sum = call->rows[s].data() + static_cast<size_t>(j) * dim;
    const float* g = grads.data() + i * dim;
    for (int d = 0; d < dim; ++d) sum[d] += g[d];
  }
  std::vector<Task> tasks;
  Impl* c = impl_.get();
  for (int s = 0; s < n; ++s) {
    const size_t chunk = c->ChunkKeys(dim);
    const size_t total = call->plan.keys[s].size();
    for (size_t at = 0; at < total; at += chunk) {
      const size_t count = std::min(chunk, total - at);
      auto request = std::make_shared<PushSparseRequest>();
      request->set_table(table);
      *request->mutable_keys() =
          ToBytes<uint64_t>(absl::MakeConstSpan(call->plan.keys[s].data() + at, count));
      *request->mutable_grads() =
          ToBytes<float>(absl::MakeConstSpan(call->rows[s].data() + at * dim, count * dim));
      *request->mutable_id() = c->NextPushId();
      request->set_accumulate(accumulate);
      request->set_part(part);
      tasks.push_back([c, s, request, table, accumulate] {
        PushReply reply;
        const char* what = accumulate ? "PushSparse (accumulated) table " : "PushSparse table ";
        return c->Rpc(s, absl::StrCat(what, table), [&](grpc::ClientContext& ctx) {
          return c->stubs[s]->PushSparse(&ctx, *request, &reply);
        });
      });
    }
  }
  return c->Launch(call, std::move(tasks));
}

Ticket GrpcPsClient::PullDense(int table, int block, absl::Span<float> values) {
  return PullDenseBlocks(table, {DensePull{block, values}})[0];
}

std::vector<Ticket> GrpcPsClient::PullDenseBlocks(int table, absl::Span<const DensePull> blocks) {
  Impl* c = impl_.get();
  if (blocks.empty()) return {};
  std::vector<int> ids;
  std::vector<absl::Span<float>> out;
  for (const DensePull& b : blocks) {
    ids.push_back(b.block);
    out.push_back(b.values);
  }
  const std::string what = absl::StrCat(
      "PullDense table ", table, ids.size() > 1 ? " blocks " : " block ", absl::StrJoin(ids, ","));
  const int s = table % num_servers();
  // The server checks each block's size against the one the call passes.
  PullDenseRequest request;
  request.set_table(table);
  request.set_block(ids[0]);
  for (size_t i = 1; i < ids.size(); ++i) request.add_more_blocks(ids[i]);
  for (const absl::Span<float>& o : out) request.add_sizes(static_cast<int64_t>(o.size()));
  Task task = [c, s, request, out, what]() -> absl::Status {
    size_t expected = 0;
    for (const absl::Span<float>& o : out) expected += o.size();
    size_t got = 0;
    HETERPS_RETURN_IF_ERROR(c->Rpc(s, what, [&](grpc::ClientContext& ctx) {
      got = 0;
      auto reader = c->stubs[s]->PullDense(&ctx, request);
      DenseChunk chunk;
      while (reader->Read(&chunk)) {
        // The blocks' floats arrive end to end: each chunk lands in the buffers it spans.
        const size_t floats = chunk.values().size() / sizeof(float);
        if (got + floats <= expected) {
          const char* from = chunk.values().data();
          size_t at = got, left = floats, start = 0;
          for (const absl::Span<float>& o : out) {
            if (left == 0) break;
            if (at < start + o.size()) {
              const size_t n = std::min(left, start + o.size() - at);
              std::memcpy(o.data() + (at - start), from, n * sizeof(float));
              from += n * sizeof(float);
              at += n;
              left -= n;
            }
            start += o.size();
          }
        }
        got += floats;
      }
      return reader->Finish();
    }));
    if (got != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          c->Where(s), ": ", what, ": the call passed ", expected, " floats, the ",
          out.size() > 1 ? "blocks have " : "block has ", got > expected ? "more" : "fewer"));
    }
    return absl::OkStatus();
  };
  return {c->Launch(std::make_shared<Call>(), {std::move(task)})};
}

Ticket GrpcPsClient::ExportDense(int table, int block, int64_t offset, int64_t count,
                                 DenseSlice* out) {
  Impl* c = impl_.get();
  const int s = table % num_servers();
  Task task = [c, s, table, block, offset, count, out]() -> absl::Status {
    DenseSliceRequest request;
    request.set_table(table);
    request.set_block(block);
    request.set_offset(offset);
    request.set_count(count);
    DenseSliceMessage reply;
    const std::string what = absl::StrCat("ExportDense table ", table, " block ", block);
    HETERPS_RETURN_IF_ERROR(c->Rpc(s, what, [&](grpc::ClientContext& ctx) {
      return c->stubs[s]->ExportDense(&ctx, request, &reply);
    }));
    if (reply.value().size() != static_cast<size_t>(count) * sizeof(float) ||
        reply.state().size() % sizeof(float) != 0 ||
        (count > 0 && reply.state().size() % (count * sizeof(float)) != 0)) {
      return absl::InternalError(absl::StrCat(c->Where(s), ": ", what, ": a malformed answer"));
    }
    out->value.resize(count);
    out->state.resize(reply.state().size() / sizeof(float));
    std::memcpy(out->value.data(), reply.value().data(), reply.value().size());
    std::memcpy(out->state.data(), reply.state().data(), reply.state().size());
    out->steps = reply.steps();
    return absl::OkStatus();
  };
  return c->Launch(std::make_shared<Call>(), {std::move(task)});
}

Ticket GrpcPsClient::ImportDense(int table, int block, int64_t offset, const DenseSlice& slice) {
  Impl* c = impl_.get();
  const int s = table % num_servers();
  Task task = [c, s, table, block, offset, &slice]() -> absl::Status {
    DenseSliceMessage request;
    request.set_table(table);
    request.set_block(block);
    request.set_offset(offset);
    request.set_value(ToBytes<float>(slice.value));
    request.set_state(ToBytes<float>(slice.state));
    request.set_steps(slice.steps);
    PushReply reply;
    return c->Rpc(
        s, absl::StrCat("ImportDense table ", table, " block ", block),
        [&](grpc::ClientContext& ctx) { return c->stubs[s]->ImportDense(&ctx, request, &reply); });
  };
  return c->Launch(std::make_shared<Call>(), {std::move(task)});
}

Ticket GrpcPsClient::PushDense(int table, int block, absl::Span<const float> grads) {
  return SendDense<float>(table, {block}, {grads}, false, 0);
}

std::vector<Ticket> GrpcPsClient::PushDenseBlocks(int table, absl::Span<const DensePush> blocks) {
  if (blocks.empty()) return {};
  std::vector<int> ids;
  std::vector<absl::Span<const float>> grads;
  for (const DensePush& b : blocks) {
    ids.push_back(b.block);
    grads.push_back(b.grads);
  }
  return {SendDense<float>(table, ids, grads, false, 0)};
}

Ticket GrpcPsClient::AccumulateDense(int table, int block, absl::Span<const double> grads,
                                     int part) {
  return SendDense<double>(table, {block}, {grads}, true, part);
}

absl::Status GrpcPsClient::Commit() {
  Impl* c = impl_.get();
  return c->OnShards(c->AllShards(), [c](int s) {
    CommitReply reply;
    return c->Rpc(s, "Commit", [&](grpc::ClientContext& ctx) {
      return c->stubs[s]->Commit(&ctx, CommitRequest(), &reply);
    });
  });
}

template <typename T>
Ticket GrpcPsClient::SendDense(int table, absl::Span<const int> blocks,
                               absl::Span<const absl::Span<const T>> grads, bool accumulate,
                               int part) {
  Impl* c = impl_.get();
  const std::string what =
      absl::StrCat(accumulate ? "PushDense (accumulated) table " : "PushDense table ", table,
                   blocks.size() > 1 ? " blocks " : " block ", absl::StrJoin(blocks, ","));
  const int s = table % num_servers();
  PushDenseChunk first;  // names the table, the blocks, their sizes and the push
  first.set_table(table);
  first.set_block(blocks[0]);
  for (size_t i = 1; i < blocks.size(); ++i) first.add_more_blocks(blocks[i]);
  for (const absl::Span<const T>& g : grads) first.add_sizes(static_cast<int64_t>(g.size()));
  *first.mutable_id() = c->NextPushId();
  first.set_accumulate(accumulate);
  first.set_part(part);
  std::vector<absl::Span<const T>> parts(grads.begin(), grads.end());
  Task task = [c, s, first, parts, what]() -> absl::Status {
    return c->Rpc(s, what, [&](grpc::ClientContext& ctx) {
      PushReply reply;
      auto writer = c->stubs[s]->PushDense(&ctx, &reply);
      const size_t chunk = c->ChunkFloats() * sizeof(float) / sizeof(T);
      // The blocks' gradients end to end, cut into messages of `chunk` values; one message at
      // least, the first.
      PushDenseChunk message = first;
      size_t room = chunk;
      bool ok = true;
      for (const absl::Span<const T>& g : parts) {
        for (size_t at = 0; ok && at < g.size();) {
          const size_t n = std::min(room, g.size() - at);
          message.mutable_grads()->append(reinterpret_cast<const char*>(g.data() + at),
                                          n * sizeof(T));
          at += n;
          room -= n;
          if (room == 0) {
            ok = writer->Write(message);
            message.Clear();
            room = chunk;
          }
        }
      }
      if (ok && (room < chunk || message.has_id())) writer->Write(message);
      writer->WritesDone();
      return writer->Finish();
    });
  };
  return c->Launch(std::make_shared<Call>(), {std::move(task)});
}

absl::Status GrpcPsClient::Wait(Ticket ticket) { return impl_->Wait(ticket); }

absl::Status GrpcPsClient::SaveCheckpoint(int64_t step) {
  Impl* c = impl_.get();
  SaveCheckpointRequest request;
  request.set_step(step);
  std::vector<absl::Status> results(num_servers());
  c->OnShards(c->AllShards(), [&](int s) {
     SaveCheckpointReply reply;
     results[s] = c->Rpc(s, absl::StrCat("SaveCheckpoint ", step), [&](grpc::ClientContext& ctx) {
       return c->stubs[s]->SaveCheckpoint(&ctx, request, &reply);
     });
     return absl::OkStatus();
   }).IgnoreError();
  std::string errors;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (const absl::Status& r : results) {
    if (r.ok()) continue;
    if (code == absl::StatusCode::kOk) code = r.code();
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", r.message());
  }
  return code == absl::StatusCode::kOk ? absl::OkStatus() : absl::Status(code, errors);
}

absl::StatusOr<int64_t> GrpcPsClient::LoadCheckpoint(std::optional<int64_t> step, int from_shards) {
  Impl* c = impl_.get();
  std::vector<int64_t> steps(num_servers(), -1);
  LoadCheckpointRequest request;
  if (step.has_value()) request.set_step(*step);
  request.set_from_shards(from_shards);
  HETERPS_RETURN_IF_ERROR(c->OnShards(c->AllShards(), [&](int s) {
    LoadCheckpointReply reply;
    absl::Status status = c->Rpc(s, "LoadCheckpoint", [&](grpc::ClientContext& ctx) {
      return c->stubs[s]->LoadCheckpoint(&ctx, request, &reply);
    });
    steps[s] = reply.step();
    return status;
  }));
  for (int s = 1; s < num_servers(); ++s) {
    if (steps[s] != steps[0]) {
      return absl::DataLossError(
          absl::StrCat("shards disagree on the latest checkpoint: ", c->Where(0), " has step ",
                       steps[0], ", ", c->Where(s), " has step ", steps[s]));
    }
  }
  return steps[0];
}

absl::StatusOr<uint64_t> GrpcPsClient::Digest() {
  Impl* c = impl_.get();
  std::vector<uint64_t> digests(num_servers(), 0);
  HETERPS_RETURN_IF_ERROR(c->OnShards(c->AllShards(), [&](int s) -> absl::Status {
    DigestReply reply;
    HETERPS_RETURN_IF_ERROR(c->Rpc(s, "Digest", [&](grpc::ClientContext& ctx) {
      return c->stubs[s]->Digest(&ctx, DigestRequest(), &reply);
    }));
    digests[s] = reply.digest();
    return absl::OkStatus();
  }));
  uint64_t sum = 0;
  for (uint64_t d : digests) sum += d;
  return sum;
}

absl::StatusOr<std::vector<ShardStats>> GrpcPsClient::Stats(absl::Duration timeout) {
  Impl* c = impl_.get();
  std::vector<ShardStats> stats(num_servers());
  HETERPS_RETURN_IF_ERROR(c->OnShards(c->AllShards(), [&](int s) -> absl::Status {
    StatsReply reply;
    HETERPS_RETURN_IF_ERROR(c->Rpc(
        s, "Stats",
        [&](grpc::ClientContext& ctx) { return c->stubs[s]->Stats(&ctx, StatsRequest(), &reply); },
        timeout));
    ShardStats& out = stats[s];
    out.shard = reply.shard();
    for (const SparseStats& t : reply.sparse()) {
      SparseTableStats table;
      table.memory_rows = t.memory_rows();
      table.memory_bytes = t.memory_bytes();
      table.cold_rows = t.cold_rows();
      table.created = t.created();
      table.hits = t.hits();
      table.misses = t.misses();
      table.spills = t.spills();
      out.sparse.emplace_back(t.table(), table);
      out.memory_budget_bytes.push_back(t.memory_budget_bytes());
    }
    out.dense_tables.assign(reply.dense_tables().begin(), reply.dense_tables().end());
    out.calls = reply.calls();
    out.refused = reply.refused();
    out.duplicate_pushes = reply.duplicate_pushes();
    out.rpcs = heterps::rpc::FromProto(reply.rpcs());
    return absl::OkStatus();
  }));
  return stats;
}

std::vector<base::MethodStats> GrpcPsClient::CallStats() const {
  return impl_->call_stats.Snapshot();
}

absl::Status GrpcPsClient::TrackDeltas() {
  Impl* c = impl_.get();
  return c->OnShards(c->AllShards(), [c](int s) {
    PushReply reply;
    return c->Rpc(s, "TrackDeltas", [&](grpc::ClientContext& ctx) {
      return c->stubs[s]->TrackDeltas(&ctx, TrackDeltasRequest(), &reply);
    });
  });
}

namespace {

// A server's answer to ExportDeltas, checked: whole rows of `dim` floats for its keys (dense:
// none, or the block's `dim` floats).
absl::Status TakeDeltas(const DeltasMessage& reply, int dim, std::vector<uint64_t>* keys,
                        std::vector<float>* deltas) {
  const size_t n = reply.keys().size() / sizeof(uint64_t),
               floats = reply.deltas().size() / sizeof(float);
  if (reply.keys().size() % sizeof(uint64_t) != 0 || reply.deltas().size() % sizeof(float) != 0 ||
      (keys != nullptr ? floats != n * dim : floats != 0 && floats != static_cast<size_t>(dim))) {
    return absl::InternalError("a malformed answer");
  }
  if (keys != nullptr) {
    const size_t at = keys->size();
    keys->resize(at + n);
    std::memcpy(keys->data() + at, reply.keys().data(), reply.keys().size());
  }
  const size_t at = deltas->size();
  deltas->resize(at + floats);
  std::memcpy(deltas->data() + at, reply.deltas().data(), reply.deltas().size());
  return absl::OkStatus();
}

}  // namespace

absl::Status GrpcPsClient::ExportDeltas(int table, float threshold, std::vector<uint64_t>* keys,
                                        std::vector<float>* deltas) {
  return ExportChanges(table, threshold, /*window=*/false, keys, deltas);
}

absl::Status GrpcPsClient::ExportWindow(int table, float threshold, std::vector<uint64_t>* keys,
                                        std::vector<float>* deltas) {
  return ExportChanges(table, threshold, /*window=*/true, keys, deltas);
}

absl::Status GrpcPsClient::ExportChanges(int table, float threshold, bool window,
                                         std::vector<uint64_t>* keys,
                                         std::vector<float>* deltas) {
  Impl* c = impl_.get();
  std::vector<DeltasMessage> replies(num_servers());
  HETERPS_RETURN_IF_ERROR(c->OnShards(c->AllShards(), [&](int s) {
    ExportDeltasRequest request;
    request.set_table(table);
    request.set_threshold(threshold);
    request.set_window(window);
    // Once: a retried export would find its rows sent. A window's moves nothing: retried.
    return c->Rpc(
        s, absl::StrCat("ExportDeltas table ", table),
        [&](grpc::ClientContext& ctx) {
          return c->stubs[s]->ExportDeltas(&ctx, request, &replies[s]);
        },
        window ? absl::ZeroDuration() : c->options.rpc_timeout);
  }));
  // The rows' floats: every server's tables have the same dim.
  size_t rows = 0, floats = 0;
  for (const DeltasMessage& r : replies) {
    rows += r.keys().size() / sizeof(uint64_t);
    floats += r.deltas().size() / sizeof(float);
  }
  const int dim = rows == 0 ? 0 : static_cast<int>(floats / rows);
  for (int s = 0; s < num_servers(); ++s) {
    const absl::Status taken = TakeDeltas(replies[s], dim, keys, deltas);
    if (!taken.ok()) {
      return absl::InternalError(
          absl::StrCat(c->Where(s), ": ExportDeltas table ", table, ": ", taken.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status GrpcPsClient::AddDeltas(int table, absl::Span<const uint64_t> keys,
                                     absl::Span<const float> deltas) {
  return SendDeltas(table, keys, deltas, nullptr);
}

absl::Status GrpcPsClient::ApplyWindow(int table, absl::Span<const uint64_t> keys,
                                       absl::Span<const float> merged,
                                       absl::Span<const float> own) {
  if (own.size() != merged.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("apply window: ", own.size(), " floats sent for a merge of ", merged.size()));
  }
  return SendDeltas(table, keys, merged, &own);
}

absl::Status GrpcPsClient::SendDeltas(int table, absl::Span<const uint64_t> keys,
                                      absl::Span<const float> deltas,
                                      const absl::Span<const float>* own) {
  Impl* c = impl_.get();
  HETERPS_ASSIGN_OR_RETURN(const int dim, RowFloats("add deltas", deltas.size(), keys.size()));
  if (keys.empty()) return absl::OkStatus();
  const std::vector<ServerRows> split = SplitRows(keys, deltas, dim, num_servers());
  const std::vector<ServerRows> sent =
      own != nullptr ? SplitRows(keys, *own, dim, num_servers()) : std::vector<ServerRows>();
  std::vector<int> shards;
  for (int s = 0; s < num_servers(); ++s) {
    if (!split[s].keys.empty()) shards.push_back(s);
  }
  // In messages of at most ChunkKeys rows, each added once.
  const size_t chunk = c->ChunkKeys(dim);
  return c->OnShards(shards, [&](int s) -> absl::Status {
    const ServerRows& rows = split[s];
    for (size_t at = 0; at < rows.keys.size(); at += chunk) {
      const size_t count = std::min(chunk, rows.keys.size() - at);
      DeltasMessage request;
      request.set_table(table);
      request.set_keys(ToBytes<uint64_t>(absl::MakeConstSpan(rows.keys.data() + at, count)));
      request.set_deltas(
          ToBytes<float>(absl::MakeConstSpan(rows.rows.data() + at * dim, count * dim)));
      if (own != nullptr) {
        request.set_window(true);
        request.set_own(
            ToBytes<float>(absl::MakeConstSpan(sent[s].rows.data() + at * dim, count * dim)));
      }
      *request.mutable_id() = c->NextPushId();
      PushReply reply;
      HETERPS_RETURN_IF_ERROR(c->Rpc(
          s, absl::StrCat("AddDeltas table ", table),
          [&](grpc::ClientContext& ctx) { return c->stubs[s]->AddDeltas(&ctx, request, &reply); }));
    }
    return absl::OkStatus();
  });
}

absl::Status GrpcPsClient::ExportDenseDeltas(int table, int block, float threshold,
                                             std::vector<float>* delta) {
  return ExportDenseChanges(table, block, threshold, /*window=*/false, delta);
}

absl::Status GrpcPsClient::ExportDenseWindow(int table, int block, float threshold,
                                             std::vector<float>* delta) {
  return ExportDenseChanges(table, block, threshold, /*window=*/true, delta);
}

absl::Status GrpcPsClient::ExportDenseChanges(int table, int block, float threshold, bool window,
                                              std::vector<float>* delta) {
  Impl* c = impl_.get();
  const int s = table % num_servers();
  ExportDeltasRequest request;
  request.set_table(table);
  request.set_threshold(threshold);
  request.set_dense(true);
  request.set_block(block);
  request.set_window(window);
  DeltasMessage reply;
  const std::string what = absl::StrCat("ExportDeltas table ", table, " block ", block);
  HETERPS_RETURN_IF_ERROR(c->Rpc(
      s, what,
      [&](grpc::ClientContext& ctx) { return c->stubs[s]->ExportDeltas(&ctx, request, &reply); },
      window ? absl::ZeroDuration() : c->options.rpc_timeout));
  delta->clear();
  const size_t floats = reply.deltas().size() / sizeof(float);
  const absl::Status taken = TakeDeltas(reply, static_cast<int>(floats), nullptr, delta);
  if (!taken.ok())
    return absl::InternalError(absl::StrCat(c->Where(s), ": ", what, ": ", taken.message()));
  return absl::OkStatus();
}

absl::Status GrpcPsClient::AddDenseDeltas(int table, int block, absl::Span<const float> delta) {
  return SendDenseDeltas(table, block, delta, nullptr);
}

absl::Status GrpcPsClient::ApplyDenseWindow(int table, int block, absl::Span<const float> merged,
                                            absl::Span<const float> own) {
  return SendDenseDeltas(table, block, merged, &own);
}

absl::Status GrpcPsClient::SendDenseDeltas(int table, int block, absl::Span<const float> delta,
                                           const absl::Span<const float>* own) {
  Impl* c = impl_.get();
  const int s = table % num_servers();
  DeltasMessage request;
  request.set_table(table);
  request.set_dense(true);
  request.set_block(block);
  request.set_deltas(ToBytes<float>(delta));
  if (own != nullptr) {
    request.set_window(true);
    request.set_own(ToBytes<float>(*own));
  }
  *request.mutable_id() = c->NextPushId();
  PushReply reply;
  return c->Rpc(
      s, absl::StrCat("AddDeltas table ", table, " block ", block),
      [&](grpc::ClientContext& ctx) { return c->stubs[s]->AddDeltas(&ctx, request, &reply); });
}

absl::Status GrpcPsClient::ExportPending(PendingParts* out) {
  Impl* c = impl_.get();
  std::vector<PendingMessage> replies(num_servers());
  HETERPS_RETURN_IF_ERROR(c->OnShards(c->AllShards(), [&](int s) {
    return c->Rpc(s, "ExportPending", [&](grpc::ClientContext& ctx) {
      return c->stubs[s]->ExportPending(&ctx, ExportPendingRequest(), &replies[s]);
    });
  }));
  for (int s = 0; s < num_servers(); ++s) {
    PendingParts parts;
    for (const PendingMessage::Sparse& p : replies[s].sparse()) {
      PendingParts::Sparse& to = parts.sparse.emplace_back();
      to.table = p.table();
      to.part = p.part();
      to.keys.resize(p.keys().size() / sizeof(uint64_t));
      to.grads.resize(p.grads().size() / sizeof(float));
      HETERPS_RETURN_IF_ERROR(
          FromBytes<uint64_t>(p.keys(), absl::MakeSpan(to.keys), "pending keys"));
      HETERPS_RETURN_IF_ERROR(
          FromBytes<float>(p.grads(), absl::MakeSpan(to.grads), "pending gradients"));
    }
    for (const PendingMessage::Dense& p : replies[s].dense()) {
      PendingParts::Dense& to = parts.dense.emplace_back();
      to.table = p.table();
      to.block = p.block();
      to.part = p.part();
      to.grads.resize(p.grads().size() / sizeof(double));
      HETERPS_RETURN_IF_ERROR(
          FromBytes<double>(p.grads(), absl::MakeSpan(to.grads), "pending dense gradients"));
    }
    MergePendingParts(std::move(parts), out);
  }
  return absl::OkStatus();
}

}  // namespace heterps::ps::rpc
