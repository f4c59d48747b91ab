#include "heterps/rpc/certificates.h"

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdint>
#include <ctime>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"

namespace heterps::rpc {
namespace {

using Bio = std::unique_ptr<BIO, decltype(&BIO_free)>;
using Key = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using Cert = std::unique_ptr<X509, decltype(&X509_free)>;

// The PEM text of what `write` puts into a memory BIO.
template <typename Write>
absl::StatusOr<std::string> Pem(Write write) {
  Bio bio(BIO_new(BIO_s_mem()), BIO_free);
  if (bio == nullptr || write(bio.get()) != 1) return absl::InternalError("OpenSSL: PEM");
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

Bio ReadBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
}

Cert ParseCert(const std::string& pem) {
  Bio bio = ReadBio(pem);
  return Cert(bio == nullptr ? nullptr : PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr),
              X509_free);
}

absl::Time FromAsn1(const ASN1_TIME* t) {
  struct tm tm = {};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return absl::InfinitePast();
  return absl::FromTimeT(timegm(&tm));
}

}  // namespace

absl::StatusOr<JobTls> NewCertificate(const CertificateSpec& spec, const JobTls* issuer) {
  auto failed = [&](absl::string_view what) {
    return absl::InternalError(absl::StrCat("making the TLS certificate of '", spec.name,
                                            "': ", what, ": ",
                                            ERR_error_string(ERR_get_error(), nullptr)));
  };
  Cert issuer_cert(nullptr, X509_free);
  Key issuer_key(nullptr, EVP_PKEY_free);
  if (issuer != nullptr) {
    issuer_cert = ParseCert(issuer->cert_pem);
    Bio bio = ReadBio(issuer->key_pem);
    if (bio != nullptr) {
      issuer_key.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
    }
    if (issuer_cert == nullptr || issuer_key == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "signing '", spec.name, "': the CA's ", issuer_cert == nullptr ? "certificate" : "key",
          " is not PEM"));
    }
    if (X509_check_ca(issuer_cert.get()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("signing '", spec.name, "': the CA's certificate is not a CA's"));
    }
    if (X509_check_private_key(issuer_cert.get(), issuer_key.get()) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("signing '", spec.name, "': the CA's key is not its certificate's"));
    }
  }
  Key key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  if (key == nullptr) return failed("key");
  Cert cert(X509_new(), X509_free);
  if (cert == nullptr) return failed("certificate");
  uint64_t serial = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&serial), sizeof(serial)) != 1) {
    return failed("serial number");
  }
  X509_set_version(cert.get(), 2);  // v3
  ASN1_INTEGER_set_uint64(X509_get_serialNumber(cert.get()), serial >> 1);
  const time_t from = absl::ToTimeT(spec.not_before);
  const time_t to = absl::ToTimeT(spec.not_before + spec.valid_for);
  if (ASN1_TIME_set(X509_getm_notBefore(cert.get()), from) == nullptr ||
      ASN1_TIME_set(X509_getm_notAfter(cert.get()), to) == nullptr) {
    return failed("validity");
  }
  X509_set_pubkey(cert.get(), key.get());
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(spec.name.c_str()), -1, -1, 0);
  X509* signer = issuer_cert != nullptr ? issuer_cert.get() : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, signer, cert.get(), nullptr, nullptr, 0);
  const std::string san = absl::StrCat("DNS:", spec.name);
  const std::vector<std::pair<int, const char*>> extensions = {
      {NID_subject_alt_name, san.c_str()},
      {NID_basic_constraints, spec.ca ? "critical,CA:TRUE,pathlen:0" : "critical,CA:FALSE"},
      {NID_key_usage, spec.ca ? "critical,digitalSignature,keyCertSign"
                              : "critical,digitalSignature"},
      {NID_ext_key_usage, "serverAuth,clientAuth"},
      {NID_subject_key_identifier, "hash"},
      {NID_authority_key_identifier, "keyid"}};
  for (const auto& [nid, value] : extensions) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    if (ext == nullptr) return failed("extension");
    X509_add_ext(cert.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  EVP_PKEY* signing_key = issuer_key != nullptr ? issuer_key.get() : key.get();
  if (X509_sign(cert.get(), signing_key, EVP_sha256()) == 0) return failed("signature");
  JobTls out;
  HETERPS_ASSIGN_OR_RETURN(out.cert_pem,
                           Pem([&](BIO* bio) { return PEM_write_bio_X509(bio, cert.get()); }));
  HETERPS_ASSIGN_OR_RETURN(out.key_pem, Pem([&](BIO* bio) {
                             return PEM_write_bio_PrivateKey(bio, key.get(), nullptr, nullptr, 0,
                                                             nullptr, nullptr);
                           }));
  return out;
}

absl::StatusOr<JobTls> NewJobTls() {
  // Its own root: a CA certificate for the job's name, which signs nothing else.
  CertificateSpec spec;
  spec.name = kJobTlsName;
  spec.ca = true;
  return NewCertificate(spec);
}

absl::StatusOr<CertificateInfo> ReadCertificate(const std::string& pem) {
  Cert cert = ParseCert(pem);
  if (cert == nullptr) {
    return absl::InvalidArgumentError("not a PEM certificate (no -----BEGIN CERTIFICATE----- block)");
  }
  CertificateInfo info;
  info.not_before = FromAsn1(X509_get0_notBefore(cert.get()));
  info.not_after = FromAsn1(X509_get0_notAfter(cert.get()));
  char cn[256] = {};
  if (X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn,
                                sizeof(cn)) > 0) {
    info.common_name = cn;
  }
  auto* names = static_cast<GENERAL_NAMES*>(
      X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  if (names != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
      const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
      if (n->type != GEN_DNS) continue;
      const ASN1_STRING* s = n->d.dNSName;
      info.dns_names.emplace_back(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                  static_cast<size_t>(ASN1_STRING_length(s)));
    }
    GENERAL_NAMES_free(names);
  }
  return info;
}

absl::Status VerifyCertificate(const std::string& cert_pem, const std::string& ca_pem,
                               absl::Time at) {
  Cert cert = ParseCert(cert_pem);
  if (cert == nullptr) return absl::InvalidArgumentError("the certificate is not PEM");
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(),
                                                                X509_STORE_free);
  Bio bio = ReadBio(ca_pem);
  int roots = 0;
  while (bio != nullptr && store != nullptr) {
    Cert root(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), X509_free);
    if (root == nullptr) break;
    if (X509_STORE_add_cert(store.get(), root.get()) == 1) ++roots;
  }
  ERR_clear_error();  // the end of the PEM text
  if (roots == 0) return absl::InvalidArgumentError("the CA is not a PEM certificate");
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  if (ctx == nullptr || X509_STORE_CTX_init(ctx.get(), store.get(), cert.get(), nullptr) != 1) {
    return absl::InternalError("OpenSSL: a verification context");
  }
  X509_STORE_CTX_set_time(ctx.get(), 0, absl::ToTimeT(at));
  if (X509_verify_cert(ctx.get()) == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get())));
}

}  // namespace heterps::rpc
