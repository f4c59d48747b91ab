// What the gateway tests share (region_gateway_test.cc, region_gateway_tls_test.cc): free
// loopback ports, the regions' options on them, a window's message of known rows and its
// comparison.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "heterps/launcher/rpc/region_gateway.h"

namespace heterps::launcher::rpc {

inline int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

inline RegionGatewayOptions Options(int regions, int self, const std::vector<int>& ports) {
  RegionGatewayOptions o;
  for (int r = 0; r < regions; ++r) {
    o.names.push_back(absl::StrCat("region-", r));
    o.addresses.push_back(absl::StrCat("127.0.0.1:", ports[r]));
  }
  o.self = self;
  return o;
}

inline std::vector<int> Ports(int n) {
  std::vector<int> ports;
  for (int i = 0; i < n; ++i) ports.push_back(FreePort());
  return ports;
}

inline RegionMessage Message(int from, int64_t window, int rows) {
  RegionMessage m;
  m.window = window;
  m.from = from;
  m.total_steps = 17;
  m.deltas.samples = 123;
  std::mt19937_64 rng(window * 10 + from);
  for (int t = 0; t < 3; ++t) {
    worker::RegionExport::Sparse& s = m.deltas.sparse.emplace_back();
    s.table = t;
    s.dim = t == 1 ? 0 : 4 + t;
    if (t == 1) continue;  // a table that sends nothing
    for (int i = 0; i < rows; ++i) s.keys.push_back(i * 7 + t);
    for (size_t i = 0; i < s.keys.size() * s.dim; ++i) s.deltas.push_back(rng() % 1000 / 7.0f);
  }
  for (int b = 0; b < 2; ++b) {
    worker::RegionExport::Dense& d = m.deltas.dense.emplace_back();
    d.table = 99;
    d.block = b;
    if (b == 0) d.delta.assign(300, 0.25f);
  }
  return m;
}

inline void ExpectSame(const RegionMessage& a, const RegionMessage& b) {
  EXPECT_EQ(a.window, b.window);
  EXPECT_EQ(a.from, b.from);
  EXPECT_EQ(a.total_steps, b.total_steps);
  EXPECT_EQ(a.deltas.samples, b.deltas.samples);
  ASSERT_EQ(a.deltas.sparse.size(), b.deltas.sparse.size());
  for (size_t t = 0; t < a.deltas.sparse.size(); ++t) {
    EXPECT_EQ(a.deltas.sparse[t].table, b.deltas.sparse[t].table);
    EXPECT_EQ(a.deltas.sparse[t].keys, b.deltas.sparse[t].keys);
    EXPECT_EQ(a.deltas.sparse[t].deltas, b.deltas.sparse[t].deltas);
  }
  ASSERT_EQ(a.deltas.dense.size(), b.deltas.dense.size());
  for (size_t i = 0; i < a.deltas.dense.size(); ++i) {
    EXPECT_EQ(a.deltas.dense[i].block, b.deltas.dense[i].block);
    EXPECT_EQ(a.deltas.dense[i].delta, b.deltas.dense[i].delta);
  }
}

}  // namespace heterps::launcher::rpc
