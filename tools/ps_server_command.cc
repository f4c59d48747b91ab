#include "tools/ps_server_command.h"

#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "heterps/base/file.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/launcher/job_metrics.h"
#include "heterps/launcher/rpc/coordinator.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/rpc/quiet_logs.h"
#include "tools/cli_common.h"
#include "tools/metrics_http.h"

namespace heterps::tools {
namespace {

absl::StatusOr<ps::rpc::PsServerOptions> OptionsFrom(const PsServerFlags& flags) {
  ps::rpc::PsServerOptions options;
  options.host = flags.host;
  options.port = flags.port;
  options.shard = flags.shard;
  options.num_shards = flags.num_shards;
  options.data_dir = flags.data_dir;
  options.job_id = flags.job_id;
  options.memory_limit_bytes = flags.memory_limit_mib > 0
                                   ? static_cast<int64_t>(flags.memory_limit_mib * (1 << 20))
                                   : ps::rpc::DefaultMemoryLimitBytes();
  if (!flags.token_file.empty()) {
    HETERPS_ASSIGN_OR_RETURN(options.token, ReadSecret(flags.token_file, "--token-file"));
  }
  if (flags.tls_cert.empty() != flags.tls_key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (!flags.tls_cert.empty()) {
    HETERPS_ASSIGN_OR_RETURN(options.tls_cert_pem, base::ReadTextFile(flags.tls_cert));
    HETERPS_ASSIGN_OR_RETURN(options.tls_key_pem, base::ReadTextFile(flags.tls_key));
  }
  return options;
}

// The /metrics endpoint (--metrics-port) of one shard; none (nullptr) without the flag.
absl::StatusOr<std::unique_ptr<MetricsHttp>> ServeMetrics(const PsServerFlags& flags,
                                                          const std::string& token,
                                                          const ps::rpc::PsServer* server) {
  MetricsHttpOptions options;
  options.host = flags.metrics_host;
  options.port = flags.metrics_port;
  options.token = token;
  return ServeMetricsIfAsked(options, flags.metrics_port_file,
                             [server]() -> absl::StatusOr<std::string> {
                               return launcher::ParameterServersToPrometheus(
                                   {launcher::rpc::ToShardStatus(server->stats())});
                             });
}

}  // namespace

CLI::App* AddPsServerCommand(CLI::App& app, PsServerFlags& flags) {
  CLI::App* cmd = app.add_subcommand("ps-server", "Serve one parameter-server shard over gRPC");
  cmd->add_option("--host", flags.host, "Address to bind (default 127.0.0.1, loopback only)");
  cmd->add_option("--port", flags.port, "Port to bind; 0: any free port (default 0)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--shard", flags.shard, "This server's shard index (default 0)")
      ->check(NonNegative());
  cmd->add_option("--num-shards", flags.num_shards, "Number of shards in the job (default 1)")
      ->check(Positive());
  cmd->add_option("--data-dir", flags.data_dir, "Directory for the SSD tier and checkpoints")
      ->required();
  cmd->add_option("--job-id", flags.job_id,
                  "The job's id: checkpoints go to <data-dir>/checkpoints/<id>/ and name it "
                  "(default: none, <data-dir>/checkpoints/)");
  cmd->add_option("--token-file", flags.token_file,
                  "File holding the job's shared secret; calls without it are refused");
  cmd->add_option("--tls-cert", flags.tls_cert, "PEM certificate chain: serve TLS only");
  cmd->add_option("--tls-key", flags.tls_key, "PEM private key of --tls-cert");
  cmd->add_option("--port-file", flags.port_file, "Also write the bound port to this file");
  cmd->add_option("--memory-limit-mib", flags.memory_limit_mib,
                  "MiB this server may hold for its clients (tables, pending updates); calls "
                  "beyond it are refused (default: 90% of this host's memory)")
      ->check(Finite())
      ->check(CLI::PositiveNumber);
  cmd->add_option("--metrics-port", flags.metrics_port,
                  "Serve this shard's Prometheus metrics on http://HOST:PORT/metrics (0: any free "
                  "port)")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-host", flags.metrics_host,
                  "Address of --metrics-port (default 127.0.0.1; elsewhere a scrape sends the "
                  "token of --token-file as a bearer token)");
  cmd->add_option("--metrics-port-file", flags.metrics_port_file,
                  "Also write the port of --metrics-port to this file");
  return cmd;
}

int RunPsServer(const PsServerFlags& flags) {
  rpc::QuietLogs();
  absl::StatusOr<ps::rpc::PsServerOptions> options = OptionsFrom(flags);
  if (!options.ok()) return Fail(options.status());
  // Block the stop signals before gRPC starts its threads, so that only sigwait
  // sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  base::SetLogRole(absl::StrCat("ps-server ", flags.shard));
  absl::StatusOr<std::unique_ptr<ps::rpc::PsServer>> server = ps::rpc::PsServer::Start(*options);
  if (!server.ok()) return Fail(server.status());
  if (options->token.empty()) {
    base::LogLine("no --token-file: any process on this host may call this server");
  }
  if (!flags.port_file.empty()) {
    absl::Status written =
        base::WriteFileAtomically(flags.port_file, absl::StrCat((*server)->port(), "\n"));
    if (!written.ok()) return Fail(written);
  }
  absl::StatusOr<std::unique_ptr<MetricsHttp>> metrics =
      ServeMetrics(flags, options->token, server->get());
  if (!metrics.ok()) return Fail(metrics.status());
  std::cout << "ps-server shard " << flags.shard << " of " << flags.num_shards << " listening on "
            << (*server)->address() << std::endl;

  int signal = 0;
  sigwait(&stop, &signal);
  base::LogLine(
      absl::StrCat("received ", signal == SIGTERM ? "SIGTERM" : "SIGINT", ", shutting down"));
  metrics->reset();
  (*server)->Shutdown(absl::Seconds(5));
  const ps::rpc::PsServerCounters counters = (*server)->counters();
  base::LogLine(
      absl::StrCat("stopped after ", counters.calls, " calls (", counters.refused, " refused)"));
  return 0;
}

}  // namespace heterps::tools
