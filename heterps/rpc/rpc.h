// What every gRPC service and client of heterps shares (the parameter server, the stage
// workers, the coordinator): status conversion, the job's token on every call, channel and server
// settings. The one home of this glue; the services hold only their own logic.
//
//   // Server side.
//   rpc::TokenCheck auth(options.token);
//   grpc::Status Push(grpc::ServerContext* ctx, ...) override {
//     if (grpc::Status denied = auth.Check(ctx, "Push"); !denied.ok()) return denied;
//     return rpc::ToGrpc(DoPush(...));
//   }
//   HETERPS_ASSIGN_OR_RETURN(auto server, rpc::StartServer(endpoint, {&service}));
//
//   // Client side.
//   auto stub = Service::NewStub(rpc::NewChannel(address, channel_options));
//   grpc::ClientContext ctx;
//   rpc::PrepareCall(ctx, token, absl::Seconds(5));
//   HETERPS_RETURN_IF_ERROR(rpc::FromGrpc(stub->Call(&ctx, request, &reply), "ps shard 1: Pull"));
//
// Thread safety: TokenCheck may be used from every handler thread at once; the functions are
// thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "heterps/base/call_stats.h"
#include "heterps/rpc/call_stats.pb.h"
#include "heterps/rpc/job_tls.h"

namespace heterps::rpc {

// The largest message any heterps service sends or accepts (batches are chunked below it).
inline constexpr int kMaxMessageBytes = 256 << 20;

grpc::Status ToGrpc(const absl::Status& status);
// The status with the same code, its message prefixed by `what` and the code's name
// ("ps shard 1 (127.0.0.1:7001): Pull: UNAVAILABLE: Connection refused").
absl::Status FromGrpc(const grpc::Status& status, absl::string_view what);

// The server side of the job's shared secret (base/token.h): refuses, logs and counts calls
// without it, or with a wrong one (compared in constant time). An empty token accepts every call.
class TokenCheck {
 public:
  explicit TokenCheck(std::string token) : token_(std::move(token)) {}
  // OK, or UNAUTHENTICATED naming what was missing; `method` names the call in the log line.
  grpc::Status Check(grpc::ServerContext* ctx, absl::string_view method);
  int64_t refused() const { return refused_.load(); }

 private:
  const std::string token_;
  std::atomic<int64_t> refused_{0};
};

// Call statistics (base/call_stats.h) on the wire and back. FromProto refuses nothing: a
// message with the wrong number of buckets gets them padded or cut to the right number.
void ToProto(const std::vector<base::MethodStats>& stats,
             google::protobuf::RepeatedPtrField<wire::MethodStats>* out);
std::vector<base::MethodStats> FromProto(
    const google::protobuf::RepeatedPtrField<wire::MethodStats>& stats);

// The client side: a deadline `timeout` from now and the token (when not empty).
void PrepareCall(grpc::ClientContext& ctx, const std::string& token, absl::Duration timeout);

struct ChannelOptions {
  std::string tls_ca_pem;       // PEM roots to verify the server with; empty: no TLS
  std::string tls_target_name;  // with TLS: the name the server's certificate must carry, where
                                // not the address's host (a job's: kJobTlsName)
  // With TLS: the certificate chain and key this side presents (both or neither). A job's
  // servers accept no client without its certificate (mutual TLS: StartServer).
  std::string tls_cert_pem, tls_key_pem;
  int max_send_bytes = kMaxMessageBytes;
  // Reconnect quickly: the peers of a job are on a local network, and a restarted process comes
  // back on a new port within seconds.
  absl::Duration max_reconnect_backoff = absl::Seconds(1);
  // Not null: every message of the channel's calls adds its serialized size to its method
  // ("PullSparse": the last part of the call's path) here (CallStats::AddBytes), the requests
  // as sent and the replies as received. Must outlive the channel.
  base::CallStats* bytes = nullptr;
};
std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          const ChannelOptions& options = ChannelOptions());
// The options of a channel between two roles of a job with `tls` (plaintext without): the
// server checked against the job's certificate by kJobTlsName, and the job's certificate shown.
ChannelOptions JobChannel(const JobTls& tls);

struct Endpoint {
  std::string host = "127.0.0.1";         // loopback unless told otherwise
  int port = 0;                           // 0: a free port
  // Both or neither. With them, every client must show a certificate that chains to
  // tls_ca_pem, or where that is empty to tls_cert_pem (mutual TLS: a job's certificate is its
  // own CA, job_tls.h).
  std::string tls_cert_pem, tls_key_pem;
  std::string tls_ca_pem;  // with TLS: the roots of the clients' certificates (PEM)
  int max_message_bytes = kMaxMessageBytes;
};

struct Server {
  std::unique_ptr<grpc::Server> server;
  int port = 0;
  std::string address;  // host:port, IPv6 hosts in brackets
};

// Builds and starts a server for `services` (which must outlive it). Unavailable naming the
// address when it cannot listen (in use, or not this host's); InvalidArgument for half a TLS
// pair or a port out of range.
absl::StatusOr<Server> StartServer(const Endpoint& endpoint,
                                   const std::vector<grpc::Service*>& services);

// The DNS names of the certificate the caller of `ctx` showed (its subjectAltName's; on a server
// of mutual TLS, verified against the roots by then), or none where the call is not over TLS.
std::vector<std::string> PeerDnsNames(const grpc::ServerContext& ctx);

// "host:port", with an IPv6 host in brackets.
std::string JoinHostPort(absl::string_view host, int port);

}  // namespace heterps::rpc
