// The consistency mode of a job as the object a replica asks at every decision about parameters
// and gradients (docs/runtime.md, "Consistency modes"):
//
//                         sync                                   async
//   pull dense params     once per step (the last step is        when a new step begins and no
//                         committed before the next starts)      micro-batch is in flight
//   a micro-batch's grads its blocks added to the step's block    pushed as soon as its backward
//                         tree (ps/block_tree.h) after its        is done
//                         backward
//   end of a step         the tree's nodes sent (Accumulate);    nothing
//                         the coordinator commits
//
// With a DenseGroup (synchronous jobs whose stages hold their dense parameters), the dense part
// of a step's nodes goes to the group's exchange instead of the servers, and the parameters are
// pulled only once, by the group's Load (the replica asks loaded()).
//
// So a synchronous step is applied once, whichever replica ran what and when, and bit for bit the
// same as the single-process run's at the same batch and block size.
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
  // Where the gradients of the micro-batch of step `step` whose first block is `first_block` go.
  virtual ParameterGrads* GradsFor(int64_t step, int64_t first_block) = 0;
  // After that micro-batch's backward.
  virtual absl::Status AfterBackward(Stage& stage, int64_t step, int64_t first_block,
                                     ParameterGrads* grads) = 0;
  // At the end of step `step` here: what the replica owes the parameter servers. `whole`: this
  // replica ran every micro-batch of the step (its stage has one replica).
  virtual absl::Status EndStep(Stage& stage, int64_t step, bool whole) = 0;
};

// The policy of `mode` for a replica of `stage` (which, with `dense`, must outlive it). `dense`
// (synchronous only; null: the dense parameters through the servers) holds the stage's dense
// parameters; `cancelled` tells its exchange to give up waiting.
std::unique_ptr<GradientPolicy> MakeGradientPolicy(Consistency mode, const Stage& stage,
                                                   DenseGroup* dense = nullptr,
                                                   std::function<bool()> cancelled = nullptr);

}  // namespace heterps::worker
