#include "tools/node_command.h"

#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "heterps/base/file.h"
#include "heterps/base/log.h"
#include "heterps/launcher/rpc/node.h"
#include "heterps/rpc/quiet_logs.h"
#include "tools/cli_common.h"
#include "tools/distributed_train.h"

namespace heterps::tools {
namespace {

// The first of the environment variables that is set, as an integer; -1 if none is.
int FromEnvironment(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    int n = 0;
    if (value != nullptr && absl::SimpleAtoi(value, &n)) return n;
  }
  return -1;
}

std::atomic<bool> stop_requested{false};

}  // namespace

CLI::App* AddNodeCommand(CLI::App& app, NodeFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "node", "One process of a distributed job started by mpirun, Slurm or heterps train");
  cmd->add_option("--coordinator", flags.coordinator,
                  "host:port of the coordinator (rank 0 listens there)")
      ->required();
  cmd->add_option("--rank", flags.rank, "This process's rank (default: from the launcher)");
  cmd->add_option("--world", flags.world, "Processes in the job (default: from the launcher)");
  cmd->add_option("--generation", flags.generation, "The job attempt this process belongs to");
  cmd->add_option("--token-file", flags.token_file, "File holding the job's shared secret");
  cmd->add_option("--host", flags.host, "Address to serve on (default 127.0.0.1)");
  cmd->add_option("--connect-timeout", flags.connect_timeout,
                  "Seconds to wait for the coordinator (default 30)")
      ->check(Positive());
  AddJobOptions(cmd, flags.job);
  return cmd;
}

int RunNode(const NodeFlags& flags) {
  rpc::QuietLogs();
  const int rank = flags.rank >= 0
                       ? flags.rank
                       : FromEnvironment({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"});
  const int world = flags.world >= 0
                        ? flags.world
                        : FromEnvironment({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"});
  if (rank < 0 || world < 2 || rank >= world) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " of ", world,
                     ": give --rank and --world (world >= 2), or start under "
                     "mpirun or Slurm")));
  }
  umask(077);  // what the role writes (a shard's checkpoints) is private to this user
  if (rank == 0) {
    const size_t colon = flags.coordinator.rfind(':');
    int port = 0;
    if (colon == std::string::npos ||
        !absl::SimpleAtoi(flags.coordinator.substr(colon + 1), &port)) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--coordinator ", flags.coordinator, ": expected host:port")));
    }
    LaunchSettings launch;
    launch.local = false;
    launch.host = flags.coordinator.substr(0, colon);
    launch.port = port;
    launch.token_file = flags.token_file;
    launch.world = world;
    return RunDistributedTrain(flags.job, launch);
  }
  launcher::rpc::NodeOptions options;
  options.coordinator = flags.coordinator;
  options.rank = rank;
  options.world = world;
  options.generation = flags.generation;
  options.host = flags.host;
  options.connect_timeout = absl::Seconds(flags.connect_timeout);
  if (flags.job.tls) {
    return Fail(absl::InvalidArgumentError(
        "--tls makes a certificate for a job whose processes heterps train starts; under an "
        "external launcher give every process the same --tls-cert and --tls-key"));
  }
  if (!flags.job.tls_cert.empty()) {
    absl::StatusOr<std::string> cert = base::ReadTextFile(flags.job.tls_cert);
    if (!cert.ok()) return Fail(cert.status());
    absl::StatusOr<std::string> key = ReadSecret(flags.job.tls_key, "--tls-key");
    if (!key.ok()) return Fail(key.status());
    options.tls = {*cert, *key};
  }
  if (!flags.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadSecret(flags.token_file, "--token-file");
    if (!token.ok()) return Fail(token.status());
    options.token = *token;
  }
  // The first SIGTERM or SIGINT asks the job to stop cleanly (the role serves until the
  // coordinator has written the stop's checkpoint); a second ends the process at once. A thread
  // waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::thread waiter([signals] {
    int signal = 0;
    sigwait(&signals, &signal);
    stop_requested = true;
    sigwait(&signals, &signal);
    base::LogLine("a second signal: ending now");
    std::_Exit(128 + signal);
  });
  waiter.detach();
  base::SetLogRole(absl::StrCat("rank ", rank));
  const absl::Status status = launcher::rpc::RunNode(options, &stop_requested);
  if (!status.ok()) {
    // One line, naming the rank (a launcher merges every rank's stderr).
    return Fail(absl::Status(status.code(), absl::StrCat("rank ", rank, ": ", status.message())));
  }
  return 0;
}

}  // namespace heterps::tools
