#include "heterps/worker/gradient_policy.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "heterps/base/log.h"
#include "heterps/base/status_macros.h"

namespace heterps::worker {
namespace {

class SyncPolicy : public GradientPolicy {
 public:
  SyncPolicy(const Stage& stage, DenseGroup* dense, std::function<bool()> cancelled)
      : stage_(stage),
        dense_(dense),
        cancelled_(std::move(cancelled)),
        total_(stage.NewStepGrads()) {}

  bool PullBefore(int64_t step, int64_t pulled_step, int) const override {
    return step != pulled_step;
  }

  ParameterGrads* GradsFor(int64_t, int64_t) override {
    if (scratch_.dense.empty() && scratch_.sparse.empty()) scratch_ = stage_.NewGrads();
    return &scratch_;
  }

  // Adds the micro-batch's blocks to the step's tree at once: whatever order the micro-batches
  // finish in, the tree's nodes are the same.
  absl::Status AfterBackward(Stage&, int64_t step, int64_t first_block,
                             ParameterGrads* grads) override {
    if (step != step_) {
      // Synchronous steps never overlap; leftovers are of a step a failure cut short.
      if (!total_.nodes.empty()) {
        base::LogLine(absl::StrCat("dropped the gradients of step ", step_, " at step ", step));
      }
      total_.Clear();
      step_ = step;
    }
    total_.Add(first_block, *grads);
    return absl::OkStatus();
  }

  absl::Status EndStep(Stage& stage, int64_t step, bool whole) override {
    if (step != step_) {
      // No micro-batch of this step came here: nothing to send, but the stage's dense exchange
      // still needs this replica.
      total_.Clear();
      step_ = step;
    }
    if (whole) total_.MergeAll();
    absl::Status status;
    if (dense_ == nullptr) {
      status = stage.Accumulate(total_);
    } else {
      // The rows travel to the servers while the replicas exchange their dense sums.
      status = stage.Accumulate(total_, /*dense=*/false, [&] {
        // Held on the stage's device, the parameters are updated there.
        if (dense_->held()) return dense_->StepHeld(stage);
        return stage.UpdateDense([&](std::vector<AlignedFloats>& values) {
          return dense_->Step(step, total_, values, cancelled_);
        });
      });
    }
    total_.Clear();
    return status;
  }

 private:
  const Stage& stage_;
  DenseGroup* const dense_;
  const std::function<bool()> cancelled_;
  ParameterGrads scratch_;
  int64_t step_ = -1;  // of total_
  StepGrads total_;
};

class AsyncPolicy : public GradientPolicy {
 public:
  explicit AsyncPolicy(const Stage& stage) : scratch_(stage.NewGrads()) {}

  bool PullBefore(int64_t step, int64_t pulled_step, int in_flight) const override {
    return step != pulled_step && in_flight == 0;
  }
  ParameterGrads* GradsFor(int64_t, int64_t) override {
    scratch_.Clear();
    return &scratch_;
  }
  absl::Status AfterBackward(Stage& stage, int64_t, int64_t, ParameterGrads* grads) override {
    return stage.Push(*grads);
  }
  absl::Status EndStep(Stage&, int64_t, bool) override { return absl::OkStatus(); }

 private:
  ParameterGrads scratch_;
};

}  // namespace

std::unique_ptr<GradientPolicy> MakeGradientPolicy(Consistency mode, const Stage& stage,
                                                   DenseGroup* dense,
                                                   std::function<bool()> cancelled) {
  if (mode == Consistency::kSync) {
    return std::make_unique<SyncPolicy>(stage, dense, std::move(cancelled));
  }
  return std::make_unique<AsyncPolicy>(stage);
}

}  // namespace heterps::worker
