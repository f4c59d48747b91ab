// `heterps certs`: the certificates of a run across regions (docs/regions.md, "Mutual TLS between
// regions"): a CA of the run and, signed by it, one certificate per region for its gateway
// (named rpc RegionGatewayName: gateway.<region>.heterps), each with its key.
//
//   heterps certs --regions us,eu,ap --out certs/ [--days 30]
//   heterps certs --regions sa --out certs/ --ca certs/ca.pem --ca-key certs/ca-key.pem  # one more
//
// Writes ca.pem and ca-key.pem (where no --ca is given), <region>.pem and <region>-key.pem into
// --out (the keys readable by this user only), and prints a table of what it wrote. Each region's
// job takes --region-ca ca.pem --region-cert <region>.pem --region-key <region>-key.pem; the CA's
// key stays with whoever signs, and no region needs it. Exit codes: 0 written, 2 bad flags, a
// file that already exists (nothing is overwritten), a CA that does not parse, a write error.
#pragma once

#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace heterps::tools {

struct CertsFlags {
  std::vector<std::string> regions;
  std::string out;
  int days = 30;
  std::string ca, ca_key;  // an existing CA to sign with; empty: a new one
};

CLI::App* AddCertsCommand(CLI::App& app, CertsFlags& flags);
int RunCerts(const CertsFlags& flags);

}  // namespace heterps::tools
