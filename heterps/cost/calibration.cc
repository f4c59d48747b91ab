#include "heterps/cost/calibration.h"

#include <algorithm>

namespace heterps::cost {

Profile Calibrate(const CostModel& model, const std::vector<MeasuredStage>& stages,
                  const std::string& host) {
  Profile profile;
  profile.model = model.model().name;
  profile.batch_size = static_cast<int64_t>(model.batch());
  profile.host = host;
  profile.wire = model.wire();  // the stages' DT below is the model's, with these figures
  for (const MeasuredStage& s : stages) {
    if (s.seconds_per_batch <= 0 || s.units < 1) continue;
    const double beta = model.type(s.type).dp_loss;
    const double one_unit = s.seconds_per_batch * static_cast<double>(s.units) /
                            (1.0 + beta * static_cast<double>(s.units - 1));
    const StageTime predicted = model.Stage(s.first, s.last, s.type);
    const double compute = std::max(one_unit - predicted.comm, 0.1 * one_unit);
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
