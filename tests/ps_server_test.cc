// Parameter servers as separate processes (`heterps ps-server`), a gRPC client
// in this one.
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/base/file.h"
#include "heterps/base/subprocess.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/ps/ps_client.h"
#include "heterps/ps/rpc/grpc_ps_client.h"

namespace heterps {
namespace {

using ::testing::HasSubstr;

constexpr char kToken[] = "process-test-token";

std::string Dir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/ps_server_test_" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Server {
  std::unique_ptr<base::Subprocess> process;
  std::string address;
  std::string log;
};

// Starts shard `shard` of `n` with its data under `dir`, and waits until it
// serves.
Server StartServer(const std::string& dir, int shard, int n) {
  Server server;
  const std::string port_file = absl::StrCat(dir, "/port-", shard);
  const std::string token_file = dir + "/token";
  if (!std::filesystem::exists(token_file)) {
    EXPECT_TRUE(base::WriteFileAtomically(token_file, absl::StrCat(kToken, "\n")).ok());
  }
  server.log = absl::StrCat(dir, "/ps-", shard, ".log");
  auto process = base::Subprocess::Start(
      {std::string(HETERPS_BINARY_DIR) + "/tools/heterps", "ps-server", "--port", "0", "--shard",
       std::to_string(shard), "--num-shards", std::to_string(n), "--data-dir",
       absl::StrCat(dir, "/data-", shard), "--token-file", token_file, "--port-file", port_file},
      server.log);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return server;
  server.process = std::move(*process);
  const absl::Time end = absl::Now() + absl::Seconds(20);
  while (!std::filesystem::exists(port_file) && absl::Now() < end && server.process->Running()) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  auto port = base::ReadTextFile(port_file);
  EXPECT_TRUE(port.ok()) << "shard " << shard << " did not start: " << Slurp(server.log);
  if (port.ok())
    server.address = absl::StrCat("127.0.0.1:", std::string(absl::StripAsciiWhitespace(*port)));
  return server;
}

ps::rpc::GrpcPsClientOptions ClientOptions(const std::vector<Server>& servers) {
  ps::rpc::GrpcPsClientOptions options;
  for (const Server& s : servers) options.servers.push_back(s.address);
  options.token = kToken;
  options.rpc_timeout = absl::Seconds(10);
  return options;
}

ps::SparseTableOptions Table() {
  ps::SparseTableOptions o;
  o.dim = 16;
  o.optimizer.kind = ps::OptimizerKind::kAdagrad;
  o.seed = 17;
  o.memory_budget_bytes = 256 << 10;  // spills to each server's RocksDB
  return o;
}

TEST(PsServerProcessTest, TwoServersAnswerLikeTheInProcessClientAndStopOnSigterm) {
  const std::string dir = Dir("equal");
  std::vector<Server> servers;
  for (int s = 0; s < 2; ++s) servers.push_back(StartServer(dir, s, 2));
  ASSERT_FALSE(servers[1].address.empty());
  auto remote = ps::rpc::GrpcPsClient::Connect(ClientOptions(servers));
  ASSERT_TRUE(remote.ok()) << remote.status();
  ps::InProcessPsClient local(2);
  ps::SparseTableOptions unbudgeted = Table();
  unbudgeted.memory_budget_bytes = 0;
  ASSERT_TRUE(local.CreateSparseTable(0, unbudgeted).ok());
  ASSERT_TRUE((*remote)->CreateSparseTable(0, Table()).ok());

  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 20; ++step) {
    std::vector<uint64_t> keys(4096);
    for (uint64_t& k : keys) k = rng() % 50000;
    std::vector<float> a(keys.size() * 16), b(a.size());
    ASSERT_TRUE(local.Wait(local.PullSparse(0, keys, absl::MakeSpan(a))).ok());
    absl::Status pulled = (*remote)->Wait((*remote)->PullSparse(0, keys, absl::MakeSpan(b)));
    ASSERT_TRUE(pulled.ok()) << pulled;
    ASSERT_EQ(a, b) << "step " << step;
    for (float& g : a) g = normal(rng);
    ASSERT_TRUE(local.Wait(local.PushSparse(0, keys, a)).ok());
    ASSERT_TRUE((*remote)->Wait((*remote)->PushSparse(0, keys, a)).ok());
  }
  // Whole rows out and back (the GPU tier's calls), more than a request's 2,048 keys per server,
  // in no order, some rows in memory and some spilled to the SSD tier, some never seen.
  std::vector<uint64_t> keys(7000);
  std::iota(keys.begin(), keys.end(), uint64_t{46000});
  std::shuffle(keys.begin(), keys.end(), rng);
  ps::RowBatch mine, theirs;
  ASSERT_TRUE(local.Wait(local.ExportRows(0, keys, &mine)).ok());
  absl::Status exported = (*remote)->Wait((*remote)->ExportRows(0, keys, &theirs));
  ASSERT_TRUE(exported.ok()) << exported;
  EXPECT_EQ(theirs.values, mine.values);
  EXPECT_EQ(theirs.state, mine.state);
  EXPECT_EQ(theirs.steps, mine.steps);
  for (float& v : mine.values) v += 1;
  for (float& v : mine.state) v += 2;
  for (int64_t& s : mine.steps) s += 3;
  absl::Status imported = (*remote)->Wait((*remote)->ImportRows(0, keys, mine));
  ASSERT_TRUE(imported.ok()) << imported;
  ASSERT_TRUE((*remote)->Wait((*remote)->ExportRows(0, keys, &theirs)).ok());
  EXPECT_EQ(theirs.values, mine.values);
  EXPECT_EQ(theirs.state, mine.state);
  EXPECT_EQ(theirs.steps, mine.steps);
  auto stats = (*remote)->Stats();
  ASSERT_TRUE(stats.ok());
  for (const auto& shard : *stats) {
    ASSERT_EQ(shard.sparse.size(), 1u);
    EXPECT_GT(shard.sparse[0].second.spills, 0) << "shard " << shard.shard;
    EXPECT_LE(shard.sparse[0].second.memory_bytes, Table().memory_budget_bytes);
  }
  for (Server& s : servers) s.process->Signal(SIGTERM);
  for (Server& s : servers) {
    auto code = s.process->Wait(absl::Seconds(10));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << Slurp(s.log);
    EXPECT_THAT(Slurp(s.log), HasSubstr("received SIGTERM, shutting down"));
  }
}

