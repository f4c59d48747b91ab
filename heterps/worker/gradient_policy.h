// The consistency mode of a job as the object a replica asks at every decision about parameters
// and gradients (docs/runtime.md, "Consistency modes"):
//
//                         sync                                   async
//   pull dense params     once per step (the last step is        when a new step begins and no
//                         committed before the next starts)      micro-batch is in flight
//   a micro-batch's grads kept apart, by (step, order)           pushed as soon as its backward
//                                                                 is done
//   end of a step         summed in micro-batch order, sent as   nothing
//                         this replica's part (Accumulate); the
//                         coordinator commits
//
// With a DenseGroup (synchronous jobs whose stages hold their dense parameters), the dense part
// of a step's sums goes to the group's exchange instead of the servers, and the parameters are
// pulled only once, by the group's Load (the replica asks loaded()).
//
// So a synchronous step is applied once, whichever replica ran what and when, and bit for bit the
// same as the single-process run's.
//
// Thread safety: one thread at a time (a replica's compute thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "heterps/worker/dense_group.h"
#include "heterps/worker/job.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {

class GradientPolicy {
 public:
  virtual ~GradientPolicy() = default;

  // Whether to pull the dense parameters before a micro-batch of step `step` runs, the last pull
  // having been for `pulled_step`, with `in_flight` micro-batches between forward and backward.
  virtual bool PullBefore(int64_t step, int64_t pulled_step, int in_flight) const = 0;
  // Where the gradients of micro-batch `order` of step `step` go (cleared).
  virtual ParameterGrads* GradsFor(int64_t step, int64_t order) = 0;
  // After that micro-batch's backward.
  virtual absl::Status AfterBackward(Stage& stage, ParameterGrads* grads) = 0;
  // At the end of step `step` here: what the replica owes the parameter servers, as part `part`.
  virtual absl::Status EndStep(Stage& stage, int64_t step, int part) = 0;
};

// The policy of `mode` for a replica of `stage` (which, with `dense`, must outlive it). `dense`
// (synchronous only; null: the dense parameters through the servers) holds the stage's dense
// parameters; `cancelled` tells its exchange to give up waiting.
std::unique_ptr<GradientPolicy> MakeGradientPolicy(Consistency mode, const Stage& stage,
                                                   DenseGroup* dense = nullptr,
                                                   std::function<bool()> cancelled = nullptr);

}  // namespace heterps::worker
