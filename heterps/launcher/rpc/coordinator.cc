#include "heterps/launcher/rpc/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "heterps/base/file.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/token.h"
#include "heterps/data/auc.h"
#include "heterps/data/reader.h"
#include "heterps/launcher/layout.h"
#include "heterps/ps/rpc/grpc_ps_client.h"
#include "heterps/worker/rpc/runtime.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace heterps::launcher::rpc {
namespace {

using json = nlohmann::ordered_json;

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  return absl::Status(
      code, absl::StrCat(what, ": ", absl::StatusCodeToString(code), ": ", status.error_message()));
}

// Runs f(0) .. f(n-1) on threads of their own; the first error.
absl::Status ParallelFor(int n, const std::function<absl::Status(int)>& f) {
  std::vector<absl::Status> results(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) threads.emplace_back([&, i] { results[i] = f(i); });
  for (std::thread& t : threads) t.join();
  absl::Status status;
  for (const absl::Status& r : results) status.Update(r);
  return status;
}

// The Coordinator service: roles by rank, registration, heartbeats.
class Service final : public runtime::Coordinator::Service {
 public:
  Service(std::string token, std::string job_dir)
      : token_(std::move(token)), job_dir_(std::move(job_dir)) {}

  // A new attempt: forget the registrations, tell the old processes to stop.
  void Reset(int64_t generation, const JobLayout& layout, const runtime::TrainingConfig& training) {
    absl::MutexLock lock(&mu_);
    generation_ = generation;
    layout_ = layout;
    training_ = training;
    addresses_.assign(layout.world(), "");
    told_.assign(layout.world(), false);
    stopping_ = false;
  }
  void Stop() {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  // Waits up to `timeout` for every registered process to have heard that the job is over, so
  // that none is left asking a coordinator that has gone (and ending in error).
  void AwaitStopHeard(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto heard = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (size_t r = 1; r < told_.size(); ++r) {
        if (!addresses_[r].empty() && !told_[r]) return false;
      }
      return true;
    };
    mu_.AwaitWithTimeout(absl::Condition(&heard), timeout);
  }
  // Ranks that have not registered yet.
  std::vector<int> Missing() {
    absl::MutexLock lock(&mu_);
    std::vector<int> missing;
    for (int r = 1; r < layout_.world(); ++r) {
      if (addresses_[r].empty()) missing.push_back(r);
    }
    return missing;
  }
  std::vector<std::string> Addresses() {
    absl::MutexLock lock(&mu_);
    return addresses_;
  }

  grpc::Status Hello(grpc::ServerContext* ctx, const runtime::HelloRequest* request,
                     runtime::HelloReply* reply) override {
    if (grpc::Status denied = Check(ctx); !denied.ok()) return denied;
    absl::MutexLock lock(&mu_);
    if (request->world() != layout_.world() || request->rank() < 1 ||
        request->rank() >= layout_.world()) {
      return ToGrpc(absl::InvalidArgumentError(absl::StrCat(
          "rank ", request->rank(), " of ", request->world(), ": the job has ", layout_.world(),
          " processes (1 coordinator, ", layout_.ps_shards, " parameter servers, ",
          layout_.world() - 1 - layout_.ps_shards, " stage replicas)")));
    }
    const RoleSlot& slot = layout_.ranks[request->rank()];
    runtime::Role* role = reply->mutable_role();
    if (slot.kind == RoleSlot::Kind::kPs) {
      role->set_kind(runtime::Role::PS);
      role->set_shard(slot.shard);
      role->set_shards(layout_.ps_shards);
      role->set_data_dir(absl::StrCat(job_dir_, "/ps-", slot.shard));
    } else {
      role->set_kind(runtime::Role::WORKER);
      role->set_stage(slot.stage);
      role->set_replica(slot.replica);
    }
    reply->set_generation(generation_);
    return grpc::Status::OK;
  }

