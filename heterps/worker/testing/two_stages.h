// The job the pipeline's and the coordinator's tests drive: dlrm-small at batch 256 on `data`, cut
// after its embeddings, stage 0 on 2 replicas and stage 1 on 1, blocks and micro-batches of 32
// samples, 2 parameter servers unless `settings` names another number.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "heterps/base/file.h"
#include "heterps/base/status_macros.h"
#include "heterps/config/model_spec.h"
#include "heterps/worker/job.h"

namespace heterps::worker::testing {

// `settings` gives the rest (mode, held-out share, checkpoints); the layout's fields are set here.
inline absl::StatusOr<JobSpec> TwoStages(const std::string& data, JobSettings settings) {
  HETERPS_ASSIGN_OR_RETURN(const std::string text,
                           base::ReadTextFile("examples/models/dlrm-small.yaml"));
  HETERPS_ASSIGN_OR_RETURN(const config::ModelSpec spec,
                           config::ParseModelSpec(text, "dlrm-small.yaml"));
  const int emb = spec.FindLayer("emb"), last = static_cast<int>(spec.layers.size()) - 1;
  sched::RunPlan plan;
  plan.stages = {{0, emb, "a", "cpu", 2}, {emb + 1, last, "b", "cpu", 1}};
  settings.block_size = 32;
  settings.micro_batch = 32;
  if (settings.ps_shards == 0) settings.ps_shards = 2;
  return MakeJob({text, "dlrm-small.yaml", 256}, plan, config::ClusterSpec(), {data}, settings);
}

}  // namespace heterps::worker::testing
