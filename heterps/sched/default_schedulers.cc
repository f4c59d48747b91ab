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
  return registry;
}

}  // namespace heterps::sched
