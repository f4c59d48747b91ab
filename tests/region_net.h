// Regions on one machine, for tests of what crosses between them: each region a network namespace,
// each pair of regions joined by a veth pair whose two ends shape what they send with `tbf` (the
// bandwidth of each direction), and a relay in this process for each ordered pair that delays
// every chunk it forwards by the link's one-way latency (netem is not available everywhere: the
// relay keeps a queue per direction and releases each chunk at its due time). The relay also
// counts the bytes each way, for tests that check what crossed.
//
//   auto net = RegionNet::Create({"a", "b"}, {{"a", "b", 5e6, 0.025}, {"b", "a", 10e6, 0.015}});
//   if (!net.ok()) GTEST_SKIP() << net.status();   // no namespaces here (not root, no iproute2)
//   // A server in region b, listening on 0.0.0.0:port there; a client in region a reaches it at
//   // 127.0.0.1:relay, through the link a -> b and back over b -> a.
//   int relay = *(*net)->Relay("a", "b", port);
//   std::vector<std::string> argv = (*net)->Exec("a", {"heterps", ...});   // a process in a
//
// Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2; Create says which is missing.
// Namespaces are named after this process (hps<pid>-<region index>) and deleted by the
// destructor, which also stops the relays.
//
// Thread safety: Create, Relay and the destructor from one thread; Socket, RelayedBytes and Cut
// from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace heterps::testing {

struct RegionNetLink {
  std::string from, to;
  double bytes_per_second = 0;  // > 0, of TCP payload: tbf on `from`'s end of the pair's veth
  double latency_seconds = 0;   // >= 0: added by the relay to every chunk from -> to
};

// Sends (receives) exactly `n` bytes on a stream socket; false where the connection ends or
// fails first.
bool SendAll(int fd, const char* data, size_t n);
bool RecvAll(int fd, char* out, size_t n);

class RegionNet {
 public:
  // The regions (two or more, distinct) and a link for every ordered pair of them.
  // FailedPrecondition where this machine cannot make namespaces (naming the command and its
  // output), InvalidArgument for a missing or bad link.
  static absl::StatusOr<std::unique_ptr<RegionNet>> Create(std::vector<std::string> regions,
                                                           std::vector<RegionNetLink> links);
  ~RegionNet();
  RegionNet(const RegionNet&) = delete;
  RegionNet& operator=(const RegionNet&) = delete;

  // The namespace of `region` (for `ip netns exec`), and `argv` run inside it.
  std::string Namespace(const std::string& region) const;
  std::vector<std::string> Exec(const std::string& region,
                                const std::vector<std::string>& argv) const;
  // A new socket (socket(2)'s domain and type) in `region`'s namespace; the caller closes it.
  absl::StatusOr<int> Socket(const std::string& region, int domain, int type) const;
  // Starts a relay from `from` to `to`: a port on 127.0.0.1 in `from`'s namespace whose
  // connections reach port `to_port` of `to` (a server listening on 0.0.0.0 there), across the
  // pair's veth, each direction delayed by its link's latency.
  absl::StatusOr<int> Relay(const std::string& from, const std::string& to, int to_port);
  // Bytes the relays have carried from `from` to `to` so far.
  uint64_t RelayedBytes(const std::string& from, const std::string& to) const;
  // Cuts the link from `from` to `to` (`cut`), or mends it: while cut, the relays hold what they
  // read in that direction (connections stay open, as over a WAN that drops every packet for a
  // while), and release it all when mended.
  void Cut(const std::string& from, const std::string& to, bool cut);

 private:
  struct Connection;
  RegionNet() = default;
  int Index(const std::string& region) const;  // -1: none
  const RegionNetLink& Link(int from, int to) const;
  // The address of region `to` on the veth it shares with `from`.
  std::string Address(int to, int from) const;
  void Accept(int listener, int from, int to, int to_port);

  std::vector<std::string> regions_, namespaces_;
  std::vector<RegionNetLink> links_;                // [from * R + to]
  std::unique_ptr<std::atomic<uint64_t>[]> bytes_;  // [from * R + to]
  std::unique_ptr<std::atomic<bool>[]> cut_;        // [from * R + to]
  std::atomic<bool> stopping_{false};
  std::vector<int> listeners_;
  std::vector<std::thread> acceptors_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Connection>> connections_;  // guarded by mu_
};

}  // namespace heterps::testing
