// X.509 certificates for heterps' mutual TLS: a job's own (job_tls.h, NewJobTls), and a run's
// across regions, where a CA of the run signs one certificate per region and role
// (docs/regions.md, "Mutual TLS between regions"; `heterps certs` makes a set). Every certificate
// made here has a P-256 key, names one DNS name (its subject's CN and its one subjectAltName)
// and serves as both a TLS server and a client. Declared without gRPC's headers, for the
// command line.
//
//   CertificateSpec ca{.name = "heterps-regions-ca", .ca = true};
//   HETERPS_ASSIGN_OR_RETURN(JobTls root, NewCertificate(ca));
//   HETERPS_ASSIGN_OR_RETURN(JobTls us, NewCertificate({.name = "gateway.us.heterps"}, &root));
//
// Thread safety: functions of their arguments.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "heterps/rpc/job_tls.h"

namespace heterps::rpc {

struct CertificateSpec {
  std::string name;  // the CN and the one DNS subjectAltName
  bool ca = false;   // may sign certificates (no others below it: pathlen 0)
  // Valid from `not_before` for `valid_for`. The default starts an hour ago, so that a clock a
  // little behind this host's still takes it.
  absl::Time not_before = absl::Now() - absl::Hours(1);
  absl::Duration valid_for = absl::Hours(24 * 30);
};

// A new key and a certificate for `spec`, signed by `issuer` (a CA's certificate and key, as
// NewCertificate made one or as PEM files give them) or, where it is null, by its own key.
// InvalidArgument when the issuer's PEM does not parse, is not a CA's or its key is not its
// certificate's;
// Internal when OpenSSL fails otherwise.
absl::StatusOr<JobTls> NewCertificate(const CertificateSpec& spec, const JobTls* issuer = nullptr);

// What a PEM certificate (the first of a chain) says of itself.
struct CertificateInfo {
  std::vector<std::string> dns_names;  // its subjectAltName's DNS entries
  std::string common_name;             // its subject's CN ("" if none)
  absl::Time not_before, not_after;
};
// InvalidArgument when `pem` holds no certificate.
absl::StatusOr<CertificateInfo> ReadCertificate(const std::string& pem);

// OK where the first certificate of `cert_pem` chains to one of `ca_pem`'s and is valid at `at`;
// InvalidArgument with OpenSSL's reason otherwise ("certificate has expired", "unable to get
// local issuer certificate"), for a check before serving that a peer would otherwise report
// as a failed handshake.
absl::Status VerifyCertificate(const std::string& cert_pem, const std::string& ca_pem,
                               absl::Time at = absl::Now());

}  // namespace heterps::rpc
