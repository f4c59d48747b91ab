#include "heterps/rpc/rpc.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "grpc/support/log.h"
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
    out.push_back(std::move(m));
  }
  return out;
}

void PrepareCall(grpc::ClientContext& ctx, const std::string& token, absl::Duration timeout) {
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  if (!token.empty()) ctx.AddMetadata(base::kTokenHeader, token);
}

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
  return grpc::CreateCustomChannel(address, credentials, args);
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

namespace {

// The PEM text of what `write` puts into a memory BIO.
template <typename Write>
absl::StatusOr<std::string> Pem(Write write) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new(BIO_s_mem()), BIO_free);
  if (bio == nullptr || write(bio.get()) != 1) return absl::InternalError("OpenSSL: PEM");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

}  // namespace

absl::StatusOr<JobTls> NewJobTls() {
  auto failed = [](absl::string_view what) {
    return absl::InternalError(absl::StrCat("making the job's TLS certificate: ", what, ": ",
                                            ERR_error_string(ERR_get_error(), nullptr)));
  };
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (key == nullptr) return failed("key");
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  if (cert == nullptr) return failed("certificate");
  uint64_t serial = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof(serial)) != 1) {
    return failed("serial number");
  }
  X509_set_version(cert.get(), 2);  // v3
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 30L * 24 * 3600);
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(kJobTlsName), -1, -1, 0);
  X509_set_issuer_name(cert.get(), name);
  // Its own root: a CA certificate for the job's name, which signs nothing else.
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert.get(), cert.get(), nullptr, nullptr, 0);
  const std::string san = absl::StrCat("DNS:", kJobTlsName);
  for (const auto& [nid, value] : {std::pair<int, const char*>{NID_subject_alt_name, san.c_str()},
                                   {NID_basic_constraints, "critical,CA:TRUE,pathlen:0"},
                                   {NID_key_usage, "critical,digitalSignature,keyCertSign"},
                                   {NID_ext_key_usage, "serverAuth,clientAuth"}}) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext == nullptr) return failed("extension");
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  if (X509_sign(cert.get(), key.get(), EVP_sha256()) == 0) return failed("signature");
  JobTls tls;
  HETERPS_ASSIGN_OR_RETURN(tls.cert_pem,
                           Pem([&](BIO* bio) { return PEM_write_bio_X509(bio, cert.get()); }));
  HETERPS_ASSIGN_OR_RETURN(tls.key_pem, Pem([&](BIO* bio) {
                             return PEM_write_bio_PrivateKey(bio, key.get(), nullptr, nullptr, 0,
                                                             nullptr, nullptr);
                           }));
  return tls;
}

bool IsLoopbackHost(absl::string_view host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || absl::StartsWith(host, "127.");
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
    ssl.pem_root_certs = endpoint.tls_cert_pem;
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
