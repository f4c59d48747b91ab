// Mutual TLS between the regions' gateways (region_gateway.h, docs/regions.md): a window crosses
// encrypted (a capture of the wire holds none of its bytes, where a plaintext run's does); a
// certificate from another CA, an expired one, and a region's certificate used to speak for
// another region are refused; a gateway whose own certificate no peer would take does not start;
// and a region's gateway certificate gets nowhere on a region's parameter servers, which take
// only their own job's roles.
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/launcher/rpc/region_gateway.grpc.pb.h"
#include "heterps/launcher/rpc/region_gateway.h"
#include "heterps/launcher/rpc/region_gateway_testing.h"
#include "heterps/ps/rpc/grpc_ps_client.h"
#include "heterps/ps/rpc/ps_server.h"
#include "heterps/rpc/certificates.h"
#include "heterps/rpc/rpc.h"

namespace heterps::launcher::rpc {
namespace {

using ::testing::HasSubstr;
namespace hr = heterps::rpc;

// A relay on loopback that forwards every connection to `to_port` and keeps every byte it
// carried, both ways: what a capture of the link between two regions holds.
class Tap {
 public:
  explicit Tap(int to_port) : to_port_(to_port) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = Loopback(0);
    EXPECT_EQ(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listener_, 16), 0);
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    threads_.emplace_back([this] { Accept(); });
  }
  ~Tap() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    close(listener_);
  }
  int port() const { return port_; }
  std::string captured() const {
    std::lock_guard<std::mutex> lock(mu_);
    return captured_;
  }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }
  void Accept() {
    std::vector<std::thread> connections;
    while (!stop_) {
      pollfd p{listener_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const int in = accept(listener_, nullptr, nullptr);
      if (in < 0) continue;
      const int out = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in to = Loopback(to_port_);
      if (connect(out, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
        close(in);
        close(out);
        continue;
      }
      connections.emplace_back([this, in, out] { Pump(in, out); });
    }
    for (std::thread& t : connections) t.join();
  }
  void Pump(int a, int b) {
    char buffer[65536];
    bool open = true;
    while (open && !stop_) {
      pollfd p[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
      if (poll(p, 2, 50) <= 0) continue;
      for (int i = 0; i < 2 && open; ++i) {
        if ((p[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
        const ssize_t n = read(p[i].fd, buffer, sizeof(buffer));
        if (n <= 0) {
          open = false;
          break;
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          captured_.append(buffer, static_cast<size_t>(n));
        }
        const int to = i == 0 ? b : a;
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t w = write(to, buffer + sent, static_cast<size_t>(n - sent));
          if (w <= 0) {
            open = false;
            break;
          }
          sent += w;
        }
      }
    }
    close(a);
    close(b);
  }

  const int to_port_;
  int listener_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  mutable std::mutex mu_;
  std::string captured_;
};

// A run's CA and every region's gateway certificate, as `heterps certs` makes them.
struct RunCerts {
  hr::JobTls ca;
  std::vector<hr::JobTls> regions;
};

RunCerts MakeCerts(int regions, absl::Time not_before = absl::Now() - absl::Hours(1)) {
  RunCerts out;
  hr::CertificateSpec ca;
  ca.name = "test-regions-ca";
  ca.ca = true;
  absl::StatusOr<hr::JobTls> root = hr::NewCertificate(ca);
  EXPECT_TRUE(root.ok()) << root.status();
  out.ca = *root;
  for (int r = 0; r < regions; ++r) {
    hr::CertificateSpec spec;
    spec.name = RegionGatewayName(absl::StrCat("region-", r));
    spec.not_before = not_before;
    absl::StatusOr<hr::JobTls> cert = hr::NewCertificate(spec, &out.ca);
    EXPECT_TRUE(cert.ok()) << cert.status();
    out.regions.push_back(*cert);
  }
  return out;
}

void UseTls(const RunCerts& certs, int region, RegionGatewayOptions* o) {
  o->tls_ca_pem = certs.ca.cert_pem;
  o->tls_cert_pem = certs.regions[region].cert_pem;
  o->tls_key_pem = certs.regions[region].key_pem;
}

// A window's rows whose bytes spell a marker, for a capture to look for.
constexpr char kMarker[] = "WINDOW-PLAINTEXT-MARKER-0123456";  // 32 bytes with its NUL

RegionMessage Marked(int from, int64_t window) {
  RegionMessage m = Message(from, window, 50);
  std::vector<uint64_t> keys(sizeof(kMarker) / sizeof(uint64_t));
  std::memcpy(keys.data(), kMarker, sizeof(kMarker));
  m.deltas.sparse[0].keys = keys;
  m.deltas.sparse[0].deltas.assign(keys.size() * m.deltas.sparse[0].dim, 0.5f);
  return m;
}

// Two regions whose link from region 0 to region 1 runs through a tap; with or without TLS.
std::string CaptureOfAWindow(bool tls) {
  const std::vector<int> ports = Ports(2);
  Tap tap(ports[1]);
  const RunCerts certs = MakeCerts(2);
  RegionGatewayOptions o0 = Options(2, 0, ports), o1 = Options(2, 1, ports);
  o0.addresses[1] = absl::StrCat("127.0.0.1:", tap.port());
  if (tls) {
    UseTls(certs, 0, &o0);
    UseTls(certs, 1, &o1);
  }
  auto a = RegionGateway::Start(o0);
  auto b = RegionGateway::Start(o1);
  EXPECT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(b.ok()) << b.status();
  if (!a.ok() || !b.ok()) return "";
  const RegionMessage sent = Marked(0, 2);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  const absl::Status status = (*a)->Send(1, sent, deadline);
  EXPECT_TRUE(status.ok()) << status;
  absl::StatusOr<RegionMessage> got = (*b)->Receive(0, 2, deadline);
  EXPECT_TRUE(got.ok()) << got.status();
  if (got.ok()) ExpectSame(*got, sent);
  // And back, straight to region 0's gateway.
  EXPECT_TRUE((*b)->Send(0, Marked(1, 2), deadline).ok());
  EXPECT_TRUE((*a)->Receive(1, 2, deadline).ok());
  return tap.captured();
}

TEST(RegionGatewayTlsTest, AWindowCrossesEncrypted) {
  const std::string plain = CaptureOfAWindow(false);
  // The tap sees a plaintext window's bytes (so the next check can fail)...
  EXPECT_THAT(plain, HasSubstr(kMarker));
  const std::string encrypted = CaptureOfAWindow(true);
  // ... and none of them under TLS, though as many bytes crossed.
  EXPECT_GT(encrypted.size(), 50 * 4 * 8u);
  EXPECT_EQ(encrypted.find(kMarker), std::string::npos);
}

TEST(RegionGatewayTlsTest, ACertificateOfAnotherCaIsRefused) {
  const std::vector<int> ports = Ports(2);
  const RunCerts run = MakeCerts(2), stranger = MakeCerts(2);
  RegionGatewayOptions o0 = Options(2, 0, ports), o1 = Options(2, 1, ports);
  UseTls(run, 0, &o0);
  UseTls(stranger, 1, &o1);  // region 1's certificate and CA are another run's
  auto a = RegionGateway::Start(o0);
  auto b = RegionGateway::Start(o1);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  // Each side finds the other's certificate is not the region's it meant, and says so at once
  // rather than retrying to the deadline.
  const absl::Time start = absl::Now();
  const absl::Status to_b = (*a)->Send(1, Message(0, 1, 5), absl::Now() + absl::Seconds(60));
  EXPECT_EQ(to_b.code(), absl::StatusCode::kUnauthenticated) << to_b;
  EXPECT_THAT(to_b.message(), HasSubstr(absl::StrCat("region 'region-1' (127.0.0.1:", ports[1])));
  EXPECT_THAT(to_b.message(), HasSubstr("certificate verify failed"));
  EXPECT_THAT(to_b.message(), HasSubstr("has no certificate for gateway.region-1.heterps from "
                                        "this run's CA"));
  const absl::Status to_a = (*b)->Send(0, Message(1, 1, 5), absl::Now() + absl::Seconds(60));
  EXPECT_EQ(to_a.code(), absl::StatusCode::kUnauthenticated) << to_a;
  EXPECT_THAT(to_a.message(), HasSubstr("region 'region-0'"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  EXPECT_EQ((*a)->received_bytes(), 0);
  EXPECT_EQ((*b)->received_bytes(), 0);
}

// Posts one part to region 0's gateway with `cert` as the client's certificate, as region `from`.
absl::Status PostAs(const RunCerts& run, const hr::JobTls& cert, int port, int from,
                    const std::string& expect_server = RegionGatewayName("region-0")) {
  hr::ChannelOptions channel;
  channel.tls_ca_pem = run.ca.cert_pem;
  channel.tls_target_name = expect_server;
  channel.tls_cert_pem = cert.cert_pem;
  channel.tls_key_pem = cert.key_pem;
  auto stub = wire::RegionGateway::NewStub(
      hr::NewChannel(absl::StrCat("127.0.0.1:", port), channel));
  wire::WindowPart part;
  part.set_window(1);
  part.set_from(from);
  part.set_from_name(absl::StrCat("region-", from));
  part.set_parts(1);
  grpc::ClientContext ctx;
  hr::PrepareCall(ctx, "", absl::Seconds(3));
  wire::PostReply reply;
  return hr::FromGrpc(stub->Post(&ctx, part, &reply), "post");
}

TEST(RegionGatewayTlsTest, ARegionCannotSpeakForAnother) {
  const std::vector<int> ports = Ports(3);
  const RunCerts run = MakeCerts(3);
  RegionGatewayOptions o0 = Options(3, 0, ports);
  UseTls(run, 0, &o0);
  auto a = RegionGateway::Start(o0);
  ASSERT_TRUE(a.ok()) << a.status();
  // Region 2's certificate, posting as region 1: refused, naming both.
  const absl::Status forged = PostAs(run, run.regions[2], ports[0], 1);
  EXPECT_EQ(forged.code(), absl::StatusCode::kPermissionDenied) << forged;
  EXPECT_THAT(forged.message(), HasSubstr("from region 'region-1' came with a certificate for "
                                          "gateway.region-2.heterps"));
  const absl::StatusOr<RegionMessage> none =
      (*a)->Receive(1, 1, absl::Now() + absl::Milliseconds(300));
  EXPECT_EQ(none.status().code(), absl::StatusCode::kDeadlineExceeded) << none.status();
  // As itself it is taken (the same channel settings: only the claim differed).
  EXPECT_TRUE(PostAs(run, run.regions[2], ports[0], 2).ok());
  EXPECT_TRUE((*a)->Receive(2, 1, absl::Now() + absl::Seconds(5)).ok());
  // A sender expecting another region's gateway at this address does not talk to it.
  EXPECT_FALSE(PostAs(run, run.regions[2], ports[0], 2, RegionGatewayName("region-1")).ok());
  // Nor does a client with no certificate at all.
  EXPECT_FALSE(PostAs(run, hr::JobTls{}, ports[0], 2).ok());
}

TEST(RegionGatewayTlsTest, AnExpiredCertificateIsRefused) {
  const std::vector<int> ports = Ports(2);
  const RunCerts run = MakeCerts(2);
  // Signed by the run's CA, valid for 30 days from 31 days ago.
  hr::CertificateSpec spec;
  spec.name = RegionGatewayName("region-1");
  spec.not_before = absl::Now() - absl::Hours(24 * 31);
  absl::StatusOr<hr::JobTls> expired = hr::NewCertificate(spec, &run.ca);
  ASSERT_TRUE(expired.ok()) << expired.status();
  RegionGatewayOptions o0 = Options(2, 0, ports), o1 = Options(2, 1, ports);
  UseTls(run, 0, &o0);
  UseTls(run, 1, &o1);
  o1.tls_cert_pem = expired->cert_pem;
  o1.tls_key_pem = expired->key_pem;
  // Its own gateway does not start with it...
  const auto b = RegionGateway::Start(o1);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(b.status().message(), HasSubstr("region gateway of 'region-1'"));
  EXPECT_THAT(b.status().message(), HasSubstr("expired"));
  // ... and a client showing it gets nowhere with region 0's.
  auto a = RegionGateway::Start(o0);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(PostAs(run, *expired, ports[0], 1).ok());
  EXPECT_TRUE(PostAs(run, run.regions[1], ports[0], 1).ok());  // the valid one does
  EXPECT_EQ(
      (*a)->Receive(1, 1, absl::Now() + absl::Seconds(5)).status().code(), absl::StatusCode::kOk);
}

TEST(RegionGatewayTlsTest, SettingsNoPeerWouldTakeAreRefusedAtStart) {
  const std::vector<int> ports = Ports(2);
  const RunCerts run = MakeCerts(2), stranger = MakeCerts(2);
  const auto refused = [&](const RegionGatewayOptions& o, const std::string& why) {
    const auto g = RegionGateway::Start(o);
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << why;
    EXPECT_THAT(g.status().message(), HasSubstr(why));
  };
  RegionGatewayOptions o = Options(2, 0, ports);
  UseTls(run, 0, &o);
  o.tls_key_pem.clear();
  refused(o, "TLS needs the run's CA, this region's certificate and its key");
  UseTls(run, 1, &o);  // region 1's certificate on region 0's gateway
  refused(o, "its certificate names gateway.region-1.heterps, not gateway.region-0.heterps");
  UseTls(run, 0, &o);
  o.tls_ca_pem = stranger.ca.cert_pem;
  refused(o, "its certificate against the run's CA: unable to get local issuer certificate");
  o.tls_cert_pem = "not a certificate";
  refused(o, "its certificate: not a PEM certificate");
  UseTls(run, 0, &o);
  EXPECT_TRUE(RegionGateway::Start(o).ok());
}

// A region's parameter servers speak TLS under their job's own certificate: another region's
// gateway certificate, signed by the run's CA, is not one of the job's roles, and asking them for
// a table gets nowhere.
TEST(RegionGatewayTlsTest, ARegionsCertificateGetsNowhereOnAnotherRegionsServers) {
  absl::StatusOr<hr::JobTls> job = hr::NewJobTls();
  ASSERT_TRUE(job.ok()) << job.status();
  const RunCerts run = MakeCerts(2);
  ps::rpc::PsServerOptions options;
  options.data_dir = ::testing::TempDir() + "/region_tls_ps";
  options.tls_cert_pem = job->cert_pem;
  options.tls_key_pem = job->key_pem;
  auto server = ps::rpc::PsServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  const auto connect = [&](const hr::JobTls& shown) {
    ps::rpc::GrpcPsClientOptions o;
    o.servers = {(*server)->address()};
    o.connect_timeout = absl::Seconds(1);
    const hr::ChannelOptions channel = hr::JobChannel(*job);  // trusting the servers
    o.tls_ca_pem = channel.tls_ca_pem;
    o.tls_target_name = channel.tls_target_name;
    o.tls_cert_pem = shown.cert_pem;
    o.tls_key_pem = shown.key_pem;
    return ps::rpc::GrpcPsClient::Connect(o);
  };
  EXPECT_TRUE(connect(*job).ok());  // the job's own roles
  const auto other = connect(run.regions[1]);
  EXPECT_FALSE(other.ok());
}

}  // namespace
}  // namespace heterps::launcher::rpc
