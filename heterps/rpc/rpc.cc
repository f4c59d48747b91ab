#include "heterps/rpc/rpc.h"

#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message_lite.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"
#include "grpcpp/support/client_interceptor.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/token.h"
#include "heterps/rpc/quiet_logs.h"

namespace heterps::rpc {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  return absl::Status(
      code, absl::StrCat(what, ": ", absl::StatusCodeToString(code), ": ", status.error_message()));
}

grpc::Status TokenCheck::Check(grpc::ServerContext* ctx, absl::string_view method) {
  if (token_.empty()) return grpc::Status::OK;
  auto entries = ctx->client_metadata().equal_range(base::kTokenHeader);
  const bool given = entries.first != entries.second;
  if (given &&
      base::TokensEqual(
          absl::string_view(entries.first->second.data(), entries.first->second.size()), token_)) {
    return grpc::Status::OK;
  }
  ++refused_;
  base::LogLine(absl::StrCat("refused ", method, " from ", ctx->peer(), ": ",
                             given ? "wrong token" : "no token"));
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      given ? "wrong token" : "no token (x-heterps-token) in the call");
}

void ToProto(const std::vector<base::MethodStats>& stats,
             google::protobuf::RepeatedPtrField<wire::MethodStats>* out) {
  out->Clear();
  for (const base::MethodStats& m : stats) {
    wire::MethodStats* w = out->Add();
    w->set_method(m.method);
    w->set_calls(m.calls);
    w->set_errors(m.errors);
    w->set_seconds(m.seconds);
    for (int64_t b : m.buckets) w->add_buckets(b);
    w->set_sent_bytes(m.sent_bytes);
    w->set_received_bytes(m.received_bytes);
  }
}

std::vector<base::MethodStats> FromProto(
    const google::protobuf::RepeatedPtrField<wire::MethodStats>& stats) {
  std::vector<base::MethodStats> out;
  for (const wire::MethodStats& w : stats) {
    base::MethodStats m;
    m.method = w.method();
    m.calls = w.calls();
    m.errors = w.errors();
    m.seconds = w.seconds();
    m.buckets.assign(w.buckets().begin(), w.buckets().end());
    m.buckets.resize(base::kCallLatencyBounds.size() + 1, 0);
    m.sent_bytes = w.sent_bytes();
    m.received_bytes = w.received_bytes();
    out.push_back(std::move(m));
  }
  return out;
}

void PrepareCall(grpc::ClientContext& ctx, const std::string& token, absl::Duration timeout) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!token.empty()) ctx.AddMetadata(base::kTokenHeader, token);
}

namespace {

// Adds each message's serialized size to the call's method (ChannelOptions::bytes).
class ByteCounter final : public grpc::experimental::Interceptor {
 public:
  ByteCounter(base::CallStats* bytes, absl::string_view method) : bytes_(bytes), method_(method) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    using Hook = grpc::experimental::InterceptionHookPoints;
    if (methods->QueryInterceptionHookPoint(Hook::PRE_SEND_MESSAGE)) {
      // The message serialized here is the one sent: nothing is serialized twice.
      const grpc::ByteBuffer* sent = methods->GetSerializedSendMessage();
      if (sent != nullptr) bytes_->AddBytes(method_, static_cast<int64_t>(sent->Length()), 0);
    }
    if (methods->QueryInterceptionHookPoint(Hook::POST_RECV_MESSAGE)) {
      // Every service here is protobuf's: the generated code hands the interceptors its
      // messages as google::protobuf::MessageLite (null where none arrived: a stream's end).
      const void* received = methods->GetRecvMessage();
      if (received != nullptr) {
        bytes_->AddBytes(method_, 0,
                         static_cast<int64_t>(
                             static_cast<const google::protobuf::MessageLite*>(received)
                                 ->ByteSizeLong()));
      }
    }
    methods->Proceed();
  }

 private:
  base::CallStats* const bytes_;
  const std::string method_;
};

class ByteCounterFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ByteCounterFactory(base::CallStats* bytes) : bytes_(bytes) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    const absl::string_view path = info->method();  // "/package.Service/Method"
    return new ByteCounter(bytes_, path.substr(path.rfind('/') + 1));
  }

 private:
  base::CallStats* const bytes_;
};

}  // namespace

