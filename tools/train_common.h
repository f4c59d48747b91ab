// What single-process and distributed training share on the command line: the data and the
// model's options.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "heterps/worker/region_exchange.h"
#include "heterps/worker/stage.h"
#include "nlohmann/json.hpp"
#include "tools/train_command.h"

namespace heterps::tools {

struct DataFile {
  std::vector<std::string> paths;  // the files, in order (globs expanded)
  double teacher_auc = -1;         // -1: unknown
};

// The data to train on: the given files (globs expanded: data::ExpandDataPaths), or synthetic rows
// in `spec`'s data layout (made once, then reused).
absl::StatusOr<DataFile> PrepareData(const TrainFlags& flags, const config::ModelSpec& spec);

// The tables' optimizers and seed, for mini-batches of `batch` samples: each setting from its
// flag where given, else from the spec's `optimizer` section, else the default (the embeddings'
// default learning rate grows with the batch); InvalidArgument naming a bad optimizer flag.
absl::StatusOr<worker::ModelOptions> ModelOptionsFrom(const TrainFlags& flags,
                                                      const config::ModelSpec& spec, int64_t batch);

// A run across regions as its summary and metrics show it.
struct RegionFigures {
  std::vector<std::string> names;  // every region, in order
  std::vector<double> shares;      // each region's share of the samples; empty: not known here
  std::string where;               // "emulated in this process", "this job: us-east"
  int64_t windows = 0, sync_steps = 0, steps = 0;
  double threshold = 0;
  double eager_threshold = 0;  // 0: no windows between the K-th steps'
  int delay = 0;
  std::string hub;  // empty: peer to peer
  std::vector<worker::RegionTraffic> traffic;
  // USD per byte of each link (from, to), where a cluster spec with the regions' links prices
  // them; empty: not priced here. `priced_by`: that spec's name.
  std::map<std::pair<int, int>, double> egress_per_byte;
  std::string priced_by;
};
// The summary's lines: the regions, the windows, and a table of what each link carried (and its
// egress, where priced).
std::string RegionsSummary(const RegionFigures& figures);
// The metrics' "regions" entry (files: each region's, where known here).
nlohmann::ordered_json RegionsJson(const RegionFigures& figures,
                                   const std::vector<std::vector<std::string>>& files);

}  // namespace heterps::tools
