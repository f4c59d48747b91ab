// A job's TLS: one certificate and key that every role of the job serves with, shows as a client
// and trusts (mutual TLS: the certificate is the job's CA, rpc.h). `heterps train --tls` makes a self-signed one for each job (NewJobTls); a user may give
// their own (`--tls-cert`, `--tls-key`). The certificate names kJobTlsName, which every channel
// of the job checks whatever address it dials (rpc.h, JobChannel): the roles' addresses are not
// known when it is made. Declared without gRPC's headers, for the command line.
//
// Thread safety: plain values and a function of nothing.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace heterps::rpc {

struct JobTls {
  std::string cert_pem, key_pem;  // both or neither; neither: plaintext
  bool enabled() const { return !cert_pem.empty(); }
};

inline constexpr char kJobTlsName[] = "heterps-job";

// A new P-256 key and a self-signed CA certificate for kJobTlsName, valid for 30 days from an
// hour ago (certificates.h, NewCertificate). Internal if OpenSSL fails.
absl::StatusOr<JobTls> NewJobTls();

}  // namespace heterps::rpc