  grpc::Status Register(grpc::ServerContext* ctx, const runtime::RegisterRequest* request,
                        runtime::RegisterReply* reply) override {
    if (grpc::Status denied = Check(ctx); !denied.ok()) return denied;
    absl::MutexLock lock(&mu_);
    if (request->generation() != generation_ || request->rank() < 1 ||
        request->rank() >= layout_.world()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "this process belongs to an attempt of the job that is over");
    }
    addresses_[request->rank()] = request->address();
    const int64_t generation = generation_;
    auto ready = [this, generation]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      if (stopping_ || generation_ != generation) return true;
      for (int r = 1; r < layout_.world(); ++r) {
        if (addresses_[r].empty()) return false;
      }
      return true;
    };
    while (!ready()) {
      if (ctx->IsCancelled()) return grpc::Status::CANCELLED;
      mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(200));
    }
    if (stopping_ || generation_ != generation) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "the attempt is over");
    }
    for (int s = 0; s < layout_.ps_shards; ++s) reply->add_ps(addresses_[1 + s]);
    int rank = 1 + layout_.ps_shards;
    for (size_t stage = 0; stage < layout_.replicas.size(); ++stage) {
      runtime::StageLayout* out = reply->add_stages();
      out->set_first(stage_ranges_[stage].first);
      out->set_last(stage_ranges_[stage].second);
      for (int r = 0; r < layout_.replicas[stage]; ++r) out->add_replicas(addresses_[rank++]);
    }
    *reply->mutable_training() = training_;
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext* ctx, const runtime::HeartbeatRequest* request,
                         runtime::HeartbeatReply* reply) override {
    if (grpc::Status denied = Check(ctx); !denied.ok()) return denied;
    absl::MutexLock lock(&mu_);
    reply->set_stop(stopping_ || request->generation() != generation_);
    if (reply->stop() && request->generation() == generation_ && request->rank() > 0 &&
        request->rank() < static_cast<int>(told_.size())) {
      told_[request->rank()] = true;
    }
    return grpc::Status::OK;
  }

  void SetStageRanges(std::vector<std::pair<int, int>> ranges) {
    absl::MutexLock lock(&mu_);
    stage_ranges_ = std::move(ranges);
  }

 private:
  grpc::Status Check(grpc::ServerContext* ctx) {
    if (token_.empty()) return grpc::Status::OK;
    auto entries = ctx->client_metadata().equal_range(base::kTokenHeader);
    const bool given = entries.first != entries.second;
    if (given && base::TokensEqual(
                     absl::string_view(entries.first->second.data(), entries.first->second.size()),
                     token_)) {
      return grpc::Status::OK;
    }
    base::LogLine(absl::StrCat("refused a call from ", ctx->peer(), ": ",
                               given ? "wrong token" : "no token"));
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, given ? "wrong token" : "no token");
  }

  const std::string token_, job_dir_;
  absl::Mutex mu_;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  JobLayout layout_ ABSL_GUARDED_BY(mu_);
  runtime::TrainingConfig training_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> addresses_ ABSL_GUARDED_BY(mu_);  // by rank
  std::vector<bool> told_ ABSL_GUARDED_BY(mu_);              // by rank: heard "stop"
  std::vector<std::pair<int, int>> stage_ranges_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

// The job's own checkpoint record: the step the parameter servers' checkpoint holds, and the
// losses up to it.
struct JobCheckpoint {
  int64_t step = 0;
  std::vector<double> losses;
};

std::optional<JobCheckpoint> ReadJobCheckpoint(const std::string& job_dir) {
  auto text = base::ReadTextFile(job_dir + "/checkpoint.json");
  if (!text.ok()) return std::nullopt;
  const json root = json::parse(*text, nullptr, false);
  if (root.is_discarded() || root.value("format", "") != "heterps-job-checkpoint-v1") {
    return std::nullopt;
  }
  JobCheckpoint c;
  c.step = root.value("step", int64_t{0});
  c.losses = root.value("losses", std::vector<double>());
  return c;
}

