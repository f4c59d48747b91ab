// The coordinator's engine (attempt.h). One class: the steps, rounds, checkpoints, evaluation
// and the plan checks between steps share the attempt's counters. Kept in one file (over 500
// lines) so that the order of what happens at a step boundary is read in one place.
#include "heterps/launcher/attempt.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"
#include "heterps/data/auc.h"
#include "heterps/launcher/job_checkpoint.h"
#include "heterps/launcher/job_status.h"
#include "heterps/worker/model.h"

namespace heterps::launcher {
namespace {

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

// What status.json says of the job's progress.
struct StatusPoint {
  std::string state = "running";
  std::string phase = "training";  // or "evaluating" (the held-out lines), "checkpointing"
  int64_t step = 0, total = 0, samples = 0;  // steps done, in all; samples done
  int64_t samples_before = 0;  // trained before this attempt (a resume): not in samples/s
  double seconds = 0;          // training seconds behind `samples` (for samples/s)
  double loss = 0;
  std::optional<EvalPoint> eval;  // the latest evaluation
  absl::Time step_started;        // when the step in progress began
};

}  // namespace

class Attempt::Impl {
 public:
  Impl(const worker::JobSpec& job, const AttemptOptions& o, const JobLayout& layout,
       AttemptProcesses& processes, JobResult& result, SegmentLedger& ledger, int64_t generation,
       absl::Time job_start)
      : job_(job),
        o_(o),
        layout_(layout),
        p_(processes),
        result_(result),
        ledger_(ledger),
        generation_(generation),
        job_start_(job_start) {
    for (int s = 0; s < static_cast<int>(layout_.replicas.size()); ++s) {
      for (int r = 0; r < layout_.replicas[s]; ++r) replicas_.push_back({s, r});
    }
  }

  absl::Status Run(const std::string& coordinator, int64_t train_lines) {
    if (o_.launcher != nullptr) {
      HETERPS_RETURN_IF_ERROR(o_.launcher->Start(coordinator, layout_.world(), generation_));
    }
    HETERPS_RETURN_IF_ERROR(AwaitRegistration());
    HETERPS_RETURN_IF_ERROR(p_.Connect());
    HETERPS_RETURN_IF_ERROR(
        worker::CreateModelTables(job_.model, &p_.servers(), job_.settings.tables));
    int64_t done = 0;
    result_.losses.clear();
    HETERPS_ASSIGN_OR_RETURN(std::optional<JobCheckpoint> c, ReadJobCheckpoint(o_.env, o_.job_dir));
    if (c && c->step > 0) {
      // Written by another layout (a switch): every shard takes its keys from every old one.
      const int from_shards = c->ps_shards != layout_.ps_shards ? c->ps_shards : 0;
      const absl::Time load_start = absl::Now();
      HETERPS_ASSIGN_OR_RETURN(int64_t step, p_.LoadCheckpoint(c->step, from_shards));
      ledger_.Loaded(absl::ToDoubleSeconds(absl::Now() - load_start));
      done = step;
      result_.losses = c->losses;
      result_.losses.resize(done, 0.0);
      // Evaluations after the checkpoint are made again, as its steps are.
      while (!result_.evals.empty() && result_.evals.back().step > done) result_.evals.pop_back();
      const std::string event = absl::StrCat("resumed from the checkpoint of step ", done);
      if (o_.progress) {
        o_.progress({done, 0, 0, 0, 0, result_.restarts, event, std::nullopt});
      } else {
        base::LogLine(event);
      }
    }
    HETERPS_RETURN_IF_ERROR(Train(done, train_lines));
    if (switch_ || stopped_) return absl::OkStatus();
    if (o_.regions != nullptr) {
      Phase("syncing regions");
      HETERPS_RETURN_IF_ERROR(o_.regions->Finish());
    }
    stats_end_ = CollectStats();  // the training's, not the evaluation's that follows
    {
      const Heartbeat heartbeat(this);
      HETERPS_RETURN_IF_ERROR(Evaluate());
    }
    HETERPS_ASSIGN_OR_RETURN(result_.parameter_digest, p_.Digest());
    Report();
    return absl::OkStatus();
  }

 private:
  absl::Status CheckAlive() {
    if (o_.launcher == nullptr) return absl::OkStatus();
    if (std::optional<RoleLauncher::DeadRole> dead = o_.launcher->Dead()) {
      return absl::UnavailableError(dead->what);
    }
    return absl::OkStatus();
  }

