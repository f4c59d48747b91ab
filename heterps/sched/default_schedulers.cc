#include "heterps/sched/default_schedulers.h"

#include "heterps/sched/rl/rl_scheduler.h"
#include "heterps/sched/schedulers.h"

namespace heterps::sched {

SchedulerRegistry DefaultSchedulers() {
  SchedulerRegistry registry;
  registry.Register("brute", "every plan; the oracle for small instances", NewBruteScheduler);
  registry.Register("exact", "the certified optimum under the cost model", NewExactScheduler);
  registry.Register("greedy", "per layer, the type with the lowest time x price",
                    NewGreedyScheduler);
  registry.Register("manual",
                    "sparse layers on the cheapest CPU per lookup, dense on the GPU with the best "
                    "price per FLOP",
                    NewManualScheduler);
  registry.Register("homogeneous", "everything on one type, the cheapest type kept",
                    NewHomogeneousScheduler);
  registry.Register("genetic", "a genetic algorithm over assignments; 2000 plans by default",
                    NewGeneticScheduler);
  registry.Register("bo",
                    "Bayesian optimisation with a Gaussian process and expected improvement; 300 "
                    "plans by default",
                    NewBayesOptScheduler);
  registry.Register("random", "uniformly random assignments, the best kept; 2000 plans by default",
                    NewRandomScheduler);
  registry.Register("rl", "an LSTM policy trained with policy gradient (REINFORCE) on the instance",
                    [] { return rl::NewRlScheduler(); });
  registry.Register("auto",
                    "rl for a third of the time limit, then exact from rl's plan: the better of "
                    "the two, with a proven gap",
                    [] { return NewAutoScheduler(rl::NewRlScheduler()); });
  return registry;
}

}  // namespace heterps::sched