// A worker replica's stub and its calls.
class Workers {
 public:
  Workers(const std::vector<std::vector<std::string>>& addresses, std::string token,
          absl::Duration timeout)
      : token_(std::move(token)), timeout_(timeout) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(256 << 20);
    for (size_t s = 0; s < addresses.size(); ++s) {
      for (size_t r = 0; r < addresses[s].size(); ++r) {
        replicas_.push_back({static_cast<int>(s), static_cast<int>(r), addresses[s][r],
                             runtime::Worker::NewStub(grpc::CreateCustomChannel(
                                 addresses[s][r], grpc::InsecureChannelCredentials(), args))});
      }
    }
  }

  struct Replica {
    int stage, replica;
    std::string address;
    std::unique_ptr<runtime::Worker::Stub> stub;
  };
  std::vector<Replica>& all() { return replicas_; }
  std::vector<Replica*> stage(int s) {
    std::vector<Replica*> out;
    for (Replica& r : replicas_) {
      if (r.stage == s) out.push_back(&r);
    }
    return out;
  }

  // Runs `call` on replica `r` with the token and the deadline; errors name the replica.
  template <typename F>
  absl::Status Call(Replica& r, absl::string_view what, F call, absl::Duration timeout = {}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(
        absl::ToChronoTime(absl::Now() + (timeout == absl::Duration() ? timeout_ : timeout)));
    if (!token_.empty()) ctx.AddMetadata(base::kTokenHeader, token_);
    return FromGrpc(call(ctx, *r.stub), absl::StrCat("stage ", r.stage, " replica ", r.replica,
                                                     " (", r.address, "): ", what));
  }

 private:
  std::string token_;
  absl::Duration timeout_;
  std::vector<Replica> replicas_;
};

// One attempt of the job, from registration to the end (or the first failure).
class Attempt {
 public:
  Attempt(const JobOptions& o, const JobLayout& layout, Service& service, JobResult& result,
          int64_t generation, absl::Time job_start)
      : o_(o),
        layout_(layout),
        service_(service),
        result_(result),
        generation_(generation),
        job_start_(job_start) {}

  absl::Status Run(const std::string& coordinator, int64_t train_lines) {
    if (o_.launcher != nullptr) {
      HETERPS_RETURN_IF_ERROR(o_.launcher->Start(coordinator, layout_.world(), generation_));
    }
    HETERPS_RETURN_IF_ERROR(AwaitRegistration());
    HETERPS_RETURN_IF_ERROR(Connect());
    HETERPS_RETURN_IF_ERROR(worker::CreateModelTables(o_.spec, ps_.get(), o_.model));
    int64_t done = 0;
    result_.losses.clear();
    if (std::optional<JobCheckpoint> c = ReadJobCheckpoint(o_.job_dir); c && c->step > 0) {
      HETERPS_ASSIGN_OR_RETURN(int64_t step, ps_->LoadCheckpoint(c->step));
      done = step;
      result_.losses = c->losses;
      result_.losses.resize(done, 0.0);
      const std::string event = absl::StrCat("resumed from the checkpoint of step ", done);
      if (o_.progress) {
        o_.progress({done, 0, 0, 0, 0, result_.restarts, event});
      } else {
        base::LogLine(event);
      }
    }
    HETERPS_RETURN_IF_ERROR(Train(done, train_lines));
    HETERPS_RETURN_IF_ERROR(Evaluate());
    HETERPS_ASSIGN_OR_RETURN(result_.parameter_digest, ps_->Digest());
    return Report();
  }

 private:
  absl::Status CheckAlive() {
    if (o_.launcher == nullptr) return absl::OkStatus();
    if (std::optional<std::string> dead = o_.launcher->Dead()) {
      return absl::UnavailableError(*dead);
    }
    return absl::OkStatus();
  }

