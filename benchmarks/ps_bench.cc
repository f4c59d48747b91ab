// The parameter server's speed and memory against limits this benchmark
// measures on the same machine, in the same run (docs/benchmarks.md, "Parameter
// server").
//
//   build/benchmarks/ps_bench [--rows N] [--dim D] [--threads T] [--seconds S]
//                             [--tier-rows N] [--markdown FILE] [--only PART]
//
// 1. The machine's raw random-row gather rate: T threads copying random rows of
// D floats out of
//    a plain N x D float array, 4096 rows per batch.
// 2. In process: a table of N rows (Adagrad), filled first; then T threads
// pull, and then push,
//    batches of 4096 uniformly random keys through InProcessPsClient. Target:
//    >= 50% of (1). Memory per resident row (process RSS growth while filling,
//    over N) against the bytes of key, value and optimizer state. Target:
//    <= 1.25x.
// 3. Through gRPC on loopback: the same with 2 PsServer shards (in this
// process, port 0) and a
//    GrpcPsClient. Target: >= 25% of (2). Then the same messages (half a batch's keys per server
//    from each client thread, rows of D floats back for a pull) to 2 servers of the same protocol
//    and gRPC settings that only answer: the transport's limit. Target: >= 0.8 of it. And the
//    same messages over plain ZeroMQ (zmq_echo.h: the transport ps-lite uses), for comparison.
// 4. The SSD tier: a table of --tier-rows rows whose memory budget is a quarter
// of its size,
//    spilling to RocksDB in a temporary directory, under batches that draw 90%
//    of their keys from a hot 10% of the rows; throughput against the same
//    table all in memory, and the largest resident bytes seen against the
//    budget. Target: within 10% of the budget.
// 5. The SSD tier's misses against RocksDB alone: a table of --tier-rows rows, a quarter of them in
//    memory, pulled in batches of uniformly random keys (about three in four miss); misses per
//    second against RocksDB's own API doing the same to a database opened with the tier's
//    options, holding as many rows of the same size: per batch, as many rows read with one
//    MultiGet and as many others written back (the spills) in one write batch, as the tier does
//    (it deletes nothing: a row brought back keeps its copy in the store until its next spill).
//    Target: >= 0.7.
// 6. The client's key plan (ps::PlanKeys: a batch's distinct keys per server and where each
//    position finds its key, the first thing every pull and push does) against the same plan
//    made with an absl::flat_hash_map, as the client made it before, in the same run: one
//    thread, batches of 4096 uniform keys and of 53,248 keys drawn as dlrm-small's 26 slots of
//    2048 samples draw them (skewed), one server.
//
// Prints a table; with --markdown (default docs/benchmarks.md) also replaces
// the ps-bench section.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "benchmarks/bench_cli.h"
#include "benchmarks/machine_limits.h"
#include "benchmarks/markdown_section.h"
#include "benchmarks/zmq_echo.h"
#include "heterps/base/host.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/ps/key_plan.h"
#include "heterps/ps/ps_client.h"
#include "heterps/ps/rocksdb_store.h"
#include "heterps/ps/rpc/grpc_ps_client.h"
#include "heterps/ps/rpc/ps.grpc.pb.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/rpc/rpc.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"

