// The /metrics endpoint: Prometheus text served over HTTP (cpp-httplib) from threads of its own,
// rendered afresh for every scrape.
//
//   MetricsHttpOptions options;
//   options.port = 9400;                                 // 0: any free port
//   HETERPS_ASSIGN_OR_RETURN(auto server, MetricsHttp::Start(options, [&] { return Render(); }));
//   ... server->port() ...
//
// GET /metrics answers 200 with the text (Content-Type text/plain; version=0.0.4), or 503 with the
// renderer's error; anything else is 404. Loopback (127.0.0.1, ::1, localhost) by default; on any
// other address a token is required, and each scrape must carry it as `Authorization: Bearer
// <token>` (compared in constant time; 401 otherwise), as Prometheus's `authorization` setting
// sends it. The server stops when the object is destroyed.
//
// The end of a job: `ServeFinal` keeps the endpoint up until one scrape has read what `render`
// gives now (the end state, "done" or "failed") or a time has passed, so that a scraper sees how
// the job ended rather than a last "running" and then a refused connection. The port file that
// ServeMetricsIfAsked wrote is removed when the object is destroyed.
//
// Thread safety: `render` is called from the server's threads, several at a time if scrapes
// overlap; it must be thread-safe. The methods are for the thread that started the server.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace heterps::tools {

struct MetricsHttpOptions {
  std::string host = "127.0.0.1";
  int port = 0;       // 0: a free one
  std::string token;  // asked of every scrape where host is not loopback (and required there)
};

class MetricsHttp {
 public:
  using Render = std::function<absl::StatusOr<std::string>()>;

  // InvalidArgument for a non-loopback host without a token or a port outside 0..65535;
  // Unavailable "metrics: cannot listen on <host>:<port>: <why>".
  static absl::StatusOr<std::unique_ptr<MetricsHttp>> Start(const MetricsHttpOptions& options,
                                                            Render render);
  ~MetricsHttp();

  int port() const;

  // Blocks until a scrape that began after this call has been answered with the text (not a
  // 503), for at most `at_most`, or until `*stop` (if given) turns true: how long a finished job
  // stays scrapeable. True when such a scrape came.
  bool ServeFinal(absl::Duration at_most, const std::atomic<bool>* stop = nullptr);

  // Removes `path` when the server stops (its port file).
  void RemoveOnStop(std::string path);

 private:
  struct Impl;
  explicit MetricsHttp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What the commands do with --metrics-port: nothing (nullptr) when `options.port` < 0; else the
// endpoint, started with `render`, its port written to `port_file` (unless empty; removed when
// the endpoint stops) and its address said on stderr.
absl::StatusOr<std::unique_ptr<MetricsHttp>> ServeMetricsIfAsked(const MetricsHttpOptions& options,
                                                                 const std::string& port_file,
                                                                 MetricsHttp::Render render);

}  // namespace heterps::tools
