#include "tools/metrics_http.h"

#include <httplib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "heterps/base/host.h"
#include "absl/synchronization/mutex.h"
#include "heterps/base/file.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/token.h"

namespace heterps::tools {

struct MetricsHttp::Impl {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::string port_file;  // removed at stop; empty: none
  absl::Mutex mu;
  int64_t started ABSL_GUARDED_BY(mu) = 0;   // scrapes begun
  int64_t answered ABSL_GUARDED_BY(mu) = 0;  // scrapes answered, in the order they began
};

MetricsHttp::MetricsHttp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetricsHttp::~MetricsHttp() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  if (!impl_->port_file.empty()) std::remove(impl_->port_file.c_str());
}

int MetricsHttp::port() const { return impl_->port; }

void MetricsHttp::RemoveOnStop(std::string path) { impl_->port_file = std::move(path); }

bool MetricsHttp::ServeFinal(absl::Duration at_most, const std::atomic<bool>* stop) {
  const absl::Time end = absl::Now() + at_most;
  absl::MutexLock lock(&impl_->mu);
  const int64_t begun = impl_->started;
  auto answered = [&]() ABSL_SHARED_LOCKS_REQUIRED(impl_->mu) { return impl_->answered > begun; };
  // In slices, so that a stop signal ends the wait within one.
  while (absl::Now() < end && (stop == nullptr || !stop->load())) {
    const absl::Duration slice = std::min(end - absl::Now(), absl::Milliseconds(50));
    if (impl_->mu.AwaitWithTimeout(absl::Condition(&answered), slice)) return true;
  }
  return answered();
}

absl::StatusOr<std::unique_ptr<MetricsHttp>> MetricsHttp::Start(const MetricsHttpOptions& options,
                                                                Render render) {
  const bool loopback = base::IsLoopbackHost(options.host);
  if (!loopback && options.token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metrics: serving on ", options.host,
        " (not loopback) needs the job's token, which scrapes then send as a bearer token"));
  }
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics: port ", options.port, " is not in 0..65535"));
  }
  auto impl = std::make_unique<Impl>();
  const std::string token = loopback ? "" : options.token;
  Impl* raw = impl.get();
  impl->server.Get("/metrics", [render = std::move(render), token, raw](
                                   const httplib::Request& request, httplib::Response& response) {
    if (!token.empty()) {
      const std::string auth = request.get_header_value("Authorization");
      const std::string want = "Bearer " + token;
      if (!base::TokensEqual(auth, want)) {
        response.status = 401;
        response.set_header("WWW-Authenticate", "Bearer");
        response.set_content("metrics: the job's token is required (Authorization: Bearer)\n",
                             "text/plain");
        return;
      }
    }
    int64_t mine = 0;
    {
      absl::MutexLock lock(&raw->mu);
      mine = ++raw->started;
    }
    absl::StatusOr<std::string> text = render();
    if (!text.ok()) {
      response.status = 503;
      response.set_content(absl::StrCat("metrics: ", text.status().message(), "\n"), "text/plain");
      return;
    }
    response.set_content(*text, "text/plain; version=0.0.4; charset=utf-8");
    // The latest scrape answered with the text, by the order they began: ServeFinal waits for
    // one begun after its call, since one begun earlier may have read "running". (The server
    // finishes writing a response it has begun before it stops.)
    absl::MutexLock lock(&raw->mu);
    raw->answered = std::max(raw->answered, mine);
  });
  // SO_REUSEADDR only: the library's default adds SO_REUSEPORT, with which a second server on a
  // taken port binds and shares its scrapes instead of failing.
  impl->server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  errno = 0;
  if (options.port == 0) {
    impl->port = impl->server.bind_to_any_port(options.host);
  } else {
    impl->port = impl->server.bind_to_port(options.host, options.port) ? options.port : -1;
  }
  if (impl->port <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", options.host, ":",
                                               options.port, ": ",
                                               errno != 0 ? std::strerror(errno) : "bind failed"));
  }
  impl->thread = std::thread([raw] { raw->server.listen_after_bind(); });
  // stop() before the loop runs would be lost: the destructor waits for it to be running.
  for (int i = 0; i < 5000 && !impl->server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<MetricsHttp>(new MetricsHttp(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<MetricsHttp>> ServeMetricsIfAsked(const MetricsHttpOptions& options,
                                                                 const std::string& port_file,
                                                                 MetricsHttp::Render render) {
  if (options.port < 0) return nullptr;
  HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<MetricsHttp> server,
                           MetricsHttp::Start(options, std::move(render)));
  if (!port_file.empty()) {
    HETERPS_RETURN_IF_ERROR(
        base::WriteFileAtomically(port_file, absl::StrCat(server->port(), "\n")));
    server->RemoveOnStop(port_file);
  }
  std::fprintf(stderr, "heterps: metrics on http://%s:%d/metrics\n", options.host.c_str(),
               server->port());
  return server;
}

}  // namespace heterps::tools