namespace heterps::benchmarks {
namespace {

constexpr int kBatch = kRateBatch;

struct Flags {
  int64_t rows = 10'000'000;
  int dim = 16;
  int threads = 2;
  double seconds = 3;
  int64_t tier_rows = 2'000'000;
  std::string markdown = "docs/benchmarks.md";
  std::string only;  // run only this part (gather, in-process, grpc, tier, misses, plan)
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  ParseFlagPairs("ps_bench", argc, argv, [&f](const std::string& flag, const char* value) {
    if (flag == "--rows") {
      f.rows = std::atoll(value);
    } else if (flag == "--dim") {
      f.dim = std::atoi(value);
    } else if (flag == "--threads") {
      f.threads = std::atoi(value);
    } else if (flag == "--seconds") {
      f.seconds = std::atof(value);
    } else if (flag == "--tier-rows") {
      f.tier_rows = std::atoll(value);
    } else if (flag == "--only") {
      f.only = value;
    } else if (flag == "--markdown") {
      f.markdown = value;
    } else {
      return false;
    }
    return true;
  });
  if (f.rows < kBatch || f.dim < 1 || f.threads < 1 || f.seconds <= 0 || f.tier_rows < kBatch) {
    std::fprintf(stderr, "ps_bench: bad flags\n");
    std::exit(2);
  }
  return f;
}

void Check(const absl::Status& status, const char* what) { CheckOk("ps_bench", status, what); }

// Pull and push rates (keys/s) of `client` on table 0 with keys from `draw`.
std::pair<double, double> PullPushRates(ps::PsClient& client, const Flags& f,
                                        const std::function<uint64_t(uint64_t&)>& draw) {
  std::vector<std::vector<float>> buffers(f.threads, std::vector<float>(kBatch * f.dim));
  const double pull = Rate(f.threads, f.seconds, draw, [&](int t, const auto& keys) {
    Check(client.Wait(client.PullSparse(0, keys, absl::MakeSpan(buffers[t]))), "pull");
  });
  std::vector<float> grads(kBatch * f.dim, 1e-3f);
  const double push = Rate(f.threads, f.seconds, draw, [&](int t, const auto& keys) {
    Check(client.Wait(client.PushSparse(0, keys, grads)), "push");
  });
  return {pull, push};
}

// Creates rows 0..rows-1 of table 0 by pulling them.
void Fill(ps::PsClient& client, int64_t rows, int dim) {
  std::vector<uint64_t> keys(kBatch);
  std::vector<float> values(kBatch * dim);
  for (int64_t at = 0; at < rows; at += kBatch) {
    const int64_t n = std::min<int64_t>(kBatch, rows - at);
    keys.resize(n);
    values.resize(n * dim);
    for (int64_t i = 0; i < n; ++i) keys[i] = static_cast<uint64_t>(at + i);
    Check(client.Wait(client.PullSparse(0, keys, absl::MakeSpan(values))), "fill");
  }
}

// The key plan as the client made it with absl's hash map: the second implementation part 5
// measures ps::PlanKeys against.
ps::KeyPlan MapPlanKeys(absl::Span<const uint64_t> keys, int num_servers) {
  ps::KeyPlan plan;
  plan.keys.resize(num_servers);
  plan.where.reserve(keys.size());
  absl::flat_hash_map<uint64_t, std::pair<int, int>> seen;
  seen.reserve(keys.size());
  for (uint64_t key : keys) {
    auto [it, fresh] = seen.try_emplace(key);
    if (fresh) {
      const int server = ps::ServerOf(key, num_servers);
      it->second = {server, static_cast<int>(plan.keys[server].size())};
      plan.keys[server].push_back(key);
    }
    plan.where.push_back(it->second);
  }
  return plan;
}

// Keys planned per second by `plan` over `batches` (the best of 5 passes), and checks that it
// plans as MapPlanKeys does.
double PlanRate(const std::vector<std::vector<uint64_t>>& batches,
                ps::KeyPlan (*plan)(absl::Span<const uint64_t>, int)) {
  double best = 0;
  for (int pass = 0; pass < 5; ++pass) {
    size_t keys = 0;
    const absl::Time start = absl::Now();
    for (const std::vector<uint64_t>& batch : batches) keys += plan(batch, 1).where.size();
    best = std::max(best, keys / absl::ToDoubleSeconds(absl::Now() - start));
  }
  for (const std::vector<uint64_t>& batch : batches) {
    const ps::KeyPlan a = plan(batch, 1), b = MapPlanKeys(batch, 1);
    if (a.keys != b.keys || a.where != b.where) {
      std::fprintf(stderr, "ps_bench: the key plans differ\n");
      std::exit(1);
    }
  }
  return best;
}

void Check(const rocksdb::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "ps_bench: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

std::string KeyBytes(uint64_t key) {  // big-endian, as the tier stores keys
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i, key >>= 8) out[i] = static_cast<char>(key & 0xff);
  return out;
}

// RocksDB alone doing what the tier's misses do to it, as cheaply as its API allows: a database
// opened with the tier's options (ps::SetColdStoreOptions) in `dir` holds `stored` of `rows` keys
// with values of `value_bytes` (the cold rows); per batch, each of f.threads threads reads `misses`
// cold keys with one MultiGet (sorted) and, in one write batch, writes as many resident keys (the
// rows a full memory spills: already stored where the tier has read them before, as it keeps a
// row's copy, or new), and the two sets swap those keys.
class RocksDbMisses {
 public:
  // Opens and fills the database, and waits for its flushes and compactions.
  RocksDbMisses(const Flags& f, int64_t rows, int64_t stored, size_t value_bytes, int misses,
                std::string dir)
      : f_(f), misses_(misses), value_bytes_(value_bytes), dir_(std::move(dir)) {
    rocksdb::Options options;
    ps::SetColdStoreOptions(&options);
    Check(rocksdb::DestroyDB(dir_, options), "rocksdb destroy");
    rocksdb::DB* raw = nullptr;
    Check(rocksdb::DB::Open(options, dir_, &raw), "rocksdb open");
    db_.reset(raw);
    write_.disableWAL = true;
    const std::string value(value_bytes, '\x5a');
    for (int64_t at = 0; at < stored; at += kBatch) {
      rocksdb::WriteBatch batch;
      for (int64_t k = at; k < std::min(stored, at + kBatch); ++k) {
        Check(batch.Put(KeyBytes(static_cast<uint64_t>(k)), value), "rocksdb fill");
      }
      Check(db_->Write(write_, &batch), "rocksdb fill");
    }
    // Thread t owns the keys k with k % threads == t: the cold ones (stored), and the resident.
    owned_.resize(f.threads);
    for (int64_t k = 0; k < rows; ++k) {
      Keys& keys = owned_[k % f.threads];
      keys.state = 7919 * static_cast<uint64_t>(k % f.threads) + 1;
      (k < stored ? keys.cold : keys.resident).push_back(static_cast<uint64_t>(k));
    }
    for (const Keys& keys : owned_) {
      if (keys.cold.size() < static_cast<size_t>(misses) ||
          keys.resident.size() < static_cast<size_t>(misses)) {
        std::fprintf(stderr, "ps_bench: too few rows for the RocksDB reference\n");
        std::exit(1);
      }
    }
  }
  ~RocksDbMisses() {
    db_.reset();
    std::filesystem::remove_all(dir_);
  }

