// Calibrating the cost model from a run: the measured time of each stage, turned into a profile
// that makes the model predict it (docs/cost_model.md, "Calibration").
//
//   Profile calibrated = Calibrate(model, {{first, last, type, units, measured_seconds}, ...});
//   ... cost::ProfileToJson(calibrated), and plan again with it ...
//
// For a stage on type t with k units, measured at M seconds per batch (its busiest replica's
// time for its share of a step), one unit's time per batch is X = M k / (1 + beta_t (k - 1)) (the
// inverse of ET), of which the model's communication time DT stays analytic; the layers' compute
// times are scaled by one factor so that they add up to X - DT. Layers the model gives no time
// get none. The model's network entries (its measured network figures) carry over, so that planning
// with the calibrated profile computes the same DT; except where DT alone is over 0.9 X, which
// says the run paid less for its network than the model charges (a GPU tier serves most rows from
// the device, say): there the layers keep their time, held between X / 10 and X / 2, DT takes
// the rest, and the type's network entry (added if the model had none) is scaled to give that DT
// (by the smallest such factor among the type's stages). The entry is the type's: it lowers the
// DT of the type's other stages too (their layers then take what it frees) and the model's
// parameter servers on that type.
//
// Thread safety: pure function.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "heterps/cost/cost_model.h"
#include "heterps/cost/profile.h"

namespace heterps::cost {

struct MeasuredStage {
  int first = 0, last = 0;  // spec layers
  int type = 0;             // index in the model's cluster
  int64_t units = 1;
  double seconds_per_batch = 0;  // measured; <= 0: not measured, left out
};

Profile Calibrate(const CostModel& model, const std::vector<MeasuredStage>& stages,
                  const std::string& host);

}  // namespace heterps::cost
