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
//   genetic      a genetic algorithm over assignments: tournaments, two-point crossover, mutation,
//                elitism; 2000 plans by default
//   bo           Bayesian optimisation: a Gaussian process on type features, expected improvement
//                over mutations of the best plans; 300 plans by default
//   random       uniformly random assignments without replacement; 2000 plans by default
//   auto         rl for a third of the time limit, then exact for the rest with rl's plan as its
//                incumbent: the better of the two, with exact's lower bound
//
// genetic, bo and random are randomized (SchedulerOptions::seed), never certify optimality, count
// each distinct plan once against SchedulerOptions::max_plans and stop at the time limit.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

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
std::unique_ptr<Scheduler> NewGeneticScheduler();
std::unique_ptr<Scheduler> NewBayesOptScheduler();
std::unique_ptr<Scheduler> NewRandomScheduler();
// `rl`: the scheduler auto runs first (registered apart, in rl/rl_scheduler.h).
std::unique_ptr<Scheduler> NewAutoScheduler(std::unique_ptr<Scheduler> rl);

// The assignment with the smallest bottleneck when every stage gets all units of its type (shared
// limits ignored): if any plan meets the throughput limit, this one usually does. A seed for the
// searches' feasibility, and what `exact` reports when no plan is feasible.
std::vector<int> FastestAssignment(const cost::CostModel& model);

// The cheapest assignments at `count` bottlenecks from B / TL down to half of it, each from the
// exact method's dynamic program, which ignores that stages of one type share its units (so a plan
// may break them: its provisioning then says so), and, at a bottleneck where that plan breaks them,
// those plans of the Lagrangian dual's dynamic programs, as the exact method fits its unit prices
// (at most 40 each), that fit the units. Distinct, in that order. A seed for searches: where the
// units do not bind, the one at the optimum's bottleneck is the optimum; where they do, the priced
// plans are those that fit them at the least extra cost.
// Returns what it has after `seconds` (0: no limit).
std::vector<std::vector<int>> RelaxedAssignments(const cost::CostModel& model, int count,
                                                 double seconds = 0);

// Plans that respect the units, at most one per bottleneck e: of 48 bottlenecks from B / TL down to
// a 32nd of it, the `count` whose units-relaxed job cost (c e (S(e) + P(e)), the exact method's
// bound) is least, and at each the cheapest plan a beam search finds (the cheapest parameter
// servers' units set aside first): layer by layer, the `width` partial plans whose sum p k so far
// plus the relaxed dynamic program's cost of the remaining layers is least are each extended by
// one more stage of any type and length that the units left allow. Distinct, cheapest bound first.
// Where the units bind across many stages (chains of small pools, whose optimum often runs far
// faster than the limit asks: more units, each used in full), the Lagrangian plans leave a duality
// gap and single moves cannot reach the optimum; the beam often comes within a few percent.
// Returns what it has after `seconds` (0: no limit).
std::vector<std::vector<int>> BeamAssignments(const cost::CostModel& model, int count, int width,
                                              double seconds = 0);

// `plan` with the best lower bound the exact method proves within `seconds` (plan's own
// assignment as its incumbent), in lower_bound_usd; a certified exact or brute plan keeps its
// own. A bound is never above the optimum, so the plan's optimality_gap() is never below the
// true one.
PricedPlan BoundPlan(const cost::CostModel& model, PricedPlan plan, double seconds);

}  // namespace heterps::sched
