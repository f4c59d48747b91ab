#include "tests/region_net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "heterps/base/file.h"
#include "heterps/base/subprocess.h"

namespace heterps::testing {

namespace {

using Clock = std::chrono::steady_clock;

// Runs argv to its end; its output in the error where it fails.
absl::Status Run(const std::vector<std::string>& argv) {
  char log[] = "/tmp/heterps-region-net-XXXXXX";
  const int fd = mkstemp(log);
  if (fd >= 0) close(fd);
  auto child = base::Subprocess::Start(argv, log);
  absl::Status status;
  if (!child.ok()) {
    status = child.status();
  } else if (absl::StatusOr<int> code = (*child)->Wait(absl::Seconds(20)); !code.ok()) {
    status = code.status();
  } else if (*code != 0) {
    absl::StatusOr<std::string> output = base::ReadTextFile(log);
    status = absl::FailedPreconditionError(
        absl::StrCat("`", absl::StrJoin(argv, " "), "` exited with ", *code, ": ",
                     output.ok() ? *output : std::string("(no output)")));
  }
  unlink(log);
  return status;
}

}  // namespace

// One direction of a relayed connection: a reader that stamps each chunk with its due time, and
// a writer that sends it then.
struct Pipe {
  int src = -1, dst = -1;
  Clock::duration latency{};
  std::atomic<uint64_t>* bytes = nullptr;
  const std::atomic<bool>* cut = nullptr;  // while true, nothing is sent
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<Clock::time_point, std::string>> queue;  // empty data: the end
  std::thread reader, writer;

  void Start() {
    reader = std::thread([this] {
      std::string chunk(64 << 10, '\0');
      for (;;) {
        const ssize_t n = recv(src, chunk.data(), chunk.size(), 0);
        std::lock_guard<std::mutex> lock(mu);
        if (n <= 0) {
          queue.emplace_back(Clock::now() + latency, std::string());
          cv.notify_one();
          return;
        }
        bytes->fetch_add(static_cast<uint64_t>(n));
        queue.emplace_back(Clock::now() + latency, chunk.substr(0, static_cast<size_t>(n)));
        cv.notify_one();
      }
    });
    writer = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu);
      for (;;) {
        cv.wait(lock, [&] { return !queue.empty(); });
        const Clock::time_point due = queue.front().first;
        if (Clock::now() < due) {
          cv.wait_until(lock, due);
          continue;
        }
        if (cut->load()) {
          cv.wait_for(lock, std::chrono::milliseconds(10));
          continue;
        }
        std::string data = std::move(queue.front().second);
        queue.pop_front();
        if (data.empty()) {
          shutdown(dst, SHUT_WR);
          return;
        }
        lock.unlock();
        const bool sent = SendAll(dst, data.data(), data.size());
        lock.lock();
        if (!sent) {
          shutdown(src, SHUT_RDWR);  // the reader ends, and with it this
        }
      }
    });
  }
  void Join() {
    if (reader.joinable()) reader.join();
    if (writer.joinable()) writer.join();
  }
};

struct RegionNet::Connection {
  int client = -1, upstream = -1;
  Pipe up, down;
};

