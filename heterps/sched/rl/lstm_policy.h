// The scheduling policy: a one-layer LSTM that reads a model's layers in order and, at each
// layer, gives a probability for every resource type (DESIGN.md section 4, docs/rl_scheduler.md).
//
// Step l of an episode reads x_l = [layer features f_l ; one-hot of the type chosen at l - 1
// (or "none" at l = 0)]:
//
//   z_l = Wx f_l + Wa a_{l-1} + Wh h_{l-1} + b       (4H gates, in the order i, f, g, o)
//   c_l = sigma(z_f) * c_{l-1} + sigma(z_i) * tanh(z_g),   h_l = sigma(z_o) * tanh(c_l)
//   p_l = softmax(Wo h_l + bo + Ws a_{l-1}) over the types that can hold layer l (others get 0)
//
// The skip connection Ws from the previous choice starts as log(T) + 1 on its diagonal, so that an
// untrained policy keeps a type for several layers: good plans are a few long stages, and a
// uniform policy would start a new stage at almost every layer.
//
// Because f_l is the same for every episode, Wx f_l is computed once per layer and batch; an
// episode batch of N costs one (4H x H) x (H x N) product per layer forward and a few backward.
//
// All parameters live in one flat vector (params()), so that the optimizer and the file format
// see a single array. Thread safety: none; one policy per thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "Eigen/Dense"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "heterps/base/env.h"

namespace heterps::sched::rl {

struct PolicyShape {
  int features = 0;  // F: features per layer
  int types = 0;     // T: actions per step
  int hidden = 64;   // H: LSTM width
  bool operator==(const PolicyShape& o) const {
    return features == o.features && types == o.types && hidden == o.hidden;
  }
};

// What one forward pass over a batch of N episodes keeps for the backward pass.
struct Tape {
  int batch = 0;
  std::vector<std::vector<int>> actions;  // [l][n]: the type chosen at layer l in episode n
  std::vector<Eigen::MatrixXd> gates;     // [l]: 4H x N, after the nonlinearities (i, f, g, o)
  std::vector<Eigen::MatrixXd> cell;      // [l]: H x N, c_l
  std::vector<Eigen::MatrixXd> hidden;    // [l]: H x N, h_l
  std::vector<Eigen::MatrixXd> probs;     // [l]: T x N, p_l (0 where masked)
};

class LstmPolicy {
 public:
  // Weights drawn uniformly from +-1/sqrt(fan in) with a generator seeded by `seed`; forget-gate
  // biases start at 1; Ws as above.
  LstmPolicy(const PolicyShape& shape, uint64_t seed);

  const PolicyShape& shape() const { return shape_; }
  Eigen::VectorXd& params() { return theta_; }
  const Eigen::VectorXd& params() const { return theta_; }

  // Chooses the actions of one step: given p_l (T x N), writes actions[n] for each episode.
  using Chooser =
      std::function<void(int layer, const Eigen::MatrixXd& probs, std::vector<int>& actions)>;

  // Runs N episodes over the layers. `features` is F x L (column l describes layer l); `allowed`
  // is T x L (nonzero: type t may hold layer l; every column needs one). The chooser picks each
  // step's actions, which feed the next step.
  Tape Forward(const Eigen::MatrixXd& features, const Eigen::MatrixXd& allowed, int batch,
               const Chooser& choose) const;

  // Back-propagates through time. `dlogits[l]` is dLoss/d(logits at layer l), T x N (zero where
  // masked). Returns dLoss/dparams, the same layout as params().
  Eigen::VectorXd Backward(const Eigen::MatrixXd& features, const Tape& tape,
                           const std::vector<Eigen::MatrixXd>& dlogits) const;

  // A file of the shape, the parameters and a checksum, written atomically through `env`.
  absl::Status Save(const std::string& path, base::Env* env = base::DefaultEnv()) const;
  // Reads a file written by Save. InvalidArgument if it is not a policy file, truncated, corrupt
  // (checksum), or of another shape than `expected` (the message names both shapes).
  static absl::StatusOr<LstmPolicy> Load(const std::string& path, const PolicyShape& expected,
                                         base::Env* env = base::DefaultEnv());

 private:
  // Views into theta_.
  struct Views;
  Views views() const;
  static int64_t NumParams(const PolicyShape& shape);

  PolicyShape shape_;
  Eigen::VectorXd theta_;
};

// The policy-gradient surrogate of a batch whose episodes took the tape's actions:
//
//   loss = (1/N) sum_n sum_l [ -advantage_n log p_l(a_ln) - entropy_weight H(p_l(., n)) ]
//
// whose gradient is the REINFORCE estimate with an entropy bonus. Fills `dlogits` (T x N per
// layer) for LstmPolicy::Backward and returns the loss. `advantages` has one entry per episode.
double SurrogateLoss(const Tape& tape, const std::vector<double>& advantages, double entropy_weight,
                     std::vector<Eigen::MatrixXd>* dlogits);

// Mean entropy of the policy's per-layer distributions over the batch, in nats.
double MeanEntropy(const Tape& tape);

}  // namespace heterps::sched::rl