  absl::Status AwaitRegistration() {
    const absl::Time deadline = absl::Now() + o_.register_timeout;
    for (;;) {
      const std::vector<int> missing = p_.Missing();
      if (missing.empty()) return absl::OkStatus();
      HETERPS_RETURN_IF_ERROR(CheckAlive());
      if (p_.StopAsked()) {
        return absl::CancelledError(absl::StrCat("stopped on request while ", missing.size(),
                                                 " processes had not registered"));
      }
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

  absl::Status Train(int64_t done, int64_t train_lines) {
    const int64_t batch = job_.batch_size();
    per_pass_ = (train_lines + batch - 1) / batch;
    train_lines_ = train_lines;
    const int64_t total = per_pass_ * job_.settings.epochs;
    const absl::Time start = absl::Now();
    stats_start_ = CollectStats();
    total_steps_ = total;
    train_start_ = start;
    {
      absl::MutexLock lock(&status_mu_);
      progress_ = StatusPoint();
      progress_.step = done;
      progress_.total = total;
      // The samples of the steps a checkpoint holds: whole passes, then whole batches.
      progress_.samples_before = done / per_pass_ * train_lines + done % per_pass_ * batch;
      samples_before_ = progress_.samples_before;
      progress_.step_started = start;
      if (!result_.evals.empty()) progress_.eval = result_.evals.back();
    }
    const Heartbeat heartbeat(this);
    if (o_.regions != nullptr) {
      if (job_.settings.mode != worker::Consistency::kSync || job_.settings.dense_on_replicas()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "across regions a job trains synchronously, its dense parameters on the servers (this "
            "one: ",
            job_.settings.mode == worker::Consistency::kSync ? "synchronous" : "asynchronous",
            job_.settings.dense_on_replicas() ? ", dense parameters on the replicas" : "", ")"));
      }
      if (o_.regions->begun()) {
        // A later attempt of this run: the windows rewind to the checkpoint it resumed from.
        HETERPS_RETURN_IF_ERROR(o_.regions->Rewind(&p_.servers(), done));
      } else if (done > 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            "across regions a job resumes only within its run (this one found a checkpoint of "
            "step ", done, "; the other regions' windows since are gone): start it again with "
            "--fresh"));
      } else {
        HETERPS_RETURN_IF_ERROR(
            o_.regions->Begin(&p_.servers(), worker::ModelDeltaTables(job_.model), total));
      }
    }
    // Rounds end at checkpoints and evaluations: the only points where asynchronous replicas
    // meet.
    const int64_t every =
        job_.settings.checkpoint_every > 0 ? job_.settings.checkpoint_every : total;
    const int64_t eval_every = job_.settings.eval_interval;
    const bool sync = job_.settings.mode == worker::Consistency::kSync;
    for (int64_t from = done; from < total;) {
      int64_t to = std::min(total, (from / every + 1) * every);
      if (eval_every > 0) to = std::min(to, (from / eval_every + 1) * eval_every);
      HETERPS_RETURN_IF_ERROR(sync ? SyncSteps(from, to) : AsyncSteps(from, to));
      // Synchronous rounds may end early, where a switch or a stop was decided.
      const int64_t end = switch_ ? switch_step_ : stopped_ ? stop_step_ : to;
      // Asynchronous replicas meet only at the rounds' ends: a stop and the re-planner are heard
      // there, before the checkpoint, so that a switch at a round that ends at an evaluation
      // (not at a checkpoint) still writes the checkpoint of its step.
      if (!sync && !switch_) {
        Stop(end);
        if (!stopped_) CheckPlan(end);
      }
      if (end < total && (end % every == 0 || switch_ || stopped_)) {
        HETERPS_RETURN_IF_ERROR(Checkpoint(end));
      }
      if (end < total && !switch_ && !stopped_ && eval_every > 0 && end % eval_every == 0) {
        HETERPS_RETURN_IF_ERROR(EvaluateDuringTraining(end));
      }
      if (stopped_) {  // status.json shows the step the job stopped at, not the last written
        {
          absl::MutexLock lock(&status_mu_);
          progress_.step = end;
        }
        WriteStatus(Snapshot());
      }
      if (switch_ || stopped_) return absl::OkStatus();
      from = end;
    }
    result_.steps = total;
    absl::MutexLock lock(&skipped_mu_);
    // Every pass reads the same lines: a bad line is never trained on, in any pass, and counts
    // once in the job's skipped lines.
    int64_t untrained = 0;
    std::map<int, int64_t> bad;  // per replica
    for (const auto& [where, n] : skipped_) {
      untrained += n;
      bad[where.first] = std::max(bad[where.first], n);
    }
    result_.train_samples = train_lines * job_.settings.epochs - untrained;
    result_.skipped_lines = 0;
    for (const auto& [replica, n] : bad) result_.skipped_lines += n;
    // Training time: the evaluations made between its steps are not part of it.
    result_.seconds = absl::ToDoubleSeconds(absl::Now() - start) - eval_seconds_;
    result_.samples_per_second = result_.seconds > 0 ? samples_ / result_.seconds : 0;
    result_.step_seconds = total > done ? result_.seconds / (total - done) : 0;
    result_.run_step_seconds = timed_steps_ > 0 ? run_step_seconds_ / timed_steps_ : 0;
    result_.commit_seconds = timed_steps_ > 0 ? commit_seconds_ / timed_steps_ : 0;
    const int64_t last_pass = std::max<int64_t>(0, total - per_pass_);
    double sum = 0;
    for (int64_t s = last_pass; s < total; ++s) sum += result_.losses[s];
    result_.train_loss = total > last_pass ? sum / (total - last_pass) : 0;
    steps_trained_ = total - done;
    result_.first_bad_line = first_bad_;
    return absl::OkStatus();
  }

  // What stage-0 replica r ran of a step.
  struct StepPart {
    double loss = 0;                   // summed over its samples
    std::vector<double> block_losses;  // per block of its share, in block order
    int64_t samples = 0;
  };
  // Stage-0 replica r's share of step `step`: its pass, where it starts in the replica's lines of
  // the pass, how many samples, and the step's samples in all.
  struct Share {
    int64_t epoch = 0, offset = 0, count = 0, samples = 0;
  };
  Share ShareOf(int r, int64_t step) const {
    const int64_t batch = job_.batch_size();
    const int64_t j = step % per_pass_;
    const int64_t lo = j * batch, hi = std::min(lo + batch, train_lines_);
    const auto [offset, count] =
        worker::StepShare(j, batch, hi, job_.settings.block_size, r, layout_.replicas[0]);
    return {step / per_pass_, offset, count, hi - lo};
  }

  // Stage-0 replica r's part of step `step`; `last`: the round's last step (what a tier and the
  // stages hold goes back), else the replica learns its share of the next one. Thread-safe.
  absl::StatusOr<StepPart> RunStep(int r, int64_t step, bool last) {
    const Share share = ShareOf(r, step);
    worker::StepRequest request;
    request.step = step;
    request.epoch = share.epoch;
    request.offset = share.offset;
    request.count = share.count;
    request.scale = 1.0f / static_cast<float>(share.samples);
    request.write_back = last;
    if (!last) {
      const Share next = ShareOf(r, step + 1);
      request.next_epoch = next.epoch;
      request.next_offset = next.offset;
      request.next_count = next.count;
    }
    HETERPS_ASSIGN_OR_RETURN(worker::StepOutcome reply, p_.RunStep(r, request));
    if (reply.skipped_lines > 0) {
      absl::MutexLock lock(&skipped_mu_);
      int64_t& seen = skipped_[{r, step / per_pass_}];
      seen = std::max(seen, reply.skipped_lines);
      if (first_bad_.empty()) first_bad_ = reply.first_bad_line;
    }
    return StepPart{reply.loss_sum, std::move(reply.block_losses), reply.samples};
  }

  // Synchronous: each step run by every stage-0 replica, flushed by every replica of the later
  // stages (stage 0 flushes at the end of its step), committed. A GPU tier and the dense
  // parameters the stages hold are written back at the round's last step, or after the step where
  // a stop or a switch ends the round early. Where the later stages send the servers no part of
  // a step (LaterStagesSendNoParts), their flush and the commit run together.
  absl::Status SyncSteps(int64_t from, int64_t to) {
    const int k = layout_.replicas[0];
    std::vector<std::pair<int, int>> later;  // (stage, replica)
    for (const std::pair<int, int>& r : replicas_) {
      if (r.first > 0) later.push_back(r);
    }
    const bool together = !later.empty() && LaterStagesSendNoParts();
    for (int64_t step = from; step < to; ++step) {
      HETERPS_RETURN_IF_ERROR(CheckAlive());
      std::vector<StepPart> parts(k);
      const absl::Time start = absl::Now();
      HETERPS_RETURN_IF_ERROR(ParallelFor(k, [&](int r) -> absl::Status {
        HETERPS_ASSIGN_OR_RETURN(parts[r], RunStep(r, step, step + 1 == to));
        return absl::OkStatus();
      }));
      const absl::Time ran = absl::Now();
      const bool timed = step + 1 < to;  // the last step of a round writes back
      if (timed) run_step_seconds_ += absl::ToDoubleSeconds(ran - start);
      const int flushes = static_cast<int>(later.size());
      HETERPS_RETURN_IF_ERROR(ParallelFor(flushes + (together ? 1 : 0), [&](int i) {
        if (i == flushes) return p_.servers().Commit();
        return p_.Flush(later[i].first, later[i].second, step, step + 1 == to);
      }));
      if (!together) HETERPS_RETURN_IF_ERROR(p_.servers().Commit());
      if (timed) {
        commit_seconds_ += absl::ToDoubleSeconds(absl::Now() - ran);
        ++timed_steps_;
      }
      // The step's blocks' losses added in block order (the replicas' shares are consecutive).
      double loss = 0;
      int64_t samples = 0;
      for (const StepPart& part : parts) {
        for (double l : part.block_losses) loss += l;
        samples += part.samples;
      }
      StepDone(step, samples > 0 ? loss / samples : 0, samples);
      if (o_.regions != nullptr) HETERPS_RETURN_IF_ERROR(o_.regions->AfterStep(step, samples));
      if (Stop(step + 1) || CheckPlan(step + 1)) {
        return step + 1 < to ? WriteBack() : absl::OkStatus();  // the last step wrote back
      }
    }
    return absl::OkStatus();
  }

  // Whether no stage after the first sends the servers a part of a step when flushed: none holds
  // an embedding layer, and their dense parameters are held by their replicas (not
  // dense_on_servers). Their flush then touches nothing the commit applies (a write-back at a
  // round's end writes the dense table, which then has no parts pending), so the two may overlap.
  bool LaterStagesSendNoParts() const {
    if (!job_.settings.dense_on_replicas()) return false;
    for (int s = 1; s < job_.stages(); ++s) {
      const sched::RunStage& stage = job_.plan.stages[s];
      for (int l = stage.first; l <= stage.last; ++l) {
        if (job_.model.layers[l].kind == config::LayerKind::kEmbedding) return false;
      }
    }
    return true;
  }

  // What the replicas hold written back to the parameter servers: every stage-0 replica's GPU
  // tier, and the dense parameters of every stage that holds them (synchronous jobs, unless
  // dense_on_servers). Nothing without either.
  absl::Status WriteBack() {
    const bool dense = job_.settings.dense_on_replicas();
    std::vector<std::pair<int, int>> targets;
    for (const std::pair<int, int>& r : replicas_) {
      if (dense || (r.first == 0 && !job_.settings.gpu_tier_device.empty())) targets.push_back(r);
    }
    return ParallelFor(static_cast<int>(targets.size()),
                       [&](int i) { return p_.WriteBack(targets[i].first, targets[i].second); });
  }

  // Between steps: whether a stop was asked for (RunOptions::stop, or a signalled rank's
  // heartbeat); the job then ends at `step`.
  // Never at the job's end.
  bool Stop(int64_t step) {
    if (!p_.StopAsked() || step >= total_steps_ || stopped_) return stopped_;
    stopped_ = true;
    stop_step_ = step;
    const std::string event = absl::StrCat("stopping at step ", step, ": writing its checkpoint");
    if (o_.progress) {
      o_.progress({step, 0, 0, 0, 0, result_.restarts, event, std::nullopt});
    } else {
      base::LogLine(event);
    }
    return true;
  }

  // Between steps: whether the re-planner wants another plan from `step` on (then switch_ holds
  // it). Never at the job's end.
  bool CheckPlan(int64_t step) {
    if (o_.replanner == nullptr || step >= total_steps_) return false;
    std::optional<PlanSwitch> next =
        o_.replanner->Check(ledger_.Position(job_, step, train_lines_));
    if (!next) return false;
    if (o_.launcher == nullptr && MakeLayout(next->job).world() != layout_.world()) {
      // Nobody can start or end processes: the new plan must fit the ones there are.
      base::LogLine(absl::StrCat("re-plan: ", DescribePlan(next->job), " needs ",
                                 MakeLayout(next->job).world(),
                                 " processes; the external launcher started ", layout_.world(),
                                 ": the job keeps its plan (", next->reason, ")"));
      return false;
    }
    switch_trigger_ = absl::Now();
    ledger_.Trigger(switch_trigger_);
    switch_ = std::move(next);
    switch_step_ = step;
    return true;
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
        // The round's last step: what a tier holds goes back before the checkpoint (or the end).
        absl::StatusOr<StepPart> part = RunStep(r, step, step + 1 == to);
        if (!part.ok()) {
          failed = true;
          return part.status();
        }
        absl::MutexLock lock(&mu);
        auto& [loss, samples, seen] = parts[step];
        loss += part->loss;
        samples += part->samples;
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

  // The progress after `step` steps: the samples of the whole job (a resume's earlier steps
  // included), the rate of this attempt's over its training seconds (evaluations left out).
  JobProgress Progress(int64_t step) const {
    JobProgress progress;
    progress.step = step;
    progress.total_steps = total_steps_;
    progress.samples = samples_before_ + samples_;
    progress.seconds = absl::ToDoubleSeconds(absl::Now() - job_start_);
    progress.loss = average_;
    progress.restarts = result_.restarts;
    const double seconds = absl::ToDoubleSeconds(absl::Now() - train_start_) - eval_seconds_;
    progress.samples_per_second = seconds > 0 ? static_cast<double>(samples_) / seconds : 0;
    return progress;
  }

  void StepDone(int64_t step, double loss, int64_t samples) {
    ledger_.Step(step, samples, absl::Now());
    result_.losses.resize(step + 1, 0.0);
    result_.losses[step] = loss;
    samples_ += samples;
    average_ = step == 0 || average_ == 0 ? loss : 0.98 * average_ + 0.02 * loss;
    if (o_.progress) o_.progress(Progress(step + 1));
    bool due = false;
    {
      absl::MutexLock lock(&status_mu_);
      progress_.step = step + 1;
      progress_.total = total_steps_;
      progress_.samples = samples_;
      progress_.seconds = absl::ToDoubleSeconds(absl::Now() - train_start_) - eval_seconds_;
      progress_.loss = loss;
      progress_.step_started = absl::Now();
      due = absl::Now() - last_status_ > absl::Seconds(1);
    }
    if (due) WriteStatus(Snapshot());
  }

  // The progress status.json reports, as the training thread last left it.
  StatusPoint Snapshot() {
    absl::MutexLock lock(&status_mu_);
    return progress_;
  }

  // While the job trains, rewrites status.json whenever the steps have not for a while (a step
  // that runs long), with how long the step in progress has run and what the replicas are doing.
  class Heartbeat {
   public:
    explicit Heartbeat(Impl* attempt)
        : thread_([this, attempt] {
            while (!stop_.WaitForNotificationWithTimeout(absl::Seconds(1))) {
              bool due = false;
              {
                absl::MutexLock lock(&attempt->status_mu_);
                due = absl::Now() - attempt->last_status_ > absl::Seconds(2);
              }
              if (due) attempt->WriteStatus(attempt->Snapshot());
            }
          }) {}
    ~Heartbeat() {
      stop_.Notify();
      thread_.join();
    }

   private:
    absl::Notification stop_;
    std::thread thread_;
  };

  // What the job does from now on ("training", "evaluating", "checkpointing"): status.json's
  // phase, and its step_seconds counted from here.
  void Phase(const char* phase) {
    absl::MutexLock lock(&status_mu_);
    progress_.phase = phase;
    progress_.step_started = absl::Now();
  }

  absl::Status Checkpoint(int64_t step) {
    const absl::Time start = absl::Now();
    // A server that does not answer holds the save up to its RPC deadline: status.json says
    // what the job waits for, and for how long (the heartbeat goes on rewriting it).
    Phase("checkpointing");
    absl::Status saved = p_.SaveCheckpoint(step);
    Phase("training");
    HETERPS_RETURN_IF_ERROR(saved);
    std::vector<double> losses(
        result_.losses.begin(),
        result_.losses.begin() +
            std::min<int64_t>(step, static_cast<int64_t>(result_.losses.size())));
    HETERPS_RETURN_IF_ERROR(JobFileError(WriteJobCheckpoint(
        o_.env, o_.job_dir,
        {step, std::move(losses), layout_.ps_shards, o_.job_id, worker::JobIdentity(job_)})));
    ledger_.Checkpointed(step, absl::ToDoubleSeconds(absl::Now() - start));
    if (o_.regions != nullptr) o_.regions->Checkpointed(step);  // a restart rewinds to it
    return absl::OkStatus();
  }

 public:
  const std::optional<PlanSwitch>& switch_to() const { return switch_; }
  int64_t switch_step() const { return switch_step_; }
  // Whether the attempt ended on a stop request, and at which step (checkpointed).
  bool stopped() const { return stopped_; }
  int64_t stop_step() const { return stop_step_; }
  absl::Time switch_trigger() const { return switch_trigger_; }

 private:
  // The held-out lines' evaluation at the end of the job; the job's bad lines count the held-out
  // ones once, here.
  absl::Status Evaluate() {
    if (job_.eval_every() <= 0) return absl::OkStatus();
    int64_t skipped = 0;
    std::string first_bad;
    HETERPS_ASSIGN_OR_RETURN(const data::Evaluation eval,
                             EvaluateHeldOut(result_.steps, &skipped, &first_bad));
    result_.skipped_lines += skipped;
    if (result_.first_bad_line.empty()) result_.first_bad_line = first_bad;
    result_.eval_samples = eval.samples;
    result_.eval_loss = eval.logloss;
    result_.eval_auc = eval.auc;
    return absl::OkStatus();
  }

  // An evaluation between the steps `step` - 1 and `step`, recorded and reported as progress.
  absl::Status EvaluateDuringTraining(int64_t step) {
    if (job_.eval_every() <= 0) return absl::OkStatus();
    int64_t skipped = 0;
    const absl::Time start = absl::Now();
    std::string first_bad;
    HETERPS_ASSIGN_OR_RETURN(const data::Evaluation eval,
                             EvaluateHeldOut(step, &skipped, &first_bad));
    eval_seconds_ += absl::ToDoubleSeconds(absl::Now() - start);
    const EvalPoint point{step, step * job_.batch_size(), eval.logloss, eval.auc};
    result_.evals.push_back(point);
    {
      absl::MutexLock lock(&status_mu_);
      progress_.eval = point;
      progress_.step_started = absl::Now();  // the next step starts after the evaluation
    }
    if (o_.progress) {
      JobProgress progress = Progress(step);
      progress.eval = point;
      o_.progress(progress);
    }
    return absl::OkStatus();
  }

  // Every stage-0 replica's share of the held-out lines through the model at `step`'s
  // parameters; `skipped`: the bad held-out lines skipped, `first_bad` the first of them named.
  absl::StatusOr<data::Evaluation> EvaluateHeldOut(int64_t step, int64_t* skipped,
                                                   std::string* first_bad) {
    const int first = layout_.replicas[0];
    std::vector<worker::EvalOutcome> replies(first);
    Phase("evaluating");
    WriteStatus(Snapshot());
    // Between steps a dead process is noticed before the next one (CheckAlive); an evaluation
    // is one long call per replica, so a watcher looks while it runs and cancels it.
    std::optional<std::string> dead;
    absl::Notification evaluated;
    std::thread watcher([&] {
      while (o_.launcher != nullptr &&
             !evaluated.WaitForNotificationWithTimeout(absl::Milliseconds(100))) {
        if (std::optional<RoleLauncher::DeadRole> role = o_.launcher->Dead()) {
          dead = role->what;
          p_.CancelAll();
          return;
        }
      }
    });
    absl::Status ran = ParallelFor(first, [&](int r) -> absl::Status {
      HETERPS_ASSIGN_OR_RETURN(replies[r], p_.Evaluate(r, step));
      return absl::OkStatus();
    });
    evaluated.Notify();
    watcher.join();
    p_.Resume();
    Phase("training");
    if (dead) return absl::UnavailableError(*dead);
    HETERPS_RETURN_IF_ERROR(ran);
    std::vector<float> scores, labels;
    for (const worker::EvalOutcome& reply : replies) {
      if (reply.labels.size() != reply.probabilities.size()) {
        return absl::InternalError("evaluation: probabilities and labels differ in number");
      }
      scores.insert(scores.end(), reply.probabilities.begin(), reply.probabilities.end());
      labels.insert(labels.end(), reply.labels.begin(), reply.labels.end());
      *skipped += reply.skipped_lines;
      if (first_bad->empty()) *first_bad = reply.first_bad_line;
    }
    return data::Evaluate(scores, labels);
  }

  // Every replica's counters, in replicas_' order; zeros for one that does not answer in 2 s.
  std::vector<ReplicaFigures> CollectStats() {
    std::vector<ReplicaFigures> stats(replicas_.size());
    ParallelFor(static_cast<int>(replicas_.size()), [&](int i) -> absl::Status {
      HETERPS_ASSIGN_OR_RETURN(stats[i],
                               p_.Stats(replicas_[i].first, replicas_[i].second, absl::Seconds(2)));
      return absl::OkStatus();
    }).IgnoreError();
    return stats;
  }

  // status.json from `p` and the replicas' and servers' figures of now. Thread-safe: the
  // training thread and the heartbeat write one at a time.
  void WriteStatus(const StatusPoint& p) {
    absl::MutexLock write(&write_mu_);
    JobStatus status;
    const std::vector<ReplicaFigures> figures = CollectStats();
    for (size_t i = 0; i < figures.size(); ++i) {
      const worker::ReplicaStats& s = figures[i].stats;
      ReplicaStatus& r = status.replicas.emplace_back();
      r.stage = replicas_[i].first;
      r.replica = replicas_[i].second;
      r.micro_batches = s.micro_batches;
      r.busy_seconds = s.busy_seconds;
      r.idle_seconds = s.idle_seconds;
      r.send_seconds = s.send_seconds;
      r.ps_seconds = s.ps_seconds;
      r.bytes_sent = figures[i].bytes_sent;
      r.queue_depth = s.queue_depth;
      r.in_flight = s.in_flight;
      r.pcie_bytes = s.pcie_bytes;
      r.tier_hits = s.tier_hits;
      r.tier_misses = s.tier_misses;
      r.ps_rpcs = figures[i].ps_rpcs;
    }
    // A server that does not answer within 2 s (stopped, or busy with a long call) leaves the
    // servers' figures as they were last seen: the status itself is written on time.
    if (absl::StatusOr<std::vector<ShardStatus>> ps = p_.ServerStats(absl::Seconds(2)); ps.ok()) {
      last_shards_ = *std::move(ps);
    }
    status.parameter_servers = last_shards_;
    status.state = p.state;
    status.pid = getpid();
    status.generation = generation_;
    status.restarts = result_.restarts;
    status.step = p.step;
    status.total_steps = p.total;
    status.samples = p.samples_before + p.samples;
    status.samples_per_second = p.seconds > 0 ? p.samples / p.seconds : 0.0;
    status.predicted_samples_per_second = job_.plan.throughput;
    status.loss = p.loss;
    if (p.state == "running") {
      status.step_seconds = absl::ToDoubleSeconds(absl::Now() - p.step_started);
      status.phase = p.phase;
    }
    if (p.eval) {
      status.eval_step = p.eval->step;
      status.eval_logloss = p.eval->logloss;
      status.eval_auc = p.eval->auc;
    }
    status.updated = absl::FormatTime(o_.env->Now());
    WriteJobStatus(o_.env, o_.job_dir, status).IgnoreError();
    absl::MutexLock lock(&status_mu_);
    last_status_ = absl::Now();
  }

  // Adds a replica's bytes between `b` and `e`, per step, to the stage's.
  static void AddTraffic(const ReplicaFigures& b, const ReplicaFigures& e, double steps,
                         StageReport* report) {
    report->forward_bytes += static_cast<double>(e.forward_bytes - b.forward_bytes) / steps;
    report->back_bytes += static_cast<double>(e.back_bytes - b.back_bytes) / steps;
    for (const base::MethodStats& m : e.ps_rpcs) {
      int64_t sent = m.sent_bytes, received = m.received_bytes;
      for (const base::MethodStats& before : b.ps_rpcs) {
        if (before.method != m.method) continue;
        sent -= before.sent_bytes;
        received -= before.received_bytes;
      }
      // The dense blocks' calls and the control calls; every other method carries keys.
      static const absl::flat_hash_set<std::string> kNoKeys = {
          "PullDense", "PushDense", "ExportDense", "ImportDense", "Commit", "Info", "Stats",
          "CreateTable", "SaveCheckpoint", "LoadCheckpoint", "Digest", "TrackDeltas"};
      const bool rows = !kNoKeys.contains(m.method);
      (rows ? report->rows_sent_bytes : report->dense_sent_bytes) +=
          static_cast<double>(sent) / steps;
      (rows ? report->rows_received_bytes : report->dense_received_bytes) +=
          static_cast<double>(received) / steps;
    }
  }

  void Report() {
    result_.stages.clear();
    const double steps = static_cast<double>(std::max<int64_t>(steps_trained_, 1));
    for (int s = 0; s < job_.stages(); ++s) {
      const sched::RunStage& stage = job_.plan.stages[s];
      StageReport report{job_.plan.StageName(job_.model, s), stage.type, stage.device, stage.units,
                         stage.seconds_per_batch};
      for (size_t i = 0; i < stats_end_.size() && i < stats_start_.size(); ++i) {
        if (replicas_[i].first != s) continue;
        const worker::ReplicaStats &b = stats_start_[i].stats, &e = stats_end_[i].stats;
        // What the replica's counter `field` grew by while the job trained.
        auto grew = [&](auto worker::ReplicaStats::*field) {
          return static_cast<double>(e.*field - b.*field);
        };
        report.dense_held = report.dense_held || e.dense_held;
        AddTraffic(stats_start_[i], stats_end_[i], steps, &report);
        const double write_back = grew(&worker::ReplicaStats::write_back_seconds);
        const double busy = grew(&worker::ReplicaStats::busy_seconds) - write_back;
        const double idle = grew(&worker::ReplicaStats::idle_seconds);
        if (busy / steps >= report.measured_seconds) {
          report.measured_seconds = busy / steps;
          report.ps_seconds = grew(&worker::ReplicaStats::ps_seconds) / steps;
          report.prefetch_seconds = grew(&worker::ReplicaStats::prefetch_seconds) / steps;
          report.step_end_seconds = grew(&worker::ReplicaStats::step_end_seconds) / steps;
          if (s == 0) {
            report.read_seconds = grew(&worker::ReplicaStats::read_seconds) / steps;
            report.run_seconds = grew(&worker::ReplicaStats::run_seconds) / steps;
          }
          report.lookup_seconds = grew(&worker::ReplicaStats::lookup_seconds) / steps;
          report.dense_seconds = grew(&worker::ReplicaStats::dense_seconds) / steps;
          report.rows_seconds = grew(&worker::ReplicaStats::rows_seconds) / steps;
          report.gradients_seconds = grew(&worker::ReplicaStats::gradients_seconds) / steps;
          report.send_seconds = grew(&worker::ReplicaStats::send_seconds) / steps;
          report.write_back_seconds = write_back;
          report.idle_fraction = busy + idle > 0 ? idle / (busy + idle) : 0;
          report.pcie_bytes = grew(&worker::ReplicaStats::pcie_bytes) / steps;
          const double hits = grew(&worker::ReplicaStats::tier_hits);
          const double misses = grew(&worker::ReplicaStats::tier_misses);
          if (!job_.settings.gpu_tier_device.empty() && s == 0 && hits + misses > 0) {
            report.tier_hit_rate = hits / (hits + misses);
            report.tier_loaded_rows = grew(&worker::ReplicaStats::tier_loaded_rows) / steps;
            report.tier_ahead_rows = grew(&worker::ReplicaStats::tier_ahead_rows) / steps;
            report.tier_written_back_rows =
                grew(&worker::ReplicaStats::tier_written_back_rows) / steps;
            report.tier_feeds_stage = e.tier_feeds_stage;
          }
        }
      }
      result_.stages.push_back(report);
    }
    StatusPoint done;
    done.state = "done";
    done.step = done.total = result_.steps;
    done.samples = samples_;  // this attempt's, over its seconds; the steps before as before
    done.samples_before = std::max<int64_t>(0, result_.train_samples - samples_);
    done.seconds = result_.seconds;
    done.loss = result_.train_loss;
    if (result_.eval_samples > 0) {
      done.eval =
          EvalPoint{result_.steps, result_.train_samples, result_.eval_loss, result_.eval_auc};
    }
    WriteStatus(done);
  }

  const worker::JobSpec& job_;
  const AttemptOptions& o_;
  const JobLayout& layout_;
  AttemptProcesses& p_;
  std::vector<std::pair<int, int>> replicas_;  // (stage, replica) of every replica, stage order
  JobResult& result_;
  SegmentLedger& ledger_;
  const int64_t generation_;
  const absl::Time job_start_;
  // The replicas' counters when the training starts and when it ends (before the evaluation).
  std::vector<ReplicaFigures> stats_start_, stats_end_;
  int64_t steps_trained_ = 0;
  int64_t per_pass_ = 1, train_lines_ = 0, total_steps_ = 0, samples_ = 0;
  int64_t samples_before_ = 0;  // the samples of the steps before this attempt's first
  double eval_seconds_ = 0;     // this attempt's evaluations between steps
  // Synchronous steps but the rounds' last (which write back): waiting for stage 0's RunStep
  // calls, and for the flushes and the commit.
  double run_step_seconds_ = 0, commit_seconds_ = 0;
  int64_t timed_steps_ = 0;
  double average_ = 0;
  absl::Time train_start_;
  absl::Mutex write_mu_;   // one status writer at a time
  absl::Mutex status_mu_;  // after write_mu_ where both are held
  std::vector<ShardStatus> last_shards_ ABSL_GUARDED_BY(write_mu_);  // the servers, last seen
  StatusPoint progress_ ABSL_GUARDED_BY(status_mu_);
  absl::Time last_status_ ABSL_GUARDED_BY(status_mu_) = absl::InfinitePast();
  absl::Mutex skipped_mu_;
  std::map<std::pair<int, int64_t>, int64_t> skipped_
      ABSL_GUARDED_BY(skipped_mu_);  // (replica, pass)
  std::string first_bad_ ABSL_GUARDED_BY(skipped_mu_);
  std::optional<PlanSwitch> switch_;
  int64_t switch_step_ = 0;
  bool stopped_ = false;
  int64_t stop_step_ = 0;
  absl::Time switch_trigger_;
};

Attempt::Attempt(const worker::JobSpec& job, const AttemptOptions& options, const JobLayout& layout,
                 AttemptProcesses& processes, JobResult& result, SegmentLedger& ledger,
                 int64_t generation, absl::Time job_start)
    : impl_(std::make_unique<Impl>(job, options, layout, processes, result, ledger, generation,
                                   job_start)) {}

Attempt::~Attempt() = default;

absl::Status Attempt::Run(const std::string& coordinator, int64_t train_lines) {
  return impl_->Run(coordinator, train_lines);
}

const std::optional<PlanSwitch>& Attempt::switch_to() const { return impl_->switch_to(); }
int64_t Attempt::switch_step() const { return impl_->switch_step(); }
absl::Time Attempt::switch_trigger() const { return impl_->switch_trigger(); }
bool Attempt::stopped() const { return impl_->stopped(); }
int64_t Attempt::stop_step() const { return impl_->stop_step(); }

}  // namespace heterps::launcher
