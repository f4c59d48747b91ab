#include "tools/certs_command.h"

#include <sys/stat.h>

#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "heterps/base/env.h"
#include "heterps/base/file.h"
#include "heterps/base/status_macros.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/launcher/rpc/region_gateway.h"
#include "heterps/rpc/certificates.h"
#include "tools/cli_common.h"
#include "tools/table.h"

namespace heterps::tools {
namespace {

absl::Status WriteKey(const std::string& path, const std::string& pem) {
  const mode_t old = umask(077);  // readable by this user only
  absl::Status written = base::WriteFileAtomically(path, pem);
  umask(old);
  return written;
}

absl::Status Certs(const CertsFlags& flags, Table* table) {
  if (flags.ca.empty() != flags.ca_key.empty()) {
    return absl::InvalidArgumentError("--ca and --ca-key go together");
  }
  for (const std::string& region : flags.regions) {
    if (!config::IsRegionName(region)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--regions: '", region, "' is not a region's name (letters, digits, '-', '_', '.')"));
    }
  }
  base::Env& env = *base::DefaultEnv();
  HETERPS_RETURN_IF_ERROR(env.CreateDirs(flags.out));
  // Every file checked first, so that nothing is written where one would be overwritten.
  std::vector<std::string> files;
  if (flags.ca.empty()) files = {flags.out + "/ca.pem", flags.out + "/ca-key.pem"};
  for (const std::string& region : flags.regions) {
    files.push_back(absl::StrCat(flags.out, "/", region, ".pem"));
    files.push_back(absl::StrCat(flags.out, "/", region, "-key.pem"));
  }
  for (const std::string& file : files) {
    if (env.FileExists(file)) {
      return absl::AlreadyExistsError(
          absl::StrCat(file, " exists: heterps certs overwrites no certificate or key"));
    }
  }
  // --days from now (each certificate starts an hour ago, for clocks a little behind).
  const absl::Duration valid = absl::Hours(24) * flags.days + absl::Hours(1);
  const auto add = [&](const std::string& name, const std::string& file, const rpc::JobTls& cert) {
    absl::StatusOr<rpc::CertificateInfo> info = rpc::ReadCertificate(cert.cert_pem);
    table->AddRow({name, file,
                   info.ok() ? absl::FormatTime("%Y-%m-%d %H:%M UTC", info->not_after,
                                                absl::UTCTimeZone())
                             : std::string("?")});
  };
  rpc::JobTls ca;
  if (flags.ca.empty()) {
    rpc::CertificateSpec spec;
    spec.name = "heterps-regions-ca";
    spec.ca = true;
    spec.valid_for = valid;
    HETERPS_ASSIGN_OR_RETURN(ca, rpc::NewCertificate(spec));
    HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(files[0], ca.cert_pem));
    HETERPS_RETURN_IF_ERROR(WriteKey(files[1], ca.key_pem));
    add(spec.name + " (the run's CA)", files[0], ca);
  } else {
    HETERPS_ASSIGN_OR_RETURN(ca.cert_pem, base::ReadTextFile(flags.ca));
    HETERPS_ASSIGN_OR_RETURN(ca.key_pem, ReadSecret(flags.ca_key, "--ca-key"));
  }
  for (const std::string& region : flags.regions) {
    rpc::CertificateSpec spec;
    spec.name = launcher::rpc::RegionGatewayName(region);
    spec.valid_for = valid;
    absl::StatusOr<rpc::JobTls> cert = rpc::NewCertificate(spec, &ca);
    if (!cert.ok()) {
      return absl::Status(cert.status().code(),
                          absl::StrCat(flags.ca.empty() ? "" : "--ca: ", cert.status().message()));
    }
    const std::string file = absl::StrCat(flags.out, "/", region, ".pem");
    HETERPS_RETURN_IF_ERROR(base::WriteFileAtomically(file, cert->cert_pem));
    HETERPS_RETURN_IF_ERROR(WriteKey(absl::StrCat(flags.out, "/", region, "-key.pem"), cert->key_pem));
    add(spec.name, file, *cert);
  }
  return absl::OkStatus();
}

}  // namespace

CLI::App* AddCertsCommand(CLI::App& app, CertsFlags& flags) {
  CLI::App* cmd = app.add_subcommand(
      "certs",
      "Make the certificates of a run across regions: a CA and one certificate per region's "
      "gateway (heterps train --region-ca, --region-cert, --region-key)");
  cmd->add_option("--regions", flags.regions, "the regions, comma-separated")
      ->required()
      ->delimiter(',');
  cmd->add_option("--out", flags.out, "the directory to write them into (made where missing)")
      ->required();
  cmd->add_option("--days", flags.days, "days the certificates are valid (default 30)")
      ->check(CLI::Range(1, 3650));
  CLI::Option* ca = cmd->add_option(
      "--ca", flags.ca, "sign with this CA's certificate instead of making a new CA (a region more)");
  CLI::Option* key = cmd->add_option("--ca-key", flags.ca_key, "the key of --ca");
  ca->needs(key);
  key->needs(ca);
  return cmd;
}

int RunCerts(const CertsFlags& flags) {
  Table table({"certificate", "file", "valid until"}, {false, false, false});
  if (absl::Status status = Certs(flags, &table); !status.ok()) return Fail(status);
  std::cout << table.Render();
  return 0;
}

}  // namespace heterps::tools
