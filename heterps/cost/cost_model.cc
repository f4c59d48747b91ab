#include "absl/strings/string_view.h"
#include "heterps/cost/cost_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "heterps/base/status_macros.h"

namespace heterps::cost {
namespace {

constexpr double kKeyBytes = 8;

// The analytic OCT(l, t) of DESIGN.md section 3.
double AnalyticSeconds(const LayerCost& c, const config::ResourceType& t, double batch) {
  return t.overhead * c.ops +
         batch * (3 * c.fwd_flops / t.flops + c.mem_bytes / t.mem_bandwidth +
                  2 * c.rows / t.lookup_rate);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

absl::StatusOr<CostModel> CostModel::Create(const config::ModelSpec& model,
                                            const config::ClusterSpec& cluster,
                                            const Workload& workload, const Profile* profile) {
  if (!(workload.throughput_limit > 0) || !std::isfinite(workload.throughput_limit)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "throughput limit must be a positive number of samples/s, got ",
        workload.throughput_limit));
  }
  if (!(workload.samples > 0) || !std::isfinite(workload.samples)) {
    return absl::InvalidArgumentError(
        absl::StrCat("samples must be a positive number, got ", workload.samples));
  }
  CostModel cm;
  cm.model_ = model;
  cm.cluster_ = cluster;
  cm.workload_ = workload;
  cm.batch_ = static_cast<double>(model.batch_size);
  cm.layers_ = DeriveLayerCosts(model, cm.batch_);
  const int num_layers = cm.num_layers();
  std::vector<std::vector<double>> oct(cm.num_types(), std::vector<double>(num_layers));
  for (int t = 0; t < cm.num_types(); ++t) {
    for (int l = 0; l < num_layers; ++l) {
      oct[t][l] = AnalyticSeconds(cm.layers_[l], cluster.types[t], cm.batch_);
    }
  }
  cm.profiled_.assign(cm.num_types(), std::vector<bool>(num_layers, false));
  if (profile != nullptr) HETERPS_RETURN_IF_ERROR(cm.ApplyProfile(*profile));
  cm.BuildPrefixSums(oct);
  return cm;
}

absl::Status CostModel::ApplyProfile(const Profile& profile) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("profile: ", what));
  };
  if (profile.model != model_.name) {
    return bad(absl::StrCat("taken on model '", profile.model, "', not '", model_.name, "'"));
  }
  if (profile.batch_size != model_.batch_size) {
    return bad(absl::StrCat("taken with batch size ", profile.batch_size, ", but the model's is ",
                            model_.batch_size));
  }
  measured_.assign(cluster_.types.size(), std::vector<double>(layers_.size(), 0.0));
  for (size_t i = 0; i < profile.entries.size(); ++i) {
    const ProfileEntry& e = profile.entries[i];
    int l = model_.FindLayer(e.layer);
    int t = cluster_.FindType(e.type);
    std::string where = absl::StrCat("entries[", i, "]");
    if (l < 0) return bad(absl::StrCat(where, ".layer: no layer '", e.layer, "' in the model"));
    if (t < 0) return bad(absl::StrCat(where, ".type: no type '", e.type, "' in the cluster"));
    if (profiled_[t][l]) {
      return bad(absl::StrCat(where, ": a second measurement of ", e.layer, " on ", e.type));
    }
    profiled_[t][l] = true;
    measured_[t][l] = e.seconds_per_batch;
  }
  return absl::OkStatus();
}

void CostModel::BuildPrefixSums(const std::vector<std::vector<double>>& analytic) {
  const int num_layers = this->num_layers();
  oct_.assign(num_types(), std::vector<double>(num_layers + 1, 0.0));
  for (int t = 0; t < num_types(); ++t) {
    // Calibrate the type's unmeasured layers by the median measured/analytic ratio.
    std::vector<double> ratios;
    for (int l = 0; l < num_layers; ++l) {
      if (profiled_[t][l]) ratios.push_back(measured_[t][l] / analytic[t][l]);
    }
    double scale = ratios.empty() ? 1.0 : Median(ratios);
    for (int l = 0; l < num_layers; ++l) {
      double seconds = profiled_[t][l] ? measured_[t][l] : analytic[t][l] * scale;
      oct_[t][l + 1] = oct_[t][l] + seconds;
    }
  }
  sparse_bytes_.assign(num_layers + 1, 0.0);
  dense_bytes_.assign(num_layers + 1, 0.0);
  memory_bytes_.assign(num_layers + 1, 0.0);
  for (int l = 0; l < num_layers; ++l) {
    const LayerCost& c = layers_[l];
    sparse_bytes_[l + 1] =
        sparse_bytes_[l] + batch_ * c.rows * (2 * c.row_bytes + 2 * kKeyBytes);
    dense_bytes_[l + 1] = dense_bytes_[l] + 8 * c.dense_params;
    memory_bytes_[l + 1] = memory_bytes_[l] + 8 * c.dense_params + 2 * batch_ * c.act_out_bytes +
                           2 * batch_ * c.rows * c.row_bytes;
  }
}

StageTime CostModel::Stage(int first, int last, int t) const {
  StageTime time;
  time.compute = oct_[t][last + 1] - oct_[t][first];
  // Activations in and their gradients out at the front boundary; the reverse at the back. Each
  // exchange is two messages per batch; so are the row pull and push, and the weight pull and
  // gradient push.
  double bytes = 0, messages = 0;
  if (first > 0) {
    bytes += 2 * batch_ * layers_[first].act_in_bytes;
    messages += 2;
  }
  if (last + 1 < num_layers()) {
    bytes += 2 * batch_ * layers_[last].act_out_bytes;
    messages += 2;
  }
  double sparse = sparse_bytes_[last + 1] - sparse_bytes_[first];
  double dense = dense_bytes_[last + 1] - dense_bytes_[first];
  messages += (sparse > 0 ? 2 : 0) + (dense > 0 ? 2 : 0);
  const config::ResourceType& type = cluster_.types[t];
  time.comm = (bytes + sparse + dense) / type.network + messages * type.latency;
  return time;
}

double CostModel::StageMemoryBytes(int first, int last) const {
  return memory_bytes_[last + 1] - memory_bytes_[first] +
         2 * batch_ * layers_[first].act_in_bytes;
}

double CostModel::StageSeconds(int first, int last, int t) const {
  if (StageMemoryBytes(first, last) > cluster_.types[t].memory) return kInfinity;
  return Stage(first, last, t).total();
}

int64_t CostModel::MinUnits(double x, int t, double e) const {
  const config::ResourceType& type = cluster_.types[t];
  const double beta = type.dp_loss;
  if (!std::isfinite(x) || ExecSeconds(x, beta, type.units) > e) return 0;
  // ET(k) <= e  <=>  k >= x (1 - beta) / (e - x beta); start there and correct rounding.
  double guess = e > x * beta ? std::ceil(x * (1 - beta) / (e - x * beta)) : type.units;
  int64_t k = static_cast<int64_t>(std::clamp(guess, 1.0, static_cast<double>(type.units)));
  while (k > 1 && ExecSeconds(x, beta, k - 1) <= e) --k;
  while (ExecSeconds(x, beta, k) > e) ++k;  // terminates: ET(units) <= e
  return k;
}

}  // namespace heterps::cost
