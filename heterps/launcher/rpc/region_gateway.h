// The regions' mailbox over gRPC (launcher/region_windows.h, RegionMailbox): each region's
// coordinator serves a gateway (region_gateway.proto) at its address of the regions' list, which
// takes the other regions' windows, and sends its own to theirs. A window's message travels in
// parts of at most `part_bytes`; a part that arrives twice (a retry after a lost answer) is taken
// once. A peer that cannot be reached (not started yet, a cut link) is retried every 100 ms to
// 1 s until the call's deadline.
//
//   HETERPS_ASSIGN_OR_RETURN(auto gateway, RegionGateway::Start(options));
//   RegionWindows windows(windows_options, *gateway);
//
// A region whose job ends early says so (Abandon): the others' Receive of its windows then ends
// Aborted, naming it and why.
//
// Every call carries `token` where it is not empty, and a gateway refuses calls without it.
// With TLS (docs/regions.md, "Mutual TLS between regions") every channel between gateways is
// mutual TLS under the run's CA: a region's gateway shows a certificate for
// RegionGatewayName(its region), a sender checks that the gateway it reaches has the certificate
// of the region it meant, and a gateway takes a part only from the region its sender's
// certificate names (PermissionDenied otherwise). Without it the channels are plaintext.
//
// Thread safety: Send and Receive may be called from any thread at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "heterps/launcher/region_windows.h"

namespace heterps::launcher::rpc {

struct RegionGatewayOptions {
  std::vector<std::string> names;      // every region, in the regions' order
  std::vector<std::string> addresses;  // host:port of each region's gateway
  int self = 0;                        // this region: serves at addresses[self]
  std::string token;                   // empty: no token
  // Mutual TLS between the regions: all three or none (plaintext). PEM: the run's CA (the roots
  // every gateway's certificate chains to), and this region's certificate, for
  // RegionGatewayName(names[self]), and its key.
  std::string tls_ca_pem, tls_cert_pem, tls_key_pem;
  int64_t part_bytes = 4 << 20;        // the largest part of a window's message, roughly
};

// The DNS name a region's gateway certificate carries: "gateway.<region>.heterps".
std::string RegionGatewayName(const std::string& region);

class RegionGateway final : public RegionMailbox {
 public:
  // Listens at addresses[self]. InvalidArgument for a bad list or address, or for TLS settings
  // that no peer would take (half of them, a certificate that is not this region's gateway's,
  // expired or not the CA's); Unavailable when the address cannot be served (in use, not this
  // host's).
  static absl::StatusOr<std::unique_ptr<RegionGateway>> Start(const RegionGatewayOptions& options);
  ~RegionGateway() override;

  absl::Status Send(int to, const RegionMessage& message, absl::Time deadline) override;
  absl::StatusOr<RegionMessage> Receive(int from, int64_t window, absl::Time deadline) override;

  // Tells every other region that this region's job has ended (`why`), so that they fail at once
  // rather than wait for its windows to their deadline: one try each, within 5 s.
  void Abandon(const std::string& why);
  // Ends every Receive waiting now or later (Cancelled) and every Send's retries: for a region
  // whose job has ended, so that a window in flight does not hold it to the window's deadline.
  void Close();

  // The bytes of the messages this gateway sent region `to` (every try counted), and took.
  int64_t sent_bytes(int to) const;
  int64_t received_bytes() const;
  const std::string& address() const;

 private:
  class Service;
  struct Peer;
  explicit RegionGateway(const RegionGatewayOptions& options);

  const RegionGatewayOptions o_;
  std::unique_ptr<Service> service_;
  struct Served;
  std::unique_ptr<Served> server_;
  std::vector<std::unique_ptr<Peer>> peers_;
};

}  // namespace heterps::launcher::rpc
