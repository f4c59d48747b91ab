#include "heterps/worker/gradient_policy.h"

#include <map>
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
      : stage_(stage), dense_(dense), cancelled_(std::move(cancelled)) {}

  bool PullBefore(int64_t step, int64_t pulled_step, int) const override {
    return step != pulled_step;
  }

  ParameterGrads* GradsFor(int64_t step, int64_t order) override {
    auto [it, fresh] = finished_.try_emplace({step, order});
    if (fresh) {
      if (!pool_.empty()) {
        it->second = std::move(pool_.back());
        pool_.pop_back();
      } else {
        it->second = stage_.NewGrads();
      }
    }
    it->second.Clear();
    return &it->second;
  }

  absl::Status AfterBackward(Stage&, ParameterGrads*) override { return absl::OkStatus(); }

  // Sums the step's micro-batches in order (the map's order), so that the sum does not depend on
  // when each finished; the dense sums in double (StepGrads), so that it does not depend on which
  // replica ran which micro-batch either.
  absl::Status EndStep(Stage& stage, int64_t step, int part) override {
    if (total_.dense.empty() && total_.sparse.empty()) total_ = stage.NewStepGrads();
    total_.Clear();
    for (auto it = finished_.begin(); it != finished_.end();) {
      if (it->first.first == step) {
        total_.Add(it->second);
      } else {
        // Synchronous steps never overlap; leftovers are of a step a failure cut short.
        base::LogLine(absl::StrCat("dropped the gradients of micro-batch ", it->first.second,
                                   " of step ", it->first.first, " at the end of step ", step));
      }
      pool_.push_back(std::move(it->second));
      it = finished_.erase(it);
    }
    if (dense_ == nullptr) return stage.Accumulate(total_, part);
    // The rows travel to the servers while the replicas exchange their dense sums.
    return stage.Accumulate(total_, part, /*dense=*/false, [&] {
      return stage.UpdateDense([&](std::vector<AlignedFloats>& values) {
        return dense_->Step(step, total_.dense, values, cancelled_);
      });
    });
  }

 private:
  const Stage& stage_;
  DenseGroup* const dense_;
  const std::function<bool()> cancelled_;
  std::map<std::pair<int64_t, int64_t>, ParameterGrads> finished_;  // (step, order)
  std::vector<ParameterGrads> pool_;
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
  absl::Status AfterBackward(Stage& stage, ParameterGrads* grads) override {
    return stage.Push(*grads);
  }
  absl::Status EndStep(Stage&, int64_t, int) override { return absl::OkStatus(); }

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
