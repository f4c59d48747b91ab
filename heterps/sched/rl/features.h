// What the policy sees of each layer, and which types may hold it.
//
// Per layer (column l): the kind as a one-hot (6), the position l / (L - 1), log10 of forward
// FLOPs, memory bytes, rows looked up and parameters (scaled to about [0, 1]), and for every type
// t the layer's one-unit time and cost relative to the bottleneck the limit allows,
// log10(X_lt / E_max) / 3 and log10(p_t X_lt / E_max) / 3, and the share of the type's units the
// layer alone needs, log10(X_lt / (E_max K_t)) / 2, each clipped to [-3, 3]. The scaling is
// fixed, not fitted to the instance, so that a policy trained on one workload reads a related
// one the same way (warm starts).
#pragma once

#include "Eigen/Dense"
#include "heterps/cost/cost_model.h"

namespace heterps::sched::rl {

struct PolicyInputs {
  Eigen::MatrixXd features;  // NumFeatures(T) x L
  Eigen::MatrixXd allowed;   // T x L: 1 where type t can hold layer l (all types if none can)
};

int NumFeatures(int num_types);

PolicyInputs MakePolicyInputs(const cost::CostModel& model);

}  // namespace heterps::sched::rl
