#include "benchmarks/zmq_echo.h"

#include <zmq.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace heterps::benchmarks {
namespace {

absl::Status ZmqError(const std::string& address, const char* what) {
  return absl::UnavailableError(
      absl::StrCat("zeromq ", address, ": ", what, ": ", zmq_strerror(zmq_errno())));
}

// How long a server's receive waits before it looks at the stop flag again.
constexpr int kPollMs = 50;

}  // namespace

absl::StatusOr<std::unique_ptr<ZmqEchoServers>> ZmqEchoServers::Start(int servers, int dim) {
  void* context = zmq_ctx_new();
  if (context == nullptr) return ZmqError("context", "zmq_ctx_new");
  // An I/O thread per server, as each ps-lite process has its own (the clients share them).
  if (zmq_ctx_set(context, ZMQ_IO_THREADS, servers) != 0) {
    absl::Status error = ZmqError("context", "I/O threads");
    zmq_ctx_term(context);
    return error;
  }
  std::unique_ptr<ZmqEchoServers> out(new ZmqEchoServers(context, dim));
  for (int s = 0; s < servers; ++s) {
    void* socket = zmq_socket(context, ZMQ_REP);
    if (socket == nullptr) return ZmqError("tcp://127.0.0.1:*", "zmq_socket");
    const int timeout = kPollMs, linger = 0;
    if (zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout, sizeof(timeout)) != 0 ||
        zmq_setsockopt(socket, ZMQ_LINGER, &linger, sizeof(linger)) != 0 ||
        zmq_bind(socket, "tcp://127.0.0.1:*") != 0) {
      absl::Status error = ZmqError("tcp://127.0.0.1:*", "bind");
      zmq_close(socket);
      return error;
    }
    char endpoint[256];
    size_t size = sizeof(endpoint);
    if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, endpoint, &size) != 0) {
      absl::Status error = ZmqError("tcp://127.0.0.1:*", "the bound port");
      zmq_close(socket);
      return error;
    }
    out->addresses_.emplace_back(endpoint);
    out->threads_.emplace_back([server = out.get(), socket] { server->Serve(socket); });
  }
  return out;
}

ZmqEchoServers::~ZmqEchoServers() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  zmq_ctx_term(context_);
}

void ZmqEchoServers::Serve(void* socket) {
  zmq_msg_t request;
  zmq_msg_init(&request);
  std::vector<char> rows;
  while (!stop_.load(std::memory_order_relaxed)) {
    if (zmq_msg_recv(&request, socket, 0) < 0) continue;  // the timeout (or an interrupt)
    const size_t bytes = zmq_msg_size(&request);
    const bool push = bytes > 0 && static_cast<const char*>(zmq_msg_data(&request))[0] == 1;
    // A pull's keys follow the kind's byte (a push, and a message with no kind: empty reply).
    const size_t keys = push || bytes == 0 ? 0 : (bytes - 1) / sizeof(uint64_t);
    rows.resize(keys * dim_ * sizeof(float));
    // A REP socket must send before it receives again: a reply that cannot go ends the server
    // (its clients' calls then time out, naming it).
    int sent;
    do {
      sent = zmq_send(socket, rows.data(), rows.size(), 0);
    } while (sent < 0 && zmq_errno() == EINTR);
    if (sent < 0) break;
  }
  zmq_msg_close(&request);
  zmq_close(socket);
}

absl::StatusOr<std::unique_ptr<ZmqEchoServers::Client>> ZmqEchoServers::Connect(
    const std::string& address) {
  void* socket = zmq_socket(context_, ZMQ_REQ);
  if (socket == nullptr) return ZmqError(address, "zmq_socket");
  const int timeout = 30'000;
  if (zmq_setsockopt(socket, ZMQ_RCVTIMEO, &timeout, sizeof(timeout)) != 0 ||
      zmq_connect(socket, address.c_str()) != 0) {
    absl::Status error = ZmqError(address, "connect");
    zmq_close(socket);
    return error;
  }
  return std::unique_ptr<Client>(new Client(socket, address, dim_));
}

ZmqEchoServers::Client::~Client() {
  const int linger = 0;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(socket_);
}

absl::Status ZmqEchoServers::Client::Call(absl::Span<const uint64_t> keys,
                                          absl::Span<const float> grads, bool push) {
  const size_t key_bytes = keys.size() * sizeof(uint64_t);
  const size_t grad_bytes = push ? grads.size() * sizeof(float) : 0;
  request_.resize(1 + key_bytes + grad_bytes);
  request_[0] = push ? 1 : 0;
  std::memcpy(request_.data() + 1, keys.data(), key_bytes);
  if (push) std::memcpy(request_.data() + 1 + key_bytes, grads.data(), grad_bytes);
  if (zmq_send(socket_, request_.data(), request_.size(), 0) < 0) {
    return ZmqError(address_, "send");
  }
  zmq_msg_t reply;
  zmq_msg_init(&reply);
  if (zmq_msg_recv(&reply, socket_, 0) < 0) {
    absl::Status error = ZmqError(address_, "receive");
    zmq_msg_close(&reply);
    return error;
  }
  const size_t got = zmq_msg_size(&reply);
  zmq_msg_close(&reply);
  const size_t want = push ? 0 : keys.size() * dim_ * sizeof(float);
  if (got != want) {
    return absl::InternalError(absl::StrCat("zeromq ", address_, ": a reply of ", got,
                                            " bytes where ", want, " were due"));
  }
  return absl::OkStatus();
}

}  // namespace heterps::benchmarks
