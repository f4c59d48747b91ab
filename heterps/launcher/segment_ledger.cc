#include "heterps/launcher/segment_ledger.h"

#include <algorithm>

namespace heterps::launcher {

double SegmentLedger::rate() const {
  return replanner_ != nullptr ? replanner_->CostPerHour() : plan_rate_;
}

void SegmentLedger::Accrue(absl::Time now) {
  if (!open_ || now <= mark_) return;
  segments_.back().cost_usd += absl::ToDoubleSeconds(now - mark_) * rate() / 3600;
  mark_ = now;
}

void SegmentLedger::Begin(const worker::JobSpec& job, const std::string& reason, int64_t first_step,
                          absl::Time trigger, absl::Time now) {
  if (open_) End(now);
  plan_rate_ = job.plan.cost_per_hour_usd;
  JobSegment s;
  s.plan = DescribePlan(job);
  s.reason = reason;
  s.first_step = first_step;
  s.predicted_samples_per_second = job.plan.throughput;
  s.cost_per_hour_usd = rate();
  s.switch_cost_usd = switch_tail_usd_;
  s.checkpoint_seconds = switch_checkpoint_seconds_;
  switch_checkpoint_seconds_ = 0;
  segments_.push_back(std::move(s));
  open_ = true;
  start_ = mark_ = now;
  trigger_ = trigger;
  stepped_ = false;
  samples_after_first_ = 0;
  usd_at_trigger_ = -1;
  switch_tail_usd_ = 0;
  since_checkpoint_.clear();
}

void SegmentLedger::Checkpointed(int64_t step, double seconds) {
  checkpoint_seconds_ = seconds;
  if (usd_at_trigger_ >= 0) switch_checkpoint_seconds_ = seconds;  // the switch's own
  since_checkpoint_.erase(std::remove_if(since_checkpoint_.begin(), since_checkpoint_.end(),
                                         [step](const Counted& c) { return c.step < step; }),
                          since_checkpoint_.end());
}

void SegmentLedger::RolledBack(int64_t step) {
  if (!open_) return;
  JobSegment& s = segments_.back();
  while (!since_checkpoint_.empty() && since_checkpoint_.back().step >= step) {
    const Counted& c = since_checkpoint_.back();
    --s.steps;
    s.samples -= c.samples;
    first_sample_usd_per_hour_ -= c.first_sample_usd_per_hour;
    since_checkpoint_.pop_back();
  }
}

void SegmentLedger::Loaded(double seconds) {
  if (open_) segments_.back().load_seconds = seconds;
}

void SegmentLedger::Trigger(absl::Time now) {
  if (!open_) return;
  Accrue(now);
  usd_at_trigger_ = segments_.back().cost_usd;
}

void SegmentLedger::Step(int64_t step, int64_t samples, absl::Time now) {
  if (!open_) return;
  Accrue(now);
  JobSegment& s = segments_.back();
  if (!stepped_) {
    stepped_ = true;
    first_step_at_ = now;
    s.switch_seconds = absl::ToDoubleSeconds(now - trigger_);
    s.switch_cost_usd += s.cost_usd;  // everything before its first step
    startup_seconds_ = absl::ToDoubleSeconds(now - start_);
  } else {
    samples_after_first_ += samples;
  }
  last_step_at_ = now;
  ++s.steps;
  s.samples += samples;
  Counted counted{step, samples, 0};
  if (replanner_ == nullptr) {
    counted.first_sample_usd_per_hour = static_cast<double>(samples) * plan_rate_;
  } else if (const std::optional<double> first = replanner_->FirstPlanCostPerHour()) {
    counted.first_sample_usd_per_hour = static_cast<double>(samples) * *first;
  } else {
    first_possible_ = false;
  }
  first_sample_usd_per_hour_ += counted.first_sample_usd_per_hour;
  since_checkpoint_.push_back(counted);
}

void SegmentLedger::End(absl::Time now) {
  if (!open_) return;
  Accrue(now);
  JobSegment& s = segments_.back();
  s.seconds = absl::ToDoubleSeconds(now - start_);
  s.samples_per_second = samples_per_second();
  switch_tail_usd_ = usd_at_trigger_ >= 0 ? s.cost_usd - usd_at_trigger_ : 0;
  open_ = false;
}

double SegmentLedger::samples_per_second() const {
  if (!stepped_ || last_step_at_ <= first_step_at_) return 0;
  return static_cast<double>(samples_after_first_) /
         absl::ToDoubleSeconds(last_step_at_ - first_step_at_);
}

double SegmentLedger::switch_seconds() const { return startup_seconds_ + 2 * checkpoint_seconds_; }

void SegmentLedger::Fill(JobResult* result) const {
  result->segments = segments_;
  result->cost_usd = 0;
  result->switch_cost_usd = 0;
  for (size_t i = 0; i < segments_.size(); ++i) {
    result->cost_usd += segments_[i].cost_usd;
    if (i > 0) result->switch_cost_usd += segments_[i].switch_cost_usd;
  }
  if (segments_.empty() || !first_possible_) {
    result->first_plan_cost_usd = -1;
    return;
  }
  const JobSegment& first = segments_.front();
  const double rate =
      first.samples_per_second > 0 ? first.samples_per_second : first.predicted_samples_per_second;
  result->first_plan_cost_usd =
      first.switch_cost_usd + (rate > 0 ? first_sample_usd_per_hour_ / rate / 3600 : 0);
}

JobPosition SegmentLedger::Position(const worker::JobSpec& job, int64_t step,
                                    int64_t train_lines) const {
  const int64_t batch = job.batch_size();
  JobPosition position;
  position.step = step;
  position.total_steps = (train_lines + batch - 1) / batch * job.settings.epochs;
  position.samples_left = std::max<int64_t>(0, train_lines * job.settings.epochs - step * batch);
  position.samples_per_second = samples_per_second();
  position.switch_seconds = switch_seconds();
  return position;
}

}  // namespace heterps::launcher