  rocksdb::DB* db() const { return db_.get(); }

  // Keys read per second over `seconds`.
  double Run(double seconds) {
    const std::string value(value_bytes_, '\x5a');
    const int misses = misses_;
    const double batches =
        Rate(
            f_.threads, seconds, [](uint64_t& s) { return s; },
            [&](int t, const std::vector<uint64_t>&) {
              Keys& keys = owned_[t];
              // `misses` cold keys and as many resident ones, each chosen at random and moved to
              // the end of its list (a partial Fisher-Yates shuffle), then swapped between the
              // lists.
              const auto pick = [&](std::vector<uint64_t>& from) {
                for (int i = 0; i < misses; ++i) {
                  const size_t last = from.size() - 1 - i;
                  std::swap(from[SplitMix(keys.state) % (last + 1)], from[last]);
                }
              };
              pick(keys.cold);
              pick(keys.resident);
              std::vector<uint64_t> read(keys.cold.end() - misses, keys.cold.end());
              std::vector<uint64_t> written(keys.resident.end() - misses, keys.resident.end());
              std::sort(read.begin(), read.end());
              std::sort(written.begin(), written.end());
              std::vector<std::string> key_bytes(misses);
              std::vector<rocksdb::Slice> slices(misses);
              for (int i = 0; i < misses; ++i) {
                key_bytes[i] = KeyBytes(read[i]);
                slices[i] = key_bytes[i];
              }
              std::vector<rocksdb::PinnableSlice> values(misses);
              std::vector<rocksdb::Status> statuses(misses);
              db_->MultiGet(rocksdb::ReadOptions(), db_->DefaultColumnFamily(), misses,
                            slices.data(), values.data(), statuses.data(), /*sorted_input=*/true);
              rocksdb::WriteBatch batch;
              for (int i = 0; i < misses; ++i) {
                Check(statuses[i], "rocksdb multiget");
                if (values[i].size() != value_bytes_) {
                  Check(rocksdb::Status::Corruption(), "value");
                }
              }
              for (uint64_t k : written) Check(batch.Put(KeyBytes(k), value), "rocksdb put");
              Check(db_->Write(write_, &batch), "rocksdb write");
              std::swap_ranges(keys.cold.end() - misses, keys.cold.end(),
                               keys.resident.end() - misses);
            }) /
        kBatch;
    return batches * misses;
  }

 private:
  struct Keys {
    std::vector<uint64_t> cold, resident;  // as the tier would hold them
    uint64_t state;  // the thread's random stream
  };
  const Flags& f_;
  const int misses_;
  const size_t value_bytes_;
  const std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
  rocksdb::WriteOptions write_;
  std::vector<Keys> owned_;
};

// The parameter server's protocol answered with no table behind it: a pull gets as many bytes of
// values as the real server sends for its keys, a push nothing. The transport's own cost for the
// same messages, on the same gRPC settings (rpc::StartServer, rpc::NewChannel).
class EchoService final : public ps::rpc::ParameterServer::Service {
 public:
  explicit EchoService(int dim) : dim_(dim) {}
  grpc::Status PullSparse(grpc::ServerContext*, const ps::rpc::PullSparseRequest* request,
                          ps::rpc::PullSparseReply* reply) override {
    reply->mutable_values()->resize(request->keys().size() / sizeof(uint64_t) * dim_ *
                                    sizeof(float));
    return grpc::Status::OK;
  }
  grpc::Status PushSparse(grpc::ServerContext*, const ps::rpc::PushSparseRequest*,
                          ps::rpc::PushReply*) override {
    return grpc::Status::OK;
  }

