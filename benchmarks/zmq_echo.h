// The parameter server's messages over plain ZeroMQ (libzmq: the transport ps-lite uses), with no
// table behind them: ps_bench's second reference for the transport, beside the gRPC echo of the
// same messages (docs/benchmarks.md, "Parameter server").
//
//   HETERPS_ASSIGN_OR_RETURN(auto servers, ZmqEchoServers::Start(2, /*dim=*/16));
//   HETERPS_ASSIGN_OR_RETURN(auto client, servers->Connect(servers->addresses()[0]));
//   HETERPS_RETURN_IF_ERROR(client->Call(keys, grads, /*push=*/false));
//
// Each server is one thread with a REP socket bound to an ephemeral TCP port on 127.0.0.1, as a
// ps-lite server has one receiving thread, and the context has an I/O thread per server; a client
// is one REQ socket. A server whose reply cannot be sent stops, and its clients' calls then fail
// after their 30 s timeout. A pull sends the keys
// (8 bytes each) and gets back keys x dim floats of bytes; a push sends the keys and their
// gradients and gets back an empty message. Errors name the address and libzmq's reason.
//
// Thread safety: the servers' object may be shared; a Client is used by one thread at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace heterps::benchmarks {

class ZmqEchoServers {
 public:
  class Client {
   public:
    ~Client();
    Client(const Client&) = delete;
    Client& operator=(const Client&) = delete;

    // One request and its reply; checks the reply's size.
    absl::Status Call(absl::Span<const uint64_t> keys, absl::Span<const float> grads, bool push);

   private:
    friend class ZmqEchoServers;
    Client(void* socket, std::string address, int dim)
        : socket_(socket), address_(std::move(address)), dim_(dim) {}
    void* socket_;
    const std::string address_;
    const int dim_;
    std::vector<char> request_;
  };

  // `servers` threads answering pulls of rows of `dim` floats.
  static absl::StatusOr<std::unique_ptr<ZmqEchoServers>> Start(int servers, int dim);
  // Stops the servers. Every Client must be gone first.
  ~ZmqEchoServers();
  ZmqEchoServers(const ZmqEchoServers&) = delete;
  ZmqEchoServers& operator=(const ZmqEchoServers&) = delete;

  const std::vector<std::string>& addresses() const { return addresses_; }
  absl::StatusOr<std::unique_ptr<Client>> Connect(const std::string& address);

 private:
  ZmqEchoServers(void* context, int dim) : context_(context), dim_(dim) {}
  void Serve(void* socket);

  void* const context_;
  const int dim_;
  std::atomic<bool> stop_{false};
  std::vector<std::string> addresses_;
  std::vector<std::thread> threads_;
};

}  // namespace heterps::benchmarks