absl::StatusOr<std::unique_ptr<RegionNet>> RegionNet::Create(std::vector<std::string> regions,
                                                             std::vector<RegionNetLink> links) {
  const size_t n = regions.size();
  if (n < 2 || n > 200) return absl::InvalidArgumentError("RegionNet: 2 to 200 regions");
  std::unique_ptr<RegionNet> net(new RegionNet());
  net->regions_ = std::move(regions);
  net->links_.resize(n * n);
  net->bytes_ = std::make_unique<std::atomic<uint64_t>[]>(n * n);
  net->cut_ = std::make_unique<std::atomic<bool>[]>(n * n);
  for (size_t i = 0; i < n * n; ++i) net->cut_[i] = false;
  std::vector<bool> given(n * n);
  for (const RegionNetLink& link : links) {
    const int a = net->Index(link.from), b = net->Index(link.to);
    if (a < 0 || b < 0 || a == b || !(link.bytes_per_second > 0) || !(link.latency_seconds >= 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("RegionNet: bad link ", link.from, " -> ", link.to));
    }
    net->links_[a * n + b] = link;
    given[a * n + b] = true;
  }
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a != b && !given[a * n + b]) {
        return absl::InvalidArgumentError(
            absl::StrCat("RegionNet: no link ", net->regions_[a], " -> ", net->regions_[b]));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const std::string ns = absl::StrCat("hps", getpid(), "-", i);
    if (absl::Status made = Run({"ip", "netns", "add", ns}); !made.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "no network namespaces here (root and iproute2 are needed): ", made.message()));
    }
    net->namespaces_.push_back(ns);
    if (absl::Status up = Run({"ip", "-n", ns, "link", "set", "lo", "up"}); !up.ok()) return up;
  }
  // Pair (i, j), i < j: a veth pair, i's end (Address(i, j)) in i's namespace and j's in j's;
  // each end's egress shaped to its direction's rate.
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      // Names unique to this process (a veth is made in the root namespace, then moved).
      const std::string vi = absl::StrCat("h", getpid() % 100000, "v", j);
      const std::string vj = absl::StrCat("h", getpid() % 100000, "v", i);
      const std::string& ni = net->namespaces_[i];
      const std::string& nj = net->namespaces_[j];
      std::vector<std::vector<std::string>> commands = {
          {"ip", "link", "add", vi, "netns", ni, "type", "veth", "peer", "name", vj, "netns", nj},
          {"ip", "-n", ni, "addr", "add",
           net->Address(static_cast<int>(i), static_cast<int>(j)) + "/24", "dev", vi},
          {"ip", "-n", nj, "addr", "add",
           net->Address(static_cast<int>(j), static_cast<int>(i)) + "/24", "dev", vj},
          {"ip", "-n", ni, "link", "set", vi, "up"},
          {"ip", "-n", nj, "link", "set", vj, "up"}};
      for (const auto& [ns, dev, from, to] :
           {std::tuple<std::string, std::string, size_t, size_t>{ni, vi, i, j}, {nj, vj, j, i}}) {
        // The link's rate is of TCP payload; tbf counts whole frames: 1448 payload bytes in a
        // frame of 1514.
        const double rate = net->links_[from * n + to].bytes_per_second * 1514 / 1448;
        // tbf's bucket: at least 10 ms of the rate and a few full-size packets.
        const double burst = std::max(rate / 100, 32.0 * 1024);
        commands.push_back({"ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root",
                            "tbf", "rate", absl::StrCat(static_cast<int64_t>(rate * 8), "bit"),
                            "burst", absl::StrCat(static_cast<int64_t>(burst)), "latency",
                            "200ms"});
      }
      for (const auto& command : commands) {
        if (absl::Status ran = Run(command); !ran.ok()) return ran;
      }
    }
  }
  return net;
}

RegionNet::~RegionNet() {
  stopping_ = true;
  for (int listener : listeners_) shutdown(listener, SHUT_RDWR);
  for (std::thread& t : acceptors_) t.join();
  for (int listener : listeners_) close(listener);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : connections_) {
      shutdown(c->client, SHUT_RDWR);
      shutdown(c->upstream, SHUT_RDWR);
    }
  }
  for (auto& c : connections_) {
    c->up.Join();
    c->down.Join();
    close(c->client);
    close(c->upstream);
  }
  for (const std::string& ns : namespaces_) Run({"ip", "netns", "del", ns}).IgnoreError();
}

int RegionNet::Index(const std::string& region) const {
  auto it = std::find(regions_.begin(), regions_.end(), region);
  return it == regions_.end() ? -1 : static_cast<int>(it - regions_.begin());
}

const RegionNetLink& RegionNet::Link(int from, int to) const {
  return links_[static_cast<size_t>(from) * regions_.size() + to];
}

std::string RegionNet::Address(int to, int from) const {
  const int i = std::min(to, from), j = std::max(to, from);
  const int n = static_cast<int>(regions_.size());
  const int pair = i * n + j;  // < 40,000: two bytes of the address
  return absl::StrCat("10.", 100 + pair / 250, ".", pair % 250, ".", to == i ? 1 : 2);
}

std::string RegionNet::Namespace(const std::string& region) const {
  const int i = Index(region);
  return i < 0 ? std::string() : namespaces_[i];
}

