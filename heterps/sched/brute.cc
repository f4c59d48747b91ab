// Brute force: provisions every one of the T^L scheduling plans. The oracle for `exact`.
#include <cmath>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "heterps/base/deadline.h"
#include "heterps/base/numbers.h"
#include "heterps/sched/schedulers.h"

namespace heterps::sched {
namespace {

class BruteScheduler : public Scheduler {
 public:
  absl::string_view name() const override { return "brute"; }

  absl::StatusOr<PricedPlan> Schedule(const cost::CostModel& model,
                                      const SchedulerOptions& options) override {
    const int num_layers = model.num_layers(), num_types = model.num_types();
    const double plans = std::pow(static_cast<double>(num_types), num_layers);
    const int64_t limit = options.max_plans > 0 ? options.max_plans : kBruteDefaultMaxPlans;
    if (plans > static_cast<double>(limit)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "brute force would evaluate %s plans (%d types ^ %d layers), more than its limit of "
          "%s; use the exact scheduler, or raise the limit with --max-plans",
          base::WithCommas(plans), num_types, num_layers, base::WithCommas(limit)));
    }
    base::Deadline deadline(options.time_limit_seconds);
    std::vector<int> assignment(num_layers, 0);
    PricedPlan best;
    int64_t evaluated = 0;
    bool complete = true;
    while (true) {
      PricedPlan plan = PricePlan(model, assignment);
      if (evaluated++ == 0 || Better(plan, best)) best = std::move(plan);
      if (evaluated % 1024 == 0) {
        if (options.progress) options.progress(evaluated, best.feasible ? best.cost_usd : INFINITY);
        if (deadline.Expired()) {
          complete = false;
          break;
        }
      }
      int l = 0;  // advance the odometer
      while (l < num_layers && ++assignment[l] == num_types) assignment[l++] = 0;
      if (l == num_layers) break;
    }
    best.scheduler = std::string(name());
    best.certified_optimal = complete && best.feasible;
    best.cut_short = !complete;
    best.plans_evaluated = evaluated;
    best.search_seconds = deadline.Elapsed();
    return best;
  }
};

}  // namespace

std::unique_ptr<Scheduler> NewBruteScheduler() { return std::make_unique<BruteScheduler>(); }

}  // namespace heterps::sched
