// The reinforcement-learning scheduler (`rl`): an LSTM policy (lstm_policy.h) trained with
// REINFORCE on this instance, returning the best feasible plan it has seen.
//
// Each update samples `batch` plans, provisions each exactly (cost::Provision through MakePlan),
// and rewards it with -log(C / C_ref) when feasible (C_ref: the cheapest homogeneous or greedy
// plan, or the first feasible plan sampled) and -(infeasible_penalty + log(1 + shortfall))
// when not. The gradient is the REINFORCE estimate with an exponential-moving-average baseline,
// advantages scaled by the batch's spread, an entropy bonus that decays, clipping of its global
// norm, and Adam. Training stops at the budget of distinct evaluated plans, at the time limit, or
// when the policy has converged (low entropy and no better plan for `patience` updates). A local
// search around the best plan (retyping a whole stage, moving a stage boundary by one layer)
// then spends what is left of the budget. docs/rl_scheduler.md explains the choices.
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
  double entropy_start = 0.05;      // weight of the entropy bonus at the first update
  double entropy_decay = 0.97;      // multiplied into that weight after every update
  double baseline_decay = 0.9;      // exponential moving average of the batch mean reward
  double clip_norm = 1.0;           // gradients with a larger L2 norm are scaled down to it
  double infeasible_penalty = 3.0;  // reward offset of an infeasible plan (log-cost units)
  int64_t default_budget = 3000;    // distinct evaluated plans when max_plans is 0
  int patience = 40;                // updates without a better plan before a converged policy stops
  double polish_share = 0.25;       // share of the budget kept for the local search
};

std::unique_ptr<Scheduler> NewRlScheduler(RlOptions options = {});

}  // namespace heterps::sched::rl
