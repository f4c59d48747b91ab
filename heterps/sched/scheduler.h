// The Scheduler interface: choose a resource type for every layer so that the provisioned plan
// meets the throughput limit at the lowest cost. Schedulers are built by name from a
// SchedulerRegistry.
//
// Example:
//   SchedulerRegistry registry = DefaultSchedulers();  // default_schedulers.h
//   HETERPS_ASSIGN_OR_RETURN(auto scheduler, registry.Create("exact"));
//   SchedulerOptions options;
//   options.seed = 7;
//   HETERPS_ASSIGN_OR_RETURN(PricedPlan plan, scheduler->Schedule(cost_model, options));
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/cost/cost_model.h"
#include "heterps/sched/priced_plan.h"

namespace heterps::sched {

struct SchedulerOptions {
  uint64_t seed = 1;               // for randomized schedulers; same seed, same plan
  double time_limit_seconds = 60;  // wall-clock budget; <= 0 means none
  int64_t max_plans = 0;           // budget of evaluated plans; 0: the scheduler's default
  // Called now and then by long searches with (plans evaluated, best cost so far or +inf).
  // May be empty. Called on the scheduler's thread.
  std::function<void(int64_t, double)> progress;
  // Learned schedulers only: a policy file to start from, and one to write the trained policy to.
  // Empty: start fresh / do not save.
  std::string policy_in;
  std::string policy_out;
  // Assignments (a type per layer) known to be good, e.g. another scheduler's plans: `exact`
  // evaluates them first, so that its result is never worse than the best of them. Others ignore
  // them. An assignment of the wrong length or with an unknown type is skipped.
  std::vector<std::vector<int>> incumbents;
  // `exact` only: the nodes a candidate bottleneck's first depth-first search may visit before
  // it is set back, to be searched again later with 4 times as many (0: 4096). The result is
  // exact whatever the value; tests set 1 to take the set-back path everywhere.
  int64_t exact_first_nodes = 0;
};

// Thread safety: a Scheduler object is used by one thread at a time; distinct objects are
// independent.
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  virtual absl::string_view name() const = 0;
  // The best plan the scheduler finds. An infeasible instance gives a PricedPlan with feasible ==
  // false and `why` set, not an error; errors are for requests the scheduler refuses (too large for
  // brute force, say).
  virtual absl::StatusOr<PricedPlan> Schedule(const cost::CostModel& model,
                                              const SchedulerOptions& options) = 0;
};

// Builds schedulers by name. Not thread-safe for Register; Create may be called concurrently.
class SchedulerRegistry {
 public:
  using Factory = std::function<std::unique_ptr<Scheduler>()>;

  void Register(std::string name, std::string description, Factory factory);
  // NotFound listing the valid names if `name` is unknown.
  absl::StatusOr<std::unique_ptr<Scheduler>> Create(absl::string_view name) const;
  std::vector<std::string> Names() const;
  std::string Description(absl::string_view name) const;

 private:
  struct Entry {
    std::string description;
    Factory factory;
  };
  std::map<std::string, Entry, std::less<>> entries_;
};

}  // namespace heterps::sched
