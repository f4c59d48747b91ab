// The built-in schedulers. Each is also registered by name in DefaultSchedulers().
//
//   brute        every plan (T^L of them); refuses above a size limit
//   exact        the certified optimum: a dynamic program over layer segments for each candidate
//                bottleneck, best-first branch-and-bound over the candidates, and a depth-first
//                search where shared unit limits bind (docs/schedulers.md)
//   greedy       per layer, the type with the lowest time x price
//   manual       sparse layers on the cheapest CPU per looked-up row, dense layers on the GPU
//                with the best price per FLOP: what users do by hand
//   homogeneous  everything on one type, each type tried, the cheapest kept
#pragma once

#include <cstdint>
#include <memory>

#include "heterps/sched/scheduler.h"

namespace heterps::sched {

// Brute force refuses instances with more than this many plans unless SchedulerOptions::max_plans
// says otherwise.
inline constexpr int64_t kBruteDefaultMaxPlans = 1000000;

std::unique_ptr<Scheduler> NewBruteScheduler();
std::unique_ptr<Scheduler> NewExactScheduler();
std::unique_ptr<Scheduler> NewGreedyScheduler();
std::unique_ptr<Scheduler> NewManualScheduler();
std::unique_ptr<Scheduler> NewHomogeneousScheduler();

}  // namespace heterps::sched