 private:
  const int dim_;
};

// One call to an echo server: a pull of `keys`' rows, or a push of their `grads`.
using EchoCall = std::function<absl::Status(absl::Span<const uint64_t> keys,
                                            absl::Span<const float> grads, bool push)>;

// A gRPC client of one EchoService, as the real client calls a server.
EchoCall GrpcEchoCall(const std::string& address) {
  std::shared_ptr<ps::rpc::ParameterServer::Stub> stub =
      ps::rpc::ParameterServer::NewStub(rpc::NewChannel(address));
  return [stub](absl::Span<const uint64_t> keys, absl::Span<const float> grads, bool push) {
    grpc::ClientContext ctx;
    rpc::PrepareCall(ctx, "", absl::Seconds(30));
    grpc::Status status;
    if (push) {
      ps::rpc::PushSparseRequest request;
      request.set_keys(keys.data(), keys.size() * sizeof(uint64_t));
      request.set_grads(grads.data(), grads.size() * sizeof(float));
      ps::rpc::PushReply reply;
      status = stub->PushSparse(&ctx, request, &reply);
    } else {
      ps::rpc::PullSparseRequest request;
      request.set_keys(keys.data(), keys.size() * sizeof(uint64_t));
      ps::rpc::PullSparseReply reply;
      status = stub->PullSparse(&ctx, request, &reply);
      if (status.ok() && reply.values().size() != grads.size() * sizeof(float)) {
        status = grpc::Status(grpc::StatusCode::INTERNAL, "short reply");
      }
    }
    return rpc::FromGrpc(status, "echo");
  };
}

// Keys per second through the echo servers at `addresses`: for each of f.threads client threads,
// one thread per server (with a client of its own from `connect`) making blocking calls of half a
// batch's keys each (the real client's share per server, and its calls in flight), pulls or
// pushes of dim-float rows.
double EchoRate(const Flags& f, const std::vector<std::string>& addresses, bool push,
                const std::function<EchoCall(const std::string&)>& connect) {
  const int per_call = kBatch / static_cast<int>(addresses.size());
  std::atomic<int64_t> keys{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> workers;
  const absl::Time start = absl::Now();
  for (int t = 0; t < f.threads; ++t) {
    for (const std::string& address : addresses) {
      workers.emplace_back([&, t, address] {
        const EchoCall call = connect(address);
        uint64_t state = 99 + t;
        std::vector<uint64_t> ids(per_call);
        const std::vector<float> grads(static_cast<size_t>(per_call) * f.dim, 1e-3f);
        while (!stop.load(std::memory_order_relaxed)) {
          for (uint64_t& k : ids) k = SplitMix(state);
          Check(call(ids, grads, push), "echo");
          keys += per_call;
        }
      });
    }
  }
  absl::SleepFor(absl::Seconds(f.seconds));
  stop = true;
  for (std::thread& w : workers) w.join();
  return static_cast<double>(keys.load()) / absl::ToDoubleSeconds(absl::Now() - start);
}

ps::SparseTableOptions TableOptions(const Flags& f, int64_t budget) {
  ps::SparseTableOptions o;
  o.dim = f.dim;
  o.optimizer.kind = ps::OptimizerKind::kAdagrad;
  o.memory_budget_bytes = budget;
  return o;
}

}  // namespace
}  // namespace heterps::benchmarks

int main(int argc, char** argv) {
  using namespace heterps;
  using namespace heterps::benchmarks;
  // Debian's abseil checks every Mutex acquisition for lock-order cycles; a release binary
  // does not pay for that.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const Flags f = ParseFlags(argc, argv);
  const auto uniform = [&f](uint64_t& s) { return SplitMix(s) % static_cast<uint64_t>(f.rows); };
  const double row_bytes = 8.0 + 4.0 * f.dim * (1 + ps::StateFloats(ps::OptimizerKind::kAdagrad));

  const auto run = [&f](const char* part) { return f.only.empty() || f.only == part; };
  // 1. Raw gather.
  double gather = 0;
  if (run("gather")) {
    gather = GatherRowsPerSecond(f.rows, f.dim, f.threads, f.seconds);
    std::fprintf(stderr, "gather: %.3g rows/s\n", gather);
  }

  // 2. In process.
  double pull = 0, push = 0, bytes_per_row = 0;
  if (run("in-process")) {
    ps::InProcessPsClient client(1);
    const int64_t before = RssBytes();
    Check(client.CreateSparseTable(0, TableOptions(f, 0)), "create");
    Fill(client, f.rows, f.dim);
    bytes_per_row = static_cast<double>(RssBytes() - before) / f.rows;
    std::tie(pull, push) = PullPushRates(client, f, uniform);
    std::fprintf(stderr, "in process: pull %.3g, push %.3g keys/s, %.1f bytes/row\n", pull, push,
                 bytes_per_row);
  }

  // 3. gRPC on loopback, 2 shards.
  double grpc_pull = 0, grpc_push = 0, echo_pull = 0, echo_push = 0, zmq_pull = 0, zmq_push = 0;
  if (run("grpc")) {
    const std::string dir = std::filesystem::temp_directory_path() / "heterps_ps_bench_grpc";
    std::vector<std::unique_ptr<ps::rpc::PsServer>> servers;
    ps::rpc::GrpcPsClientOptions options;
    for (int s = 0; s < 2; ++s) {
      ps::rpc::PsServerOptions so;
      so.shard = s;
      so.num_shards = 2;
      so.data_dir = dir + "/" + std::to_string(s);
      auto server = ps::rpc::PsServer::Start(so);
      Check(server.status(), "start server");
      options.servers.push_back((*server)->address());
      servers.push_back(std::move(*server));
    }
    auto client = ps::rpc::GrpcPsClient::Connect(options);
    Check(client.status(), "connect");
    Check((*client)->CreateSparseTable(0, TableOptions(f, 0)), "create");
    Fill(**client, f.rows, f.dim);
    std::tie(grpc_pull, grpc_push) = PullPushRates(**client, f, uniform);
    std::fprintf(stderr, "grpc: pull %.3g, push %.3g keys/s\n", grpc_pull, grpc_push);
    // The same messages to two servers that only answer.
    EchoService echo(f.dim);
    std::vector<rpc::Server> echoes;
    std::vector<std::string> addresses;
    for (int s = 0; s < 2; ++s) {
      absl::StatusOr<rpc::Server> server = rpc::StartServer(rpc::Endpoint(), {&echo});
      Check(server.status(), "start echo server");
      addresses.push_back(server->address);
      echoes.push_back(*std::move(server));
    }
    echo_pull = EchoRate(f, addresses, /*push=*/false, GrpcEchoCall);
    echo_push = EchoRate(f, addresses, /*push=*/true, GrpcEchoCall);
    for (rpc::Server& server : echoes) server.server->Shutdown();
    std::fprintf(stderr, "echo: pull %.3g, push %.3g keys/s\n", echo_pull, echo_push);
    // The same messages over plain ZeroMQ.
    absl::StatusOr<std::unique_ptr<ZmqEchoServers>> zmq = ZmqEchoServers::Start(2, f.dim);
    Check(zmq.status(), "start zeromq servers");
    const auto zmq_call = [&zmq](const std::string& address) -> EchoCall {
      absl::StatusOr<std::unique_ptr<ZmqEchoServers::Client>> client = (*zmq)->Connect(address);
      Check(client.status(), "zeromq client");
      std::shared_ptr<ZmqEchoServers::Client> shared = std::move(*client);
      return [shared](absl::Span<const uint64_t> keys, absl::Span<const float> grads, bool push) {
        return shared->Call(keys, grads, push);
      };
    };
    zmq_pull = EchoRate(f, (*zmq)->addresses(), /*push=*/false, zmq_call);
    zmq_push = EchoRate(f, (*zmq)->addresses(), /*push=*/true, zmq_call);
    std::fprintf(stderr, "zeromq echo: pull %.3g, push %.3g keys/s\n", zmq_pull, zmq_push);
    std::filesystem::remove_all(dir);
  }

  // 4. The SSD tier: a quarter of the table in memory, 90% of accesses on a hot
  // 10%.
  double tier_rate = 0, memory_rate = 0, worst_budget_ratio = 0, tier_miss_rate = 0;
  int64_t budget = 0;
  if (run("tier")) {
    const uint64_t n = static_cast<uint64_t>(f.tier_rows);
    const auto hot = [n](uint64_t& s) {
      const uint64_t r = SplitMix(s);
      return (r % 10 != 0) ? (r >> 8) % (n / 10) : (r >> 8) % n;
    };
    const auto cycle = [&](ps::PsClient& client) {
      std::vector<std::vector<float>> values(f.threads, std::vector<float>(kBatch * f.dim));
      std::vector<float> grads(kBatch * f.dim, 1e-3f);
      return Rate(f.threads, f.seconds, hot, [&](int t, const auto& keys) {
        Check(client.Wait(client.PullSparse(0, keys, absl::MakeSpan(values[t]))), "pull");
        Check(client.Wait(client.PushSparse(0, keys, grads)), "push");
      });
    };
    {
      ps::InProcessPsClient client(1);
      Check(client.CreateSparseTable(0, TableOptions(f, 0)), "create");
      Fill(client, f.tier_rows, f.dim);
      budget = client.sparse(0, 0)->Stats().memory_bytes / 4;
      memory_rate = cycle(client);
    }
    const std::string dir = std::filesystem::temp_directory_path() / "heterps_ps_bench_tier";
    ps::InProcessPsClient client(1);
    Check(client.CreateSparseTable(0, TableOptions(f, budget),
                                   [&](int) -> std::unique_ptr<ps::ColdStore> {
                                     auto store = ps::RocksDbColdStore::Open(dir);
                                     Check(store.status(), "rocksdb");
                                     return std::move(*store);
                                   }),
          "create");
    Fill(client, f.tier_rows, f.dim);
    // Warm up: the hot rows resident (right after filling, the last rows filled are), so that
    // the measurement sees the steady state.
    {
      std::vector<uint64_t> keys;
      std::vector<float> values;
      for (uint64_t k = 0; k < n / 10; k += kBatch) {
        keys.clear();
        for (uint64_t j = k; j < std::min(n / 10, k + kBatch); ++j) keys.push_back(j);
        values.resize(keys.size() * f.dim);
        Check(client.Wait(client.PullSparse(0, keys, absl::MakeSpan(values))), "warm up");
      }
    }
    const ps::SparseTableStats warm = client.sparse(0, 0)->Stats();
    std::atomic<bool> stop{false};
    std::thread watch([&] {
      while (!stop) {
        worst_budget_ratio =
            std::max(worst_budget_ratio,
                     static_cast<double>(client.sparse(0, 0)->Stats().memory_bytes) / budget);
        absl::SleepFor(absl::Milliseconds(5));
      }
    });
    tier_rate = cycle(client);
    stop = true;
    watch.join();
    const ps::SparseTableStats s = client.sparse(0, 0)->Stats();
    tier_miss_rate = static_cast<double>(s.misses - warm.misses) /
                     static_cast<double>(s.hits + s.misses - warm.hits - warm.misses);
    std::fprintf(stderr, "tier: %.3g vs %.3g keys/s in memory; %.1f%% of accesses missed\n",
                 tier_rate, memory_rate, 100 * tier_miss_rate);
    std::filesystem::remove_all(dir);
  }

  // 5. The SSD tier's misses against RocksDB alone: uniform keys over a table four times its
  // budget, so that about three accesses in four miss.
  double tier_misses = 0, rocksdb_misses = 0, uniform_miss_rate = 0, misses_ratio = 0;
  if (run("misses")) {
    const uint64_t n = static_cast<uint64_t>(f.tier_rows);
    const std::string dir = std::filesystem::temp_directory_path() / "heterps_ps_bench_misses";
    std::filesystem::create_directories(dir);
    // A resident row's bytes, as the table counts them, from a small table all in memory.
    int64_t slot_bytes = 0;
    {
      ps::InProcessPsClient client(1);
      Check(client.CreateSparseTable(0, TableOptions(f, 0)), "create");
      Fill(client, kBatch, f.dim);
      slot_bytes = client.sparse(0, 0)->Stats().memory_bytes / kBatch;
    }
    ps::InProcessPsClient client(1);
    ps::RocksDbColdStore* tier = nullptr;
    Check(client.CreateSparseTable(0, TableOptions(f, slot_bytes * f.tier_rows / 4),
                                   [&](int) -> std::unique_ptr<ps::ColdStore> {
                                     auto store = ps::RocksDbColdStore::Open(dir + "/tier");
                                     Check(store.status(), "rocksdb");
                                     tier = store->get();
                                     return std::move(*store);
                                   }),
          "create");
    Fill(client, f.tier_rows, f.dim);
    const ps::SparseTableStats filled = client.sparse(0, 0)->Stats();
    // Rate seeds each thread's stream alike at every call: a turn's salt draws other keys than
    // the turns before (which would find their rows in memory).
    uint64_t salt = 0;
    const auto draw = [n, &salt](uint64_t& s) { return (SplitMix(s) ^ salt) % n; };
    std::vector<std::vector<float>> values(f.threads, std::vector<float>(kBatch * f.dim));
    // The tier and the reference take turns, each at rest when its turn starts (the other's
    // flushes and compactions done, as the fill's are), so that a change in the host's load
    // between them does not pass for a difference; the ratio is the median of the turns'.
    constexpr int kTurns = 3;
    std::unique_ptr<RocksDbMisses> reference;
    std::vector<double> ratios;
    for (int turn = 0; turn < kTurns; ++turn) {
      Check(tier->WaitForBackgroundWork(), "rocksdb settle");
      if (reference != nullptr) {
        Check(ps::WaitForRocksDb(reference->db(), dir + "/alone"), "rocksdb settle");
      }
      std::fprintf(stderr, "misses, turn %d: the tier's RocksDB: %s\n", turn + 1,
                   tier->Describe().c_str());
      const ps::SparseTableStats before = client.sparse(0, 0)->Stats();
      salt = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(turn);
      const double keys_per_second = Rate(f.threads, f.seconds, draw, [&](int t, const auto& keys) {
        Check(client.Wait(client.PullSparse(0, keys, absl::MakeSpan(values[t]))), "pull");
      });
      const ps::SparseTableStats after = client.sparse(0, 0)->Stats();
      const double miss_rate =
          static_cast<double>(after.misses - before.misses) /
          static_cast<double>(after.hits + after.misses - before.hits - before.misses);
      const double tier_rate = keys_per_second * miss_rate;
      if (reference == nullptr) {
        // As many rows stored as the tier held after its fill, as many read per batch as the
        // tier's first turn missed.
        uniform_miss_rate = miss_rate;
        const size_t value_bytes =
            16 + sizeof(float) * f.dim * (1 + ps::StateFloats(ps::OptimizerKind::kAdagrad));
        reference = std::make_unique<RocksDbMisses>(f, f.tier_rows, filled.cold_rows, value_bytes,
                                                    static_cast<int>(kBatch * miss_rate + 0.5),
                                                    dir + "/alone");
      }
      Check(ps::WaitForRocksDb(reference->db(), dir + "/alone"), "rocksdb settle");
      Check(tier->WaitForBackgroundWork(), "rocksdb settle");
      std::fprintf(stderr, "misses, turn %d: RocksDB alone: %s\n", turn + 1,
                   ps::DescribeRocksDb(reference->db()).c_str());
      const double reference_rate = reference->Run(f.seconds);
      std::fprintf(stderr,
                   "misses, turn %d: tier %.3g/s (%.1f%% of accesses, %lld spills), RocksDB "
                   "alone %.3g/s: %.2f\n",
                   turn + 1, tier_rate, 100 * miss_rate,
                   static_cast<long long>(after.spills - before.spills), reference_rate,
                   tier_rate / reference_rate);
      tier_misses += tier_rate / kTurns;
      rocksdb_misses += reference_rate / kTurns;
      ratios.push_back(tier_rate / reference_rate);
    }
    std::sort(ratios.begin(), ratios.end());
    misses_ratio = ratios[kTurns / 2];
    reference.reset();
    std::filesystem::remove_all(dir);
  }

  // 6. The key plan.
  double plan_small = 0, map_small = 0, plan_large = 0, map_large = 0;
  if (run("plan")) {
    uint64_t s = 1;
    std::vector<std::vector<uint64_t>> small(200), large(20);
    for (auto& batch : small) {
      for (int i = 0; i < kBatch; ++i) batch.push_back(uniform(s));
    }
    // dlrm-small's draws: per sample, one id in each of 26 slots of 100,000, skewed to low ids
    // (the square of a uniform), each slot's ids apart.
    for (auto& batch : large) {
      for (int i = 0; i < 2048; ++i) {
        for (uint64_t slot = 0; slot < 26; ++slot) {
          const double u = static_cast<double>(SplitMix(s) >> 11) / 9007199254740992.0;
          batch.push_back(slot * 100000 + static_cast<uint64_t>(u * u * 100000));
        }
      }
    }
    plan_small = PlanRate(small, ps::PlanKeys);
    map_small = PlanRate(small, MapPlanKeys);
    plan_large = PlanRate(large, ps::PlanKeys);
    map_large = PlanRate(large, MapPlanKeys);
    std::fprintf(stderr, "key plan: %.3g / %.3g keys/s (4096), %.3g / %.3g (53,248)\n", plan_small,
                 map_small, plan_large, map_large);
  }

  // With --only, the rows of the parts that ran; a ratio whose reference did not run is "-".
  const auto ratio = [](double a, double b) {
    return b > 0 ? absl::StrFormat("%.2f", a / b) : std::string("-");
  };
  std::string table =
      "| measure | figure | against | ratio | target |\n"
      "|---|---|---|---|---|\n";
  if (run("gather"))
    absl::StrAppendFormat(&table, "| raw random-row gather | %.3g rows/s | | | |\n", gather);
  if (run("in-process")) {
    absl::StrAppendFormat(&table,
                          "| in-process pull | %.3g keys/s | gather | %s | >= 0.50 |\n"
                          "| in-process push (Adagrad) | %.3g keys/s | gather | %s | >= 0.50 |\n",
                          pull, ratio(pull, gather), push, ratio(push, gather));
  }
  if (run("grpc")) {
    absl::StrAppendFormat(
        &table,
        "| gRPC pull, 2 shards | %.3g keys/s | in-process pull | %s | >= 0.25 |\n"
        "| gRPC push, 2 shards | %.3g keys/s | in-process push | %s | >= 0.25 |\n"
        "| gRPC pull, 2 shards | | the same messages answered by 2 servers with no table, %.3g "
        "keys/s | %s | >= 0.80 |\n"
        "| gRPC push, 2 shards | | the same, %.3g keys/s | %s | >= 0.80 |\n"
        "| gRPC pull, 2 shards | | the same messages over plain ZeroMQ (REQ/REP, TCP), %.3g "
        "keys/s | %s | |\n"
        "| gRPC push, 2 shards | | the same, %.3g keys/s | %s | |\n"
        "| gRPC echo, pull | %.3g keys/s | ZeroMQ echo | %s | |\n"
        "| gRPC echo, push | %.3g keys/s | ZeroMQ echo | %s | |\n",
        grpc_pull, ratio(grpc_pull, pull), grpc_push, ratio(grpc_push, push), echo_pull,
        ratio(grpc_pull, echo_pull), echo_push, ratio(grpc_push, echo_push), zmq_pull,
        ratio(grpc_pull, zmq_pull), zmq_push, ratio(grpc_push, zmq_push), echo_pull,
        ratio(echo_pull, zmq_pull), echo_push, ratio(echo_push, zmq_push));
  }
  if (run("in-process")) {
    absl::StrAppendFormat(&table,
                          "| memory per resident row | %.1f bytes | key + value + state, %.0f "
                          "bytes | %.2f | <= 1.25 |\n",
                          bytes_per_row, row_bytes, bytes_per_row / row_bytes);
  }
  if (run("tier")) {
    absl::StrAppendFormat(
        &table,
        "| SSD tier, 4x over budget, 10%% hot, %.1f%% of accesses miss | %.3g keys/s | all in "
        "memory, %.3g keys/s | %s | |\n"
        "| resident bytes, largest seen | %.1f MB | budget, %.1f MB | %.2f | <= 1.10 |\n",
        100 * tier_miss_rate, tier_rate, memory_rate, ratio(tier_rate, memory_rate),
        worst_budget_ratio * budget / 1e6, budget / 1e6, worst_budget_ratio);
  }
  if (run("misses")) {
    absl::StrAppendFormat(
        &table,
        "| SSD tier's misses, 4x over budget, uniform keys, %.1f%% of accesses miss | %.3g "
        "misses/s | RocksDB alone (MultiGet, write back), %.3g/s; turns taken, the "
        "median turn's ratio | %.2f | >= 0.70 |\n",
        100 * uniform_miss_rate, tier_misses, rocksdb_misses, misses_ratio);
  }
  if (run("plan")) {
    absl::StrAppendFormat(
        &table,
        "| client's key plan, 4096 uniform keys, 1 thread | %.3g keys/s | with absl's hash map, "
        "%.3g keys/s | %s | |\n"
        "| client's key plan, 53,248 keys of dlrm-small's 26 slots, 1 thread | %.3g keys/s | with "
        "absl's hash map, %.3g keys/s | %s | |\n",
        plan_small, map_small, ratio(plan_small, map_small), plan_large, map_large,
        ratio(plan_large, map_large));
  }
  const std::string section = absl::StrFormat(
      "```\nbuild/benchmarks/ps_bench --rows %d --dim %d --threads %d "
      "--seconds %g --tier-rows %d\n"
      "```\n\nOn %s, %d threads, batches of %d keys, "
      "tables of dim %d:\n\n%s",
      f.rows, f.dim, f.threads, f.seconds, f.tier_rows, base::HostDescription(), f.threads, kBatch,
      f.dim, table);
  std::printf("%s", section.c_str());
  if (!f.only.empty()) return 0;
  if (!f.markdown.empty()) Check(ReplaceSection(f.markdown, "ps-bench", section), "markdown");
  return 0;
}
