// Checks shared by the schedulers' tests (gtest assertions).
#pragma once

#include "absl/strings/string_view.h"
#include "heterps/cost/cost_model.h"
#include "heterps/sched/priced_plan.h"
#include "heterps/sched/scheduler.h"

namespace heterps::sched::testing {

// The plan of the scheduler registered as `name` (a test failure if it errs).
PricedPlan Schedule(absl::string_view name, const cost::CostModel& model,
                    const SchedulerOptions& options = {});

// A plan is valid if it covers every layer, its stages are maximal runs of its assignment, its
// units respect availability, and its figures are those of exact provisioning.
void ExpectValid(const cost::CostModel& model, const PricedPlan& plan);

}  // namespace heterps::sched::testing
