// A transport for tests that wire a job's pipeline replicas together in one process: what it
// carries (micro-batches, answers, the dense exchange's messages) is copied, as a wire would,
// and delivered by a direct call.
//
//   LocalDownstream down;                       // replica (0, r)'s view of stage 1
//   down.next = {stage1_replica.get()};
//   auto first = PipelineReplica::Create(job, 0, r, client, &down);
//   down.self = first->get();                   // where the answers go
//
// Thread safety: Send may be called from any thread once `next` and `self` are set.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "heterps/worker/dense_group.h"
#include "heterps/worker/pipeline_replica.h"

namespace heterps::worker::testing {

// Answers go back to the sender by a direct call, copied.
class LocalUpstream : public Upstream {
 public:
  LocalUpstream(PipelineReplica* sender, int target) : sender_(sender), target_(target) {}
  bool Send(const AnswerView& view) override {
    auto answer = std::make_shared<Answer>();
    answer->id = view.id;
    answer->loss_sum = view.loss_sum;
    answer->block_losses.assign(view.block_losses.begin(), view.block_losses.end());
    if (view.grads != nullptr) answer->grads = *view.grads;
    answer->probabilities.assign(view.probabilities.begin(), view.probabilities.end());
    answer->error = view.error;
    sender_->OnAnswer(target_, std::move(answer));
    return true;
  }

 private:
  PipelineReplica* sender_;
  int target_;
};

// Micro-batches go to the next stage's replicas by a direct call, copied. `broken`: every send
// fails as a lost stream would.
class LocalDownstream : public Downstream {
 public:
  int replicas() const override { return static_cast<int>(next.size()); }
  absl::Status Send(int target, const ForwardHeader& header,
                    const Activations& activations) override {
    if (broken) return absl::UnavailableError("stage 1 replica 0 (local): the stream broke");
    next[target]->Receive(header, std::make_unique<Activations>(activations),
                          std::make_shared<LocalUpstream>(self, target));
    return absl::OkStatus();
  }
  std::vector<PipelineReplica*> next;
  PipelineReplica* self = nullptr;
  bool broken = false;
};

// A stage's replicas reach each other (the dense exchange, worker/dense_group.h) by a direct
// call, copied.
class LocalPeers : public DensePeers {
 public:
  absl::Status Send(int target, const DenseMessage& message) override {
    stage[target]->OnDense(message);
    return absl::OkStatus();
  }
  std::vector<PipelineReplica*> stage;  // the stage's replicas, this one's included
};

}  // namespace heterps::worker::testing
