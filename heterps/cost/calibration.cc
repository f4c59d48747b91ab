#include "heterps/cost/calibration.h"

#include <algorithm>
#include <map>

namespace heterps::cost {
namespace {

// One unit's time per batch of a stage measured at `s`: the inverse of ET.
double OneUnit(const CostModel& model, const MeasuredStage& s) {
  const double beta = model.type(s.type).dp_loss;
  return s.seconds_per_batch * static_cast<double>(s.units) /
         (1.0 + beta * static_cast<double>(s.units - 1));
}

bool Measured(const MeasuredStage& s) { return s.seconds_per_batch > 0 && s.units >= 1; }

}  // namespace

Profile Calibrate(const CostModel& model, const std::vector<MeasuredStage>& stages,
                  const std::string& host) {
  Profile profile;
  profile.model = model.model().name;
  profile.batch_size = static_cast<int64_t>(model.batch());
  profile.host = host;
  profile.network = model.network();  // the stages' DT below is the model's, with these figures
  profile.tier = model.tier();        // and these tiers
  // The types whose network the run shows cheaper than the model's: a stage whose DT alone is over
  // nine tenths of its measured time. Its layers keep their time (between a tenth and a half of
  // the measured), and DT takes the rest.
  std::map<int, double> network_factor;  // type -> factor on its DT (the smallest of its stages')
  for (const MeasuredStage& s : stages) {
    if (!Measured(s)) continue;
    const double one_unit = OneUnit(model, s);
    const StageTime predicted = model.Stage(s.first, s.last, s.type);
    if (predicted.comm <= 0.9 * one_unit) continue;
    const double compute = std::clamp(predicted.compute, 0.1 * one_unit, 0.5 * one_unit);
    const double factor = (one_unit - compute) / predicted.comm;
    auto [it, fresh] = network_factor.try_emplace(s.type, factor);
    if (!fresh) it->second = std::min(it->second, factor);
  }
  for (const auto& [t, factor] : network_factor) {
    const config::ResourceType& type = model.type(t);
    auto entry = std::find_if(profile.network.begin(), profile.network.end(),
                              [&](const NetworkEntry& w) { return w.type == type.name; });
    if (entry == profile.network.end()) {
      entry =
          profile.network.insert(profile.network.end(), {type.name, type.network, type.latency});
    }
    entry->bytes_per_second /= factor;
    entry->seconds_per_message *= factor;
  }
  for (const MeasuredStage& s : stages) {
    if (!Measured(s)) continue;
    const double one_unit = OneUnit(model, s);
    const StageTime predicted = model.Stage(s.first, s.last, s.type);
    const auto factor = network_factor.find(s.type);
    const double comm = predicted.comm * (factor == network_factor.end() ? 1.0 : factor->second);
    const double compute = std::max(one_unit - comm, 0.1 * one_unit);
    const double scale = predicted.compute > 0 ? compute / predicted.compute : 0;
    for (int l = s.first; l <= s.last; ++l) {
      const double seconds = model.LayerSeconds(l, s.type) * scale;
      if (seconds > 0) {
        profile.entries.push_back({model.model().layers[l].name, model.type(s.type).name, seconds});
      }
    }
  }
  return profile;
}

}  // namespace heterps::cost
