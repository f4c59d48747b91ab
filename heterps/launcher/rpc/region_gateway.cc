#include "heterps/launcher/rpc/region_gateway.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "heterps/base/status_macros.h"
#include "heterps/launcher/rpc/region_gateway.grpc.pb.h"
#include "heterps/rpc/certificates.h"
#include "heterps/rpc/rpc.h"

namespace heterps::launcher::rpc {
namespace {

namespace hr = heterps::rpc;

template <typename T>
std::string Bytes(const T* data, size_t n) {
  return std::string(reinterpret_cast<const char*>(data), n * sizeof(T));
}

template <typename T>
bool Append(const std::string& bytes, std::vector<T>* out) {
  if (bytes.size() % sizeof(T) != 0) return false;
  const size_t at = out->size();
  out->resize(at + bytes.size() / sizeof(T));
  if (!bytes.empty()) std::memcpy(out->data() + at, bytes.data(), bytes.size());
  return true;
}

// The message cut into parts of about `part_bytes`: every table and block named in the first
// part (so the receiver knows them where they send nothing), rows sliced across the parts.
std::vector<wire::WindowPart> Cut(const RegionMessage& m, const std::string& name,
                                  int64_t part_bytes) {
  std::vector<wire::WindowPart> parts;
  int64_t room = 0;
  const auto next = [&]() -> wire::WindowPart& {
    wire::WindowPart& p = parts.emplace_back();
    p.set_window(m.window);
    p.set_flush(m.flush);
    p.set_hub(m.hub);
    p.set_merge(m.merge);
    p.set_from(m.from);
    p.set_from_name(name);
    p.set_total_steps(m.total_steps);
    p.set_sync_steps(m.sync_steps);
    p.set_delay(m.delay);
    p.set_threshold(m.threshold);
    p.set_eager_threshold(m.eager_threshold);
    p.set_samples(m.deltas.samples);
    p.set_tables(static_cast<int32_t>(m.deltas.sparse.size()));
    p.set_blocks(static_cast<int32_t>(m.deltas.dense.size()));
    room = part_bytes;
    return p;
  };
  next();
  for (const worker::RegionTraffic& t : m.traffic) {
    wire::LinkTraffic* l = parts.back().add_traffic();
    l->set_from(t.from);
    l->set_to(t.to);
    l->set_bytes(t.bytes);
    l->set_messages(t.messages);
  }
  for (size_t t = 0; t < m.deltas.sparse.size(); ++t) {
    const worker::RegionExport::Sparse& s = m.deltas.sparse[t];
    const int64_t row_bytes = static_cast<int64_t>(sizeof(uint64_t) + sizeof(float) * s.dim);
    size_t at = 0;
    do {
      if (room <= 0 && at < s.keys.size()) next();
      const size_t rows = std::min<size_t>(s.keys.size() - at,
                                           static_cast<size_t>(std::max<int64_t>(1, room / row_bytes)));
      wire::WindowRows* r = parts.back().add_rows();
      r->set_index(static_cast<int32_t>(t));
      r->set_table(s.table);
      r->set_dim(s.dim);
      r->set_keys(Bytes(s.keys.data() + at, rows));
      r->set_deltas(Bytes(s.deltas.data() + at * s.dim, rows * s.dim));
      room -= static_cast<int64_t>(rows) * row_bytes;
      at += rows;
    } while (at < s.keys.size());
  }
  for (size_t b = 0; b < m.deltas.dense.size(); ++b) {
    const worker::RegionExport::Dense& d = m.deltas.dense[b];
    if (room <= 0 && !d.delta.empty()) next();
    wire::WindowBlock* w = parts.back().add_dense();
    w->set_index(static_cast<int32_t>(b));
    w->set_table(d.table);
    w->set_block(d.block);
    w->set_delta(Bytes(d.delta.data(), d.delta.size()));
    room -= static_cast<int64_t>(d.delta.size() * sizeof(float));
  }
  for (wire::WindowPart& p : parts) {
    p.set_part(static_cast<int32_t>(&p - parts.data()));
    p.set_parts(static_cast<int32_t>(parts.size()));
  }
  return parts;
}

bool Retryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kDeadlineExceeded ||
         code == absl::StatusCode::kResourceExhausted || code == absl::StatusCode::kAborted;
}

// What a peer would refuse, said before serving rather than as failed handshakes at its end.
absl::Status CheckTls(const RegionGatewayOptions& o) {
  const std::string& self = o.names[o.self];
  const int given = !o.tls_ca_pem.empty() + !o.tls_cert_pem.empty() + !o.tls_key_pem.empty();
  if (given == 0) return absl::OkStatus();
  const auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("region gateway of '", self, "': ", what));
  };
  if (given != 3) return bad("TLS needs the run's CA, this region's certificate and its key");
  absl::StatusOr<hr::CertificateInfo> cert = hr::ReadCertificate(o.tls_cert_pem);
  if (!cert.ok()) return bad(absl::StrCat("its certificate: ", cert.status().message()));
  const std::string name = RegionGatewayName(self);
  if (std::find(cert->dns_names.begin(), cert->dns_names.end(), name) == cert->dns_names.end()) {
    return bad(absl::StrCat("its certificate names ",
                            cert->dns_names.empty() ? std::string("no DNS name")
                                                    : absl::StrJoin(cert->dns_names, ", "),
                            ", not ", name, " (each region's gateway has a certificate of its own: "
                            "heterps certs)"));
  }
  if (absl::Status chain = hr::VerifyCertificate(o.tls_cert_pem, o.tls_ca_pem); !chain.ok()) {
    return bad(absl::StrCat("its certificate against the run's CA: ", chain.message()));
  }
  return absl::OkStatus();
}

}  // namespace