  absl::Status AwaitRegistration() {
    const absl::Time deadline = absl::Now() + o_.register_timeout;
    for (;;) {
      const std::vector<int> missing = service_.Missing();
      if (missing.empty()) return absl::OkStatus();
      HETERPS_RETURN_IF_ERROR(CheckAlive());
      if (absl::Now() > deadline) {
        std::vector<std::string> names;
        for (int r : missing) names.push_back(absl::StrCat(r, " (", layout_.Name(r), ")"));
        return absl::DeadlineExceededError(absl::StrCat("ranks ", absl::StrJoin(names, ", "),
                                                        " did not register within ",
                                                        absl::FormatDuration(o_.register_timeout)));
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }

  absl::Status Connect() {
    const std::vector<std::string> addresses = service_.Addresses();
    ps::rpc::GrpcPsClientOptions options;
    for (int s = 0; s < layout_.ps_shards; ++s) options.servers.push_back(addresses[1 + s]);
    options.token = o_.token;
    HETERPS_ASSIGN_OR_RETURN(ps_, ps::rpc::GrpcPsClient::Connect(options));
    std::vector<std::vector<std::string>> replicas(layout_.replicas.size());
    for (size_t s = 0; s < replicas.size(); ++s) {
      for (int r = 0; r < layout_.replicas[s]; ++r) {
        replicas[s].push_back(addresses[layout_.WorkerRank(static_cast<int>(s), r)]);
      }
    }
    workers_ = std::make_unique<Workers>(replicas, o_.token, o_.step_timeout);
    return absl::OkStatus();
  }

  // The share of mini-batch lines [lo, hi) of stage-0 replica r of k: its position in its own
  // lines of the pass, and how many.
  static std::pair<int64_t, int64_t> Share(int64_t lo, int64_t hi, int r, int k) {
    auto before = [&](int64_t n) { return n > r ? (n - r + k - 1) / k : 0; };
    return {before(lo), before(hi) - before(lo)};
  }

  absl::Status Train(int64_t done, int64_t train_lines) {
    const int64_t batch = o_.spec.batch_size;
    per_pass_ = (train_lines + batch - 1) / batch;
    train_lines_ = train_lines;
    const int64_t total = per_pass_ * o_.epochs;
    const absl::Time start = absl::Now();
    stats_start_ = CollectStats();
    total_steps_ = total;
    train_start_ = start;
    // Rounds end at checkpoints: the only points where asynchronous replicas meet.
    const int64_t every = o_.checkpoint_every > 0 ? o_.checkpoint_every : total;
    for (int64_t from = done; from < total;) {
      const int64_t to = std::min(total, (from / every + 1) * every);
      HETERPS_RETURN_IF_ERROR(o_.sync ? SyncSteps(from, to) : AsyncSteps(from, to));
      if (to < total && to % every == 0) HETERPS_RETURN_IF_ERROR(Checkpoint(to));
      from = to;
    }
    result_.steps = total;
    result_.train_samples = train_lines * o_.epochs;
    result_.seconds = absl::ToDoubleSeconds(absl::Now() - start);
    result_.samples_per_second = result_.seconds > 0 ? samples_ / result_.seconds : 0;
    result_.step_seconds = total > done ? result_.seconds / (total - done) : 0;
    const int64_t last_pass = std::max<int64_t>(0, total - per_pass_);
    double sum = 0;
    for (int64_t s = last_pass; s < total; ++s) sum += result_.losses[s];
    result_.train_loss = total > last_pass ? sum / (total - last_pass) : 0;
    steps_trained_ = total - done;
    absl::MutexLock lock(&skipped_mu_);
    result_.skipped_lines = 0;
    for (const auto& [where, n] : skipped_) result_.skipped_lines += n;
    result_.first_bad_line = first_bad_;
    return absl::OkStatus();
  }

  // Stage-0 replica r's part of step `step`: (loss sum, samples). Thread-safe.
  absl::StatusOr<std::pair<double, int64_t>> RunStep(int r, int64_t step) {
    const int k = layout_.replicas[0];
    const int64_t batch = o_.spec.batch_size;
    const int64_t j = step % per_pass_;
    const int64_t lo = j * batch, hi = std::min(lo + batch, train_lines_);
    const auto [offset, count] = Share(lo, hi, r, k);
    runtime::StepRequest request;
    request.set_step(step);
    request.set_epoch(step / per_pass_);
    request.set_offset(offset);
    request.set_count(count);
    request.set_scale(1.0f / static_cast<float>(hi - lo));
    runtime::StepReply reply;
    HETERPS_RETURN_IF_ERROR(workers_->Call(
        *workers_->stage(0)[r], absl::StrCat("RunStep ", step),
        [&](grpc::ClientContext& ctx, auto& stub) { return stub.RunStep(&ctx, request, &reply); }));
    if (reply.skipped_lines() > 0) {
      absl::MutexLock lock(&skipped_mu_);
      int64_t& seen = skipped_[{r, step / per_pass_}];
      seen = std::max(seen, reply.skipped_lines());
      if (first_bad_.empty()) first_bad_ = reply.first_bad_line();
    }
    return std::make_pair(reply.loss_sum(), reply.samples());
  }

  // Synchronous: each step run by every stage-0 replica, flushed by every replica of the later
  // stages (stage 0 flushes at the end of its step), committed.
  absl::Status SyncSteps(int64_t from, int64_t to) {
    const int k = layout_.replicas[0];
    std::vector<Workers::Replica*> later;
    for (Workers::Replica& r : workers_->all()) {
      if (r.stage > 0) later.push_back(&r);
    }
    for (int64_t step = from; step < to; ++step) {
      HETERPS_RETURN_IF_ERROR(CheckAlive());
      std::vector<std::pair<double, int64_t>> parts(k);
      HETERPS_RETURN_IF_ERROR(ParallelFor(k, [&](int r) -> absl::Status {
        HETERPS_ASSIGN_OR_RETURN(parts[r], RunStep(r, step));
        return absl::OkStatus();
      }));
      HETERPS_RETURN_IF_ERROR(ParallelFor(static_cast<int>(later.size()), [&](int i) {
        runtime::FlushRequest request;
        request.set_step(step);
        runtime::FlushReply reply;
        return workers_->Call(*later[i], absl::StrCat("Flush ", step),
                              [&](grpc::ClientContext& ctx, auto& stub) {
                                return stub.Flush(&ctx, request, &reply);
                              });
      }));
      HETERPS_RETURN_IF_ERROR(ps_->Commit());
      double loss = 0;
      int64_t samples = 0;
      for (const auto& [l, n] : parts) {
        loss += l;
        samples += n;
      }
      StepDone(step, samples > 0 ? loss / samples : 0, samples);
    }
    return absl::OkStatus();
  }

  // Asynchronous: every stage-0 replica runs the steps on its own, its gradients applied as they
  // come; a step's loss is recorded when all replicas have run it.
  absl::Status AsyncSteps(int64_t from, int64_t to) {
    const int k = layout_.replicas[0];
    absl::Mutex mu;
    std::map<int64_t, std::tuple<double, int64_t, int>> parts;  // step -> (loss, samples, replicas)
    std::atomic<bool> failed{false};
    absl::Status status = ParallelFor(k, [&](int r) -> absl::Status {
      for (int64_t step = from; step < to && !failed; ++step) {
        absl::StatusOr<std::pair<double, int64_t>> part = RunStep(r, step);
        if (!part.ok()) {
          failed = true;
          return part.status();
        }
        absl::MutexLock lock(&mu);
        auto& [loss, samples, seen] = parts[step];
        loss += part->first;
        samples += part->second;
        ++seen;
      }
      return absl::OkStatus();
    });
    HETERPS_RETURN_IF_ERROR(status);
    HETERPS_RETURN_IF_ERROR(CheckAlive());
    for (const auto& [step, part] : parts) {
      const auto& [loss, samples, seen] = part;
      StepDone(step, samples > 0 ? loss / samples : 0, samples);
    }
    return absl::OkStatus();
  }

  void StepDone(int64_t step, double loss, int64_t samples) {
    result_.losses.resize(step + 1, 0.0);
    result_.losses[step] = loss;
    samples_ += samples;
    average_ = step == 0 || average_ == 0 ? loss : 0.98 * average_ + 0.02 * loss;
    if (o_.progress) {
      o_.progress({step + 1, total_steps_, samples_,
                   absl::ToDoubleSeconds(absl::Now() - job_start_), average_, result_.restarts,
                   ""});
    }
    if (absl::Now() - last_status_ > absl::Seconds(1)) {
      WriteStatus("running", step + 1, total_steps_, samples_, absl::Now() - train_start_, loss);
      last_status_ = absl::Now();
    }
  }

  absl::Status Checkpoint(int64_t step) {
    HETERPS_RETURN_IF_ERROR(ps_->SaveCheckpoint(step));
    json root = {
        {"format", "heterps-job-checkpoint-v1"}, {"step", step}, {"losses", result_.losses}};
    return base::WriteFileAtomically(o_.job_dir + "/checkpoint.json", root.dump(1) + "\n");
  }

  absl::Status Evaluate() {
    if (o_.eval_fraction <= 0) return absl::OkStatus();
    std::vector<Workers::Replica*> first = workers_->stage(0);
    std::vector<runtime::EvalReply> replies(first.size());
    HETERPS_RETURN_IF_ERROR(ParallelFor(static_cast<int>(first.size()), [&](int r) {
      runtime::EvalRequest request;
      request.set_step(result_.steps);
      return workers_->Call(
          *first[r], "Evaluate",
          [&](grpc::ClientContext& ctx, auto& stub) {
            return stub.Evaluate(&ctx, request, &replies[r]);
          },
          o_.eval_timeout);
    }));
    std::vector<float> scores, labels;
    for (const runtime::EvalReply& reply : replies) {
      const float* p = reinterpret_cast<const float*>(reply.probabilities().data());
      const float* y = reinterpret_cast<const float*>(reply.labels().data());
      const size_t n = reply.probabilities().size() / sizeof(float);
      if (reply.labels().size() != n * sizeof(float)) {
        return absl::InternalError("evaluation: probabilities and labels differ in number");
      }
      scores.insert(scores.end(), p, p + n);
      labels.insert(labels.end(), y, y + n);
    }
    double loss = 0;
    for (size_t i = 0; i < scores.size(); ++i) {
      const double q = std::clamp<double>(scores[i], 1e-7, 1 - 1e-7);
      loss -= labels[i] > 0.5f ? std::log(q) : std::log(1 - q);
    }
    result_.eval_samples = static_cast<int64_t>(scores.size());
    if (!scores.empty()) {
      result_.eval_loss = loss / scores.size();
      absl::StatusOr<double> auc = data::ExactAuc(scores, labels);
      result_.eval_auc = auc.ok() ? *auc : 0.5;
    }
    return absl::OkStatus();
  }

  std::vector<runtime::WorkerStats> CollectStats() {
    std::vector<Workers::Replica>& all = workers_->all();
    std::vector<runtime::WorkerStats> stats(all.size());
    ParallelFor(static_cast<int>(all.size()), [&](int i) {
      return workers_->Call(
          all[i], "Stats",
          [&](grpc::ClientContext& ctx, auto& stub) {
            return stub.Stats(&ctx, runtime::WorkerStatsRequest(), &stats[i]);
          },
          absl::Seconds(2));
    }).IgnoreError();
    return stats;
  }

  void WriteStatus(const std::string& state, int64_t step, int64_t total, int64_t samples,
                   absl::Duration elapsed, double loss) {
    json replicas = json::array();
    for (const runtime::WorkerStats& s : CollectStats()) {
      replicas.push_back({{"stage", s.stage()},
                          {"replica", s.replica()},
                          {"micro_batches", s.micro_batches()},
                          {"busy_seconds", s.busy_seconds()},
                          {"idle_seconds", s.idle_seconds()},
                          {"send_seconds", s.send_seconds()},
                          {"bytes_sent", s.bytes_sent()},
                          {"queue_depth", s.queue_depth()},
                          {"in_flight", s.in_flight()}});
    }
    json shards = json::array();
    if (absl::StatusOr<std::vector<ps::rpc::ShardStats>> ps = ps_->Stats(); ps.ok()) {
      for (const ps::rpc::ShardStats& shard : *ps) {
        json tables = json::array();
        for (const auto& [id, t] : shard.sparse) {
          tables.push_back({{"table", id},
                            {"memory_rows", t.memory_rows},
                            {"memory_bytes", t.memory_bytes},
                            {"cold_rows", t.cold_rows},
                            {"hits", t.hits},
                            {"misses", t.misses},
                            {"spills", t.spills}});
        }
        shards.push_back({{"shard", shard.shard}, {"calls", shard.calls}, {"tables", tables}});
      }
    }
    const double seconds = absl::ToDoubleSeconds(elapsed);
    json root = {{"state", state},
                 {"pid", static_cast<int64_t>(getpid())},
                 {"generation", generation_},
                 {"restarts", result_.restarts},
                 {"step", step},
                 {"total_steps", total},
                 {"samples", samples},
                 {"samples_per_second", seconds > 0 ? samples / seconds : 0.0},
                 {"predicted_samples_per_second", o_.plan.throughput},
                 {"loss", loss},
                 {"replicas", replicas},
                 {"parameter_servers", shards},
                 {"updated", absl::FormatTime(absl::Now())}};
    base::WriteFileAtomically(o_.job_dir + "/status.json", root.dump(1) + "\n").IgnoreError();
  }

  absl::Status Report() {
    const std::vector<runtime::WorkerStats> end = CollectStats();
    result_.stages.clear();
    for (size_t s = 0; s < o_.plan.stages.size(); ++s) {
      const sched::RunStage& stage = o_.plan.stages[s];
      StageReport report{o_.plan.StageName(o_.spec, static_cast<int>(s)), stage.type, stage.units,
                         stage.seconds_per_batch};
      for (size_t i = 0; i < end.size() && i < stats_start_.size(); ++i) {
        if (end[i].stage() != static_cast<int>(s)) continue;
        const double busy = end[i].busy_seconds() - stats_start_[i].busy_seconds();
        const double idle = end[i].idle_seconds() - stats_start_[i].idle_seconds();
        const double send = end[i].send_seconds() - stats_start_[i].send_seconds();
        const double ps = end[i].ps_seconds() - stats_start_[i].ps_seconds();
        const double steps = static_cast<double>(std::max<int64_t>(steps_trained_, 1));
        if (busy / steps >= report.measured_seconds) {
          report.measured_seconds = busy / steps;
          report.ps_seconds = ps / steps;
          report.send_seconds = send / steps;
          report.idle_fraction = busy + idle > 0 ? idle / (busy + idle) : 0;
        }
      }
      result_.stages.push_back(report);
    }
    WriteStatus("done", result_.steps, result_.steps, result_.train_samples,
                absl::Seconds(result_.seconds), result_.train_loss);
    return absl::OkStatus();
  }

  const JobOptions& o_;
  const JobLayout& layout_;
  Service& service_;
  JobResult& result_;
  const int64_t generation_;
  const absl::Time job_start_;
  std::unique_ptr<ps::rpc::GrpcPsClient> ps_;
  std::unique_ptr<Workers> workers_;
  std::vector<runtime::WorkerStats> stats_start_;
  int64_t steps_trained_ = 0;
  int64_t per_pass_ = 1, train_lines_ = 0, total_steps_ = 0, samples_ = 0;
  double average_ = 0;
  absl::Time train_start_, last_status_ = absl::InfinitePast();
  absl::Mutex skipped_mu_;
  std::map<std::pair<int, int64_t>, int64_t> skipped_
      ABSL_GUARDED_BY(skipped_mu_);  // (replica, pass)
  std::string first_bad_ ABSL_GUARDED_BY(skipped_mu_);
};

// Failures that a fresh set of processes may not meet again: a process gone or hung, a call cut
// off. A bad layout or bad data would fail the same way again.
bool Recoverable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kUnknown:
      return true;
    default:
      return false;
  }
}