std::shared_ptr<grpc::Channel> NewChannel(const std::string& address,
                                          const ChannelOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_ca_pem;
    ssl.pem_cert_chain = options.tls_cert_pem;
    ssl.pem_private_key = options.tls_key_pem;
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  if (!options.tls_ca_pem.empty() && !options.tls_target_name.empty()) {
    args.SetSslTargetNameOverride(options.tls_target_name);
  }
  args.SetMaxReceiveMessageSize(kMaxMessageBytes);
  args.SetMaxSendMessageSize(std::max(options.max_send_bytes, kMaxMessageBytes));
  const int backoff_ms = static_cast<int>(absl::ToInt64Milliseconds(options.max_reconnect_backoff));
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, backoff_ms));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, std::min(100, backoff_ms));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
  if (options.bytes == nullptr) return grpc::CreateCustomChannel(address, credentials, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> counters;
  counters.push_back(std::make_unique<ByteCounterFactory>(options.bytes));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, credentials, args,
                                                                  std::move(counters));
}

ChannelOptions JobChannel(const JobTls& tls) {
  ChannelOptions options;
  if (tls.enabled()) {
    options.tls_ca_pem = tls.cert_pem;
    options.tls_target_name = kJobTlsName;
    options.tls_cert_pem = tls.cert_pem;
    options.tls_key_pem = tls.key_pem;
  }
  return options;
}

std::vector<std::string> PeerDnsNames(const grpc::ServerContext& ctx) {
  std::vector<std::string> out;
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr) return out;
  for (const grpc::string_ref& name : auth->FindPropertyValues(GRPC_X509_SAN_PROPERTY_NAME)) {
    out.emplace_back(name.data(), name.size());
  }
  return out;
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<Server> StartServer(const Endpoint& endpoint,
                                   const std::vector<grpc::Service*>& services) {
  if (endpoint.port < 0 || endpoint.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port ", endpoint.port, " is out of range"));
  }
  if (endpoint.tls_cert_pem.empty() != endpoint.tls_key_pem.empty()) {
    return absl::InvalidArgumentError("TLS needs both a certificate and a key");
  }
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!endpoint.tls_cert_pem.empty()) {
    // What gRPC would only report as a port it cannot open.
    if (!absl::StrContains(endpoint.tls_cert_pem, "-----BEGIN CERTIFICATE-----")) {
      return absl::InvalidArgumentError(
          "the TLS certificate is not PEM (no -----BEGIN CERTIFICATE----- line)");
    }
    if (!absl::StrContains(endpoint.tls_key_pem, "-----BEGIN") ||
        !absl::StrContains(endpoint.tls_key_pem, "PRIVATE KEY-----")) {
      return absl::InvalidArgumentError(
          "the TLS key is not a PEM private key (no -----BEGIN ... PRIVATE KEY----- line)");
    }
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({endpoint.tls_key_pem, endpoint.tls_cert_pem});
    // Mutual TLS: the token alone does not let a client in; its certificate must be the job's.
    ssl.pem_root_certs = endpoint.tls_ca_pem.empty() ? endpoint.tls_cert_pem : endpoint.tls_ca_pem;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    credentials = grpc::SslServerCredentials(ssl);
  }
  Server out;
  const std::string address = JoinHostPort(endpoint.host, endpoint.port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, credentials, &out.port);
  builder.SetMaxReceiveMessageSize(endpoint.max_message_bytes);
  builder.SetMaxSendMessageSize(endpoint.max_message_bytes);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (grpc::Service* service : services) builder.RegisterService(service);
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", address,
        endpoint.tls_cert_pem.empty()
            ? " (address in use, or not this host's)"
            : " (address in use, not this host's, or the TLS certificate and key do not match)"));
  }
  out.address = JoinHostPort(endpoint.host, out.port);
  return out;
}

void QuietLogs() {
  if (std::getenv("GRPC_VERBOSITY") != nullptr) return;
  gpr_set_log_function([](gpr_log_func_args*) {});
  // Protobuf's too: a peer's malformed message (a string field that is not UTF-8) would otherwise
  // put a line on a server's stderr per call; the call itself fails with its own error.
  google::protobuf::SetLogHandler(
      [](google::protobuf::LogLevel, const char*, int, const std::string&) {});
}

}  // namespace heterps::rpc