std::string RegionGatewayName(const std::string& region) {
  return absl::StrCat("gateway.", region, ".heterps");
}

// The gateway's side: the parts that came, by (region, window), until Receive takes them.
class RegionGateway::Service final : public wire::RegionGateway::Service {
 public:
  explicit Service(const RegionGatewayOptions& o)
      : o_(o), tls_(!o.tls_ca_pem.empty()), auth_(o.token), consumed_(o.names.size(), -1) {}

  grpc::Status Post(grpc::ServerContext* ctx, const wire::WindowPart* part,
                    wire::PostReply*) override {
    if (grpc::Status denied = auth_.Check(ctx, "Post"); !denied.ok()) return denied;
    const int n = static_cast<int>(o_.names.size());
    if (part->from() < 0 || part->from() >= n || part->from() == o_.self ||
        part->from_name() != o_.names[part->from()] || part->window() < 0 || part->parts() < 1 ||
        part->part() < 0 || part->part() >= part->parts()) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("region gateway of '", o_.names[o_.self], "': a part from region ",
                       part->from(), " '", part->from_name(), "' (window ", part->window(),
                       ", part ", part->part(), " of ", part->parts(),
                       ") does not fit this run's regions"));
    }
    if (tls_) {
      // Each region's gateway shows its own region's certificate, so a region cannot speak for
      // another.
      const std::vector<std::string> peer = hr::PeerDnsNames(*ctx);
      if (std::find(peer.begin(), peer.end(), RegionGatewayName(part->from_name())) == peer.end()) {
        return grpc::Status(
            grpc::StatusCode::PERMISSION_DENIED,
            absl::StrCat("region gateway of '", o_.names[o_.self], "': a part from region '",
                         part->from_name(), "' came with a certificate for ",
                         peer.empty() ? std::string("no name") : absl::StrJoin(peer, ", "),
                         " (a gateway takes windows only from the region its sender's "
                         "certificate names: ",
                         RegionGatewayName(part->from_name()), ")"));
      }
    }
    absl::MutexLock lock(&mu_);
    received_ += static_cast<int64_t>(part->ByteSizeLong());
    if (!part->ended().empty()) {
      ended_[part->from()] = part->ended();
      return grpc::Status::OK;
    }
    if (part->window() <= consumed_[part->from()]) return grpc::Status::OK;  // a late retry
    box_[{part->from(), part->window()}][part->part()] = *part;
    return grpc::Status::OK;
  }

  absl::StatusOr<RegionMessage> Take(int from, int64_t window, absl::Time deadline) {
    std::map<int, wire::WindowPart> parts;
    {
      absl::MutexLock lock(&mu_);
      const auto complete = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        const auto it = box_.find({from, window});
        return it != box_.end() &&
               static_cast<int>(it->second.size()) == it->second.begin()->second.parts();
      };
      const auto heard = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return complete() || ended_.count(from) > 0 || closed_;
      };
      const bool in_time = mu_.AwaitWithDeadline(absl::Condition(&heard), deadline);
      if (!complete() && closed_) {
        return absl::CancelledError(absl::StrCat("region gateway of '", o_.names[o_.self],
                                                 "': closed while waiting for region '",
                                                 o_.names[from], "''s window ", window));
      }
      if (!complete() && ended_.count(from) > 0) {
        return absl::AbortedError(absl::StrCat("region '", o_.names[from], "' (",
                                               o_.addresses[from], ") ended before its window ",
                                               window, ": ", ended_[from]));
      }
      if (!in_time) {
        return absl::DeadlineExceededError(absl::StrCat(
            "region '", o_.names[from], "' (", o_.addresses[from], "): its window ", window,
            " had not come by the deadline"));
      }
      const auto it = box_.find({from, window});
      parts = std::move(it->second);
      box_.erase(it);
      consumed_[from] = std::max(consumed_[from], window);
    }
    return Assemble(from, parts);
  }

  void Close() {
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  bool closed() const {
    absl::MutexLock lock(&mu_);
    return closed_;
  }

  int64_t received() const {
    absl::MutexLock lock(&mu_);
    return received_;
  }

 private:
  absl::StatusOr<RegionMessage> Assemble(int from, const std::map<int, wire::WindowPart>& parts) {
    const wire::WindowPart& first = parts.begin()->second;
    const auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat("region '", o_.names[from], "' (",
                                                     o_.addresses[from], "): window ",
                                                     first.window(), ": ", what));
    };
    RegionMessage m;
    m.window = first.window();
    m.flush = first.flush();
    m.hub = first.hub();
    m.merge = first.merge();
    for (const wire::LinkTraffic& l : first.traffic()) {
      m.traffic.push_back({l.from(), l.to(), l.bytes(), l.messages()});
    }
    m.from = from;
    m.total_steps = first.total_steps();
    m.sync_steps = first.sync_steps();
    m.delay = first.delay();
    m.threshold = first.threshold();
    m.eager_threshold = first.eager_threshold();
    m.deltas.samples = first.samples();
    if (first.tables() < 0 || first.blocks() < 0) return bad("negative table or block counts");
    m.deltas.sparse.resize(first.tables());
    m.deltas.dense.resize(first.blocks());
    std::vector<bool> named(first.tables(), false), blocks(first.blocks(), false);
    for (const auto& [index, p] : parts) {
      if (p.tables() != first.tables() || p.blocks() != first.blocks() ||
          p.samples() != first.samples() || p.flush() != first.flush() ||
          p.merge() != first.merge()) {
        return bad(absl::StrCat("part ", index, " disagrees with part 0"));
      }
      for (const wire::WindowRows& r : p.rows()) {
        if (r.index() < 0 || r.index() >= first.tables()) {
          return bad(absl::StrCat("rows of table index ", r.index(), " of ", first.tables()));
        }
        worker::RegionExport::Sparse& s = m.deltas.sparse[r.index()];
        if (named[r.index()] && (s.table != r.table() || s.dim != r.dim())) {
          return bad(absl::StrCat("table index ", r.index(), " named as two tables"));
        }
        named[r.index()] = true;
        s.table = r.table();
        s.dim = r.dim();
        if (r.dim() < 0 || !Append(r.keys(), &s.keys) || !Append(r.deltas(), &s.deltas) ||
            s.deltas.size() != s.keys.size() * static_cast<size_t>(s.dim)) {
          return bad(absl::StrCat("table ", r.table(), ": rows of the wrong size"));
        }
      }
      for (const wire::WindowBlock& b : p.dense()) {
        if (b.index() < 0 || b.index() >= first.blocks() || blocks[b.index()]) {
          return bad(absl::StrCat("dense block index ", b.index(), " of ", first.blocks()));
        }
        blocks[b.index()] = true;
        worker::RegionExport::Dense& d = m.deltas.dense[b.index()];
        d.table = b.table();
        d.block = b.block();
        if (!Append(b.delta(), &d.delta)) return bad("a dense block of the wrong size");
      }
    }
    if (std::find(named.begin(), named.end(), false) != named.end() ||
        std::find(blocks.begin(), blocks.end(), false) != blocks.end()) {
      return bad("a table or dense block not named");
    }
    return m;
  }

  const RegionGatewayOptions& o_;
  const bool tls_;
  hr::TokenCheck auth_;
  mutable absl::Mutex mu_;
  std::map<std::pair<int, int64_t>, std::map<int, wire::WindowPart>> box_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> consumed_ ABSL_GUARDED_BY(mu_);
  std::map<int, std::string> ended_ ABSL_GUARDED_BY(mu_);  // region -> why
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  int64_t received_ ABSL_GUARDED_BY(mu_) = 0;
};

