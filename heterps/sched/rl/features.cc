#include "heterps/sched/rl/features.h"

#include <algorithm>
#include <cmath>

namespace heterps::sched::rl {
namespace {

constexpr int kKinds = 6;
constexpr int kLayerFeatures = kKinds + 5;

double Clip(double v) { return std::clamp(v, -3.0, 3.0); }

}  // namespace

int NumFeatures(int num_types) { return kLayerFeatures + 3 * num_types; }

PolicyInputs MakePolicyInputs(const cost::CostModel& model) {
  const int L = model.num_layers(), T = model.num_types();
  PolicyInputs in;
  in.features = Eigen::MatrixXd::Zero(NumFeatures(T), L);
  in.allowed = Eigen::MatrixXd::Zero(T, L);
  const double e_max = model.max_bottleneck_seconds();
  for (int l = 0; l < L; ++l) {
    const cost::LayerCost& c = model.layer(l);
    auto col = in.features.col(l);
    col(static_cast<int>(model.model().layers[l].kind)) = 1;
    col(kKinds) = L > 1 ? static_cast<double>(l) / (L - 1) : 0;
    col(kKinds + 1) = std::log10(1 + c.fwd_flops) / 10;
    col(kKinds + 2) = std::log10(1 + c.mem_bytes) / 10;
    col(kKinds + 3) = std::log10(1 + c.rows) / 3;
    col(kKinds + 4) = std::log10(1 + c.dense_params) / 10;
    bool any = false;
    for (int t = 0; t < T; ++t) {
      double x = model.StageSeconds(l, l, t);
      bool fits = std::isfinite(x);
      in.allowed(t, l) = fits ? 1 : 0;
      any = any || fits;
      if (!fits) x = model.Stage(l, l, t).total();
      col(kLayerFeatures + t) = Clip(std::log10(x / e_max) / 3);
      col(kLayerFeatures + T + t) = Clip(std::log10(model.type(t).price_per_hour * x / e_max) / 3);
      col(kLayerFeatures + 2 * T + t) =
          Clip(std::log10(x / (e_max * static_cast<double>(model.type(t).units))) / 2);
    }
    if (!any) in.allowed.col(l).setOnes();
  }
  return in;
}

}  // namespace heterps::sched::rl