TEST(PsServerProcessTest, ACallWithoutTheTokenIsRefusedAndLogged) {
  const std::string dir = Dir("token");
  std::vector<Server> servers;
  servers.push_back(StartServer(dir, 0, 1));
  ps::rpc::GrpcPsClientOptions options = ClientOptions(servers);
  options.token.clear();
  auto client = ps::rpc::GrpcPsClient::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), absl::StatusCode::kUnauthenticated) << client.status();
  servers[0].process->Signal(SIGTERM);
  ASSERT_TRUE(servers[0].process->Wait(absl::Seconds(10)).ok());
  EXPECT_THAT(Slurp(servers[0].log), HasSubstr("refused Info from"));
}

TEST(PsServerProcessTest, AKilledServerGivesTheClientAClearErrorNotAHang) {
  const std::string dir = Dir("killed");
  std::vector<Server> servers;
  for (int s = 0; s < 2; ++s) servers.push_back(StartServer(dir, s, 2));
  ASSERT_FALSE(servers[1].address.empty());
  auto client = ps::rpc::GrpcPsClient::Connect(ClientOptions(servers));
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->CreateSparseTable(0, Table()).ok());
  std::vector<uint64_t> keys(4096);
  std::iota(keys.begin(), keys.end(), 0);
  std::vector<float> values(keys.size() * 16);
  absl::Status status;
  absl::Time killed_at;
  for (int step = 0; step < 1000 && status.ok(); ++step) {
    if (step == 5) {
      servers[1].process->Signal(SIGKILL);
      killed_at = absl::Now();
    }
    status = (*client)->Wait((*client)->PullSparse(0, keys, absl::MakeSpan(values)));
  }
  ASSERT_FALSE(status.ok());
  EXPECT_LT(absl::Now() - killed_at, absl::Seconds(10));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("ps shard 1 (" + servers[1].address + ")"));
}

TEST(PsServerProcessTest, APortInUseIsOneClearError) {
  const std::string dir = Dir("port");
  std::vector<Server> servers;
  servers.push_back(StartServer(dir, 0, 1));
  const std::string port = servers[0].address.substr(servers[0].address.rfind(':') + 1);
  const std::string log = dir + "/second.log";
  auto second =
      base::Subprocess::Start({std::string(HETERPS_BINARY_DIR) + "/tools/heterps", "ps-server",
                               "--port", port, "--data-dir", dir + "/data-second"},
                              log);
  ASSERT_TRUE(second.ok());
  auto code = (*second)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok());
  EXPECT_EQ(*code, 2);
  EXPECT_EQ(Slurp(log), absl::StrCat("heterps: error: cannot listen on 127.0.0.1:", port,
                                     " (address in use, or not this host's)\n"));
}

}  // namespace
}  // namespace heterps