struct RegionGateway::Served {
  hr::Server server;
};

struct RegionGateway::Peer {
  std::unique_ptr<wire::RegionGateway::Stub> stub;
  std::atomic<int64_t> sent{0};
};

RegionGateway::RegionGateway(const RegionGatewayOptions& options) : o_(options) {}

RegionGateway::~RegionGateway() {
  if (server_ != nullptr && server_->server.server != nullptr) {
    server_->server.server->Shutdown(std::chrono::system_clock::now());
  }
}

absl::StatusOr<std::unique_ptr<RegionGateway>> RegionGateway::Start(
    const RegionGatewayOptions& options) {
  const int n = static_cast<int>(options.names.size());
  if (n < 2 || static_cast<int>(options.addresses.size()) != n || options.self < 0 ||
      options.self >= n || options.part_bytes < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "region gateway: ", n, " regions, ", options.addresses.size(), " addresses, region ",
        options.self, " (needs two regions or more, an address each)"));
  }
  const std::string& self = options.addresses[options.self];
  const size_t colon = self.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(self.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("region gateway of '",
                                                   options.names[options.self], "': '", self,
                                                   "' is not host:port"));
  }
  HETERPS_RETURN_IF_ERROR(CheckTls(options));
  std::unique_ptr<RegionGateway> g(new RegionGateway(options));
  g->service_ = std::make_unique<Service>(g->o_);
  hr::Endpoint endpoint;
  endpoint.host = self.substr(0, colon);
  if (endpoint.host.size() > 2 && endpoint.host.front() == '[' && endpoint.host.back() == ']') {
    endpoint.host = endpoint.host.substr(1, endpoint.host.size() - 2);
  }
  endpoint.port = port;
  endpoint.tls_cert_pem = options.tls_cert_pem;
  endpoint.tls_key_pem = options.tls_key_pem;
  endpoint.tls_ca_pem = options.tls_ca_pem;
  absl::StatusOr<hr::Server> server = hr::StartServer(endpoint, {g->service_.get()});
  if (!server.ok()) {
    return absl::Status(server.status().code(),
                        absl::StrCat("region gateway of '", options.names[options.self],
                                     "': ", server.status().message()));
  }
  g->server_ = std::make_unique<Served>(Served{*std::move(server)});
  for (int r = 0; r < n; ++r) {
    auto peer = std::make_unique<Peer>();
    if (r != options.self) {
      hr::ChannelOptions channel;
      if (!options.tls_ca_pem.empty()) {
        // The gateway reached must be region r's, whatever address the list gives for it.
        channel.tls_ca_pem = options.tls_ca_pem;
        channel.tls_target_name = RegionGatewayName(options.names[r]);
        channel.tls_cert_pem = options.tls_cert_pem;
        channel.tls_key_pem = options.tls_key_pem;
      }
      peer->stub = wire::RegionGateway::NewStub(hr::NewChannel(options.addresses[r], channel));
    }
    g->peers_.push_back(std::move(peer));
  }
  return g;
}

