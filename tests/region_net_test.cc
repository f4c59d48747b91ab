// The regions the cross-region tests run in (tests/region_net.h) measure what they were set: the
// round trip through a relay is the two links' latencies, a bulk transfer runs at its link's
// rate, and the relay counts what crossed.
#include "tests/region_net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace heterps::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A server in one region: 'p' is answered with 'p'; 's' and a length: that many bytes are read,
// then 'd' answered; 'r' and a length: that many bytes are sent.
void Serve(int listener) {
  const int fd = accept(listener, nullptr, nullptr);
  if (fd < 0) return;
  std::vector<char> buffer(1 << 20);
  char command;
  while (RecvAll(fd, &command, 1)) {
    if (command == 'p') {
      if (!SendAll(fd, "p", 1)) break;
      continue;
    }
    uint64_t length = 0;
    if (!RecvAll(fd, reinterpret_cast<char*>(&length), sizeof(length))) break;
    bool ok = true;
    for (uint64_t done = 0; ok && done < length;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), length - done));
      ok = command == 's' ? RecvAll(fd, buffer.data(), n) : SendAll(fd, buffer.data(), n);
      done += n;
    }
    if (!ok || (command == 's' && !SendAll(fd, "d", 1))) break;
  }
  close(fd);
}

TEST(RegionNetTest, TheLinksMeasureWhatTheyWereSet) {
  // a -> b: 4 MB/s, 30 ms; b -> a: 8 MB/s, 20 ms.
  constexpr double kUp = 4e6, kDown = 8e6, kUpLatency = 0.030, kDownLatency = 0.020;
  auto net =
      RegionNet::Create({"a", "b"}, {{"a", "b", kUp, kUpLatency}, {"b", "a", kDown, kDownLatency}});
  if (!net.ok()) GTEST_SKIP() << net.status();
  auto listener = (*net)->Socket("b", AF_INET, SOCK_STREAM);
  ASSERT_TRUE(listener.ok()) << listener.status();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  socklen_t size = sizeof(address);
  ASSERT_EQ(bind(*listener, reinterpret_cast<sockaddr*>(&address), size), 0);
  ASSERT_EQ(listen(*listener, 4), 0);
  ASSERT_EQ(getsockname(*listener, reinterpret_cast<sockaddr*>(&address), &size), 0);
  std::thread server(Serve, *listener);
  auto relay = (*net)->Relay("a", "b", ntohs(address.sin_port));
  ASSERT_TRUE(relay.ok()) << relay.status();
  auto client = (*net)->Socket("a", AF_INET, SOCK_STREAM);
  ASSERT_TRUE(client.ok()) << client.status();
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(*relay));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(*client, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0)
      << std::strerror(errno);
  const int one = 1;
  setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));

  // The round trip: the two latencies (the median of 15).
  std::vector<double> trips;
  for (int i = 0; i < 15; ++i) {
    const Clock::time_point start = Clock::now();
    char answer = 0;
    ASSERT_TRUE(SendAll(*client, "p", 1));
    ASSERT_TRUE(RecvAll(*client, &answer, 1));
    trips.push_back(Since(start));
  }
  std::sort(trips.begin(), trips.end());
  const double rtt = trips[trips.size() / 2];
  EXPECT_NEAR(rtt, kUpLatency + kDownLatency, 0.1 * (kUpLatency + kDownLatency));

  // Bulk each way, about 2 s of the link's rate: the rate within 10% once the round trip the
  // transfer also waits for is taken off.
  auto bulk = [&](char command, double rate) {
    const uint64_t length = static_cast<uint64_t>(2 * rate);
    std::vector<char> buffer(1 << 20);
    const Clock::time_point start = Clock::now();
    char header[1 + sizeof(length)] = {command};
    std::memcpy(header + 1, &length, sizeof(length));
    EXPECT_TRUE(SendAll(*client, header, sizeof(header)));
    for (uint64_t done = 0; done < length;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(buffer.size(), length - done));
      const bool ok =
          command == 's' ? SendAll(*client, buffer.data(), n) : RecvAll(*client, buffer.data(), n);
      if (!ok) {
        ADD_FAILURE() << "transfer broken";
        return 0.0;
      }
      done += n;
    }
    char done = 0;
    if (command == 's') {
      EXPECT_TRUE(RecvAll(*client, &done, 1));
    }
    return static_cast<double>(length) / (Since(start) - rtt);
  };
  const uint64_t up_before = (*net)->RelayedBytes("a", "b");
  EXPECT_NEAR(bulk('s', kUp), kUp, 0.1 * kUp);
  EXPECT_GE((*net)->RelayedBytes("a", "b") - up_before, static_cast<uint64_t>(2 * kUp));
  EXPECT_NEAR(bulk('r', kDown), kDown, 0.1 * kDown);
  EXPECT_GE((*net)->RelayedBytes("b", "a"), static_cast<uint64_t>(2 * kDown));
  close(*client);
  server.join();
  close(*listener);
}

TEST(RegionNetTest, AMissingLinkIsRefused) {
  auto net = RegionNet::Create({"a", "b"}, {{"a", "b", 1e6, 0}});
  EXPECT_EQ(net.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(net.status().message(), "RegionNet: no link b -> a");
}

}  // namespace
}  // namespace heterps::testing
