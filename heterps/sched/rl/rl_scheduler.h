// The reinforcement-learning scheduler (`rl`): an LSTM policy (lstm_policy.h) trained with
// REINFORCE on this instance, returning the best feasible plan it has seen.
//
// Each update samples `batch` plans, provisions each exactly (cost::Provision through PricePlan),
// and rewards it with -log(C / C_ref) when feasible (C_ref: the cheapest homogeneous or greedy
// plan, or the first feasible plan sampled) and -(infeasible_penalty + log(1 + shortfall))
// when not. The gradient is the REINFORCE estimate with an exponential-moving-average baseline,
// advantages scaled by the batch's spread, an entropy bonus that decays linearly with the budget
// spent, clipping of its global norm, and Adam; every update also replays the best plan seen so
// far (self-imitation). Training stops at its share of the budget of distinct evaluated plans, at
// the time limit, or when the policy has converged. A local search around the best plan (retype a
// stage, move a stage boundary, split a stage), whose candidate types are ranked by the trained
// policy, then spends what is left. docs/rl_scheduler.md explains the choices.
//
// Deterministic for a given SchedulerOptions::seed (unless the time limit stops it).
#pragma once

#include <cstdint>
#include <memory>

#include "heterps/sched/scheduler.h"

namespace heterps::sched::rl {

struct RlOptions {
  int hidden = 64;                  // LSTM width
  int batch = 16;                   // plans sampled per policy update
  double learning_rate = 0.02;      // Adam step size
  double entropy_start = 0.05;      // weight of the entropy bonus at the first update; it falls
                                    // linearly to 0 as the training budget is spent
  double baseline_decay = 0.9;      // exponential moving average of the batch mean reward
  double clip_norm = 1.0;           // gradients with a larger L2 norm are scaled down to it
  double infeasible_penalty = 3.0;  // reward offset of an infeasible plan (log-cost units)
  int64_t default_budget = 3000;    // distinct evaluated plans when max_plans is 0
  int patience = 40;                // updates without a better plan before a converged policy stops
  bool self_imitation = true;       // replay the best plan seen in every update
  double polish_share = 0.3;        // share of the budget kept for the local search
  int polish_types = 6;             // types tried per move in the local search, best ranked first
  double split_share = 0.2;         // most of the budget the two-type splits take (SeedSplits)
  int split_types = 6;              // types whose pairs are tried: the cheapest alone, and as
                                    // many whose units ran out alone
  int split_cuts = 3;               // cuts evaluated per pair, those estimated cheapest
  int window_plans = 3;             // plans evaluated per window of two stages (Rewindow)
  int relaxed_plans = 8;            // plans of the units-relaxed dynamic program evaluated first
                                    // (RelaxedAssignments, schedulers.h)
  int beam_plans = 8;               // bottlenecks of the units-respecting beam search
  int beam_width = 32;              // and its partial plans per layer (BeamAssignments)
};

std::unique_ptr<Scheduler> NewRlScheduler(RlOptions options = {});

}  // namespace heterps::sched::rl