absl::Status RegionGateway::Send(int to, const RegionMessage& message, absl::Time deadline) {
  const int n = static_cast<int>(o_.names.size());
  if (to < 0 || to >= n || to == o_.self) {
    return absl::InvalidArgumentError(absl::StrCat("region gateway: no region ", to, " to send to"));
  }
  Peer& peer = *peers_[to];
  const std::string what =
      absl::StrCat("region '", o_.names[to], "' (", o_.addresses[to], "): window ", message.window);
  for (const wire::WindowPart& part : Cut(message, o_.names[o_.self], o_.part_bytes)) {
    absl::Duration backoff = absl::Milliseconds(100);
    for (;;) {
      grpc::ClientContext ctx;
      hr::PrepareCall(ctx, o_.token, std::min(absl::Seconds(30), deadline - absl::Now()));
      wire::PostReply reply;
      peer.sent += static_cast<int64_t>(part.ByteSizeLong());
      const absl::Status status = hr::FromGrpc(peer.stub->Post(&ctx, part, &reply), what);
      if (status.ok()) break;
      if (!o_.tls_ca_pem.empty() &&
          absl::StrContains(absl::AsciiStrToLower(status.message()), "handshake failed")) {
        // Not a peer that is away: its certificate is not region `to`'s gateway's under this
        // run's CA, and will not become one by waiting.
        return absl::Status(
            absl::StatusCode::kUnauthenticated,
            absl::StrCat(status.message(), " (the gateway at ", o_.addresses[to],
                         " has no certificate for ", RegionGatewayName(o_.names[to]),
                         " from this run's CA: every region's --region-ca must be the same)"));
      }
      if (!Retryable(status.code()) || absl::Now() + backoff >= deadline || service_->closed()) {
        return status;
      }
      absl::SleepFor(backoff);
      backoff = std::min(absl::Seconds(1), backoff * 2);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<RegionMessage> RegionGateway::Receive(int from, int64_t window, absl::Time deadline) {
  if (from < 0 || from >= static_cast<int>(o_.names.size()) || from == o_.self) {
    return absl::InvalidArgumentError(absl::StrCat("region gateway: no region ", from, " to hear"));
  }
  return service_->Take(from, window, deadline);
}

void RegionGateway::Abandon(const std::string& why) {
  wire::WindowPart part;
  part.set_from(o_.self);
  part.set_from_name(o_.names[o_.self]);
  part.set_parts(1);
  part.set_ended(why.empty() ? "its job ended" : why);
  for (int to = 0; to < static_cast<int>(o_.names.size()); ++to) {
    if (to == o_.self) continue;
    grpc::ClientContext ctx;
    hr::PrepareCall(ctx, o_.token, absl::Seconds(5));
    wire::PostReply reply;
    peers_[to]->stub->Post(&ctx, part, &reply);  // best effort: the peer may be gone too
  }
}

void RegionGateway::Close() { service_->Close(); }

int64_t RegionGateway::sent_bytes(int to) const { return peers_[to]->sent.load(); }
int64_t RegionGateway::received_bytes() const { return service_->received(); }
const std::string& RegionGateway::address() const { return server_->server.address; }

}  // namespace heterps::launcher::rpc