absl::Status CheckOptions(const JobOptions& o) {
  if (o.job_dir.empty()) return absl::InvalidArgumentError("job: a job directory is required");
  if (o.plan.stages.empty()) return absl::InvalidArgumentError("job: the plan has no stages");
  if (o.epochs < 1) return absl::InvalidArgumentError("job: epochs must be >= 1");
  if (o.eval_fraction < 0 || o.eval_fraction > 0.5) {
    return absl::InvalidArgumentError("job: eval_fraction must be in [0, 0.5]");
  }
  if (o.files.empty()) return absl::InvalidArgumentError("job: no data files");
  for (const std::string& f : o.files) {
    if (!std::filesystem::is_regular_file(f)) {
      return absl::NotFoundError(absl::StrCat(f, ": no such data file"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JobResult> RunJob(const JobOptions& o) {
  HETERPS_RETURN_IF_ERROR(CheckOptions(o));
  std::error_code error;
  std::filesystem::create_directories(o.job_dir, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat(o.job_dir, ": cannot create: ", error.message()));
  }
  const int shards = std::max(1, o.ps_shards);
  const JobLayout layout = MakeLayout(o.plan, shards);
  const int64_t eval_every =
      o.eval_fraction > 0 ? std::max<int64_t>(2, std::llround(1 / o.eval_fraction)) : 0;
  HETERPS_ASSIGN_OR_RETURN(const int64_t lines, data::CountLines(o.files));
  const int64_t train_lines = eval_every > 0 ? lines - lines / eval_every : lines;
  if (train_lines < 1) return absl::InvalidArgumentError("job: the data has no training lines");

  runtime::TrainingConfig training;
  training.set_model_yaml(o.model_yaml);
  training.set_model_source(o.spec.source);
  training.set_batch_size(o.spec.batch_size);
  // One micro-batch per replica and step when there is no pipeline to fill; else enough for every
  // stage to have work: two per stage.
  const int64_t share = (o.spec.batch_size + layout.replicas[0] - 1) / layout.replicas[0];
  const int64_t parts = o.plan.stages.size() == 1 ? 1 : 2 * o.plan.stages.size();
  training.set_micro_batch(o.micro_batch > 0 ? o.micro_batch
                                             : std::max<int64_t>(1, (share + parts - 1) / parts));
  training.set_sync(o.sync);
  for (const std::string& f : o.files) training.add_files(f);
  training.set_eval_every(eval_every);
  training.set_skip_bad_lines(o.skip_bad_lines);

  Service service(o.token, o.job_dir);
  std::vector<std::pair<int, int>> ranges;
  for (const sched::RunStage& s : o.plan.stages) ranges.emplace_back(s.first, s.last);
  service.SetStageRanges(ranges);
  // Ready before the first call can arrive: an external launcher's processes may already wait.
  service.Reset(1, layout, training);
  grpc::ServerBuilder builder;
  int port = 0;
  const std::string address = absl::StrCat(o.host, ":", o.port);
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("coordinator: cannot listen on ", address, " (in use, or not this host's)"));
  }
  const std::string coordinator = absl::StrCat(o.host, ":", port);
  if (o.on_listening) o.on_listening(coordinator);

  JobResult result;
  result.ps_shards = shards;
  const absl::Time start = absl::Now();
  absl::Status status;
  for (int64_t generation = 1;; ++generation) {
    if (generation > 1) service.Reset(generation, layout, training);
    Attempt attempt(o, layout, service, result, generation, start);
    status = attempt.Run(coordinator, train_lines);
    if (status.ok()) break;
    service.Stop();
    if (o.launcher == nullptr || result.restarts >= o.max_restarts || !Recoverable(status)) break;
    o.launcher->StopAll(absl::ZeroDuration());
    ++result.restarts;
    result.failures.push_back(std::string(status.message()));
    const std::optional<JobCheckpoint> c = ReadJobCheckpoint(o.job_dir);
    const std::string event =
        absl::StrCat("restarting from step ", c ? c->step : 0, ": ", status.message());
    if (!o.progress) base::LogLine(event);
    if (o.progress) {
      o.progress({c ? c->step : 0, 0, 0, absl::ToDoubleSeconds(absl::Now() - start), 0,
                  result.restarts, event});
    }
  }
  service.Stop();
  service.AwaitStopHeard(absl::Seconds(5));
  if (status.ok()) {
    // The job is complete: a new job in the same directory starts afresh.
    std::filesystem::remove(o.job_dir + "/checkpoint.json", error);
  }
  if (o.launcher != nullptr) o.launcher->StopAll(absl::Seconds(5));
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  HETERPS_RETURN_IF_ERROR(status);
  return result;
}

}  // namespace heterps::launcher::rpc