std::vector<std::string> RegionNet::Exec(const std::string& region,
                                         const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {"ip", "netns", "exec", Namespace(region)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

absl::StatusOr<int> RegionNet::Socket(const std::string& region, int domain, int type) const {
  const std::string ns = Namespace(region);
  if (ns.empty()) return absl::InvalidArgumentError(absl::StrCat("no region ", region));
  // A thread of its own enters the namespace: a socket stays in the one it was made in.
  int fd = -1;
  std::string error;
  std::thread([&] {
    const int handle = open(absl::StrCat("/var/run/netns/", ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (handle < 0 || setns(handle, CLONE_NEWNET) != 0) {
      error = absl::StrCat("entering namespace ", ns, ": ", std::strerror(errno));
    } else {
      fd = socket(domain, type | SOCK_CLOEXEC, 0);
      if (fd < 0) error = absl::StrCat("socket in ", ns, ": ", std::strerror(errno));
    }
    if (handle >= 0) close(handle);
  }).join();
  if (fd < 0) return absl::InternalError(error);
  return fd;
}

absl::StatusOr<int> RegionNet::Relay(const std::string& from, const std::string& to, int to_port) {
  const int a = Index(from), b = Index(to);
  if (a < 0 || b < 0 || a == b) {
    return absl::InvalidArgumentError(absl::StrCat("no link ", from, " -> ", to));
  }
  absl::StatusOr<int> listener = Socket(from, AF_INET, SOCK_STREAM);
  if (!listener.ok()) return listener.status();
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t size = sizeof(address);
  if (bind(*listener, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      listen(*listener, 64) != 0 ||
      getsockname(*listener, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    close(*listener);
    return absl::InternalError(absl::StrCat("relay ", from, " -> ", to, ": ", strerror(errno)));
  }
  listeners_.push_back(*listener);
  acceptors_.emplace_back(&RegionNet::Accept, this, *listener, a, b, to_port);
  return ntohs(address.sin_port);
}

void RegionNet::Accept(int listener, int from, int to, int to_port) {
  const size_t n = regions_.size();
  while (!stopping_) {
    const int client = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) {
      if (stopping_ || errno == EINVAL || errno == EBADF) return;
      continue;
    }
    absl::StatusOr<int> upstream = Socket(regions_[from], AF_INET, SOCK_STREAM);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(to_port));
    inet_pton(AF_INET, Address(to, from).c_str(), &address.sin_addr);
    if (!upstream.ok() ||
        connect(*upstream, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      if (upstream.ok()) close(*upstream);
      close(client);
      continue;
    }
    auto c = std::make_unique<Connection>();
    c->client = client;
    c->upstream = *upstream;
    auto setup = [&](Pipe& p, int src, int dst, int a, int b) {
      p.src = src;
      p.dst = dst;
      p.latency = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(Link(a, b).latency_seconds));
      p.bytes = &bytes_[static_cast<size_t>(a) * n + b];
      p.cut = &cut_[static_cast<size_t>(a) * n + b];
    };
    setup(c->up, client, *upstream, from, to);
    setup(c->down, *upstream, client, to, from);
    c->up.Start();
    c->down.Start();
    std::lock_guard<std::mutex> lock(mu_);
    connections_.push_back(std::move(c));
  }
}

bool SendAll(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t sent = send(fd, data, n, MSG_NOSIGNAL);
    if (sent <= 0) return false;
    data += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool RecvAll(int fd, char* out, size_t n) {
  while (n > 0) {
    const ssize_t got = recv(fd, out, n, 0);
    if (got <= 0) return false;
    out += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

uint64_t RegionNet::RelayedBytes(const std::string& from, const std::string& to) const {
  const int a = Index(from), b = Index(to);
  if (a < 0 || b < 0) return 0;
  return bytes_[static_cast<size_t>(a) * regions_.size() + b].load();
}

void RegionNet::Cut(const std::string& from, const std::string& to, bool cut) {
  const int a = Index(from), b = Index(to);
  if (a >= 0 && b >= 0) cut_[static_cast<size_t>(a) * regions_.size() + b] = cut;
}

}  // namespace heterps::testing
