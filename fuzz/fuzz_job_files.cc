// The files a job directory holds and the job's own description, read back as a restart, `heterps
// status`, the metrics endpoint or a role would: status.json (launcher/job_status.h),
// checkpoint.json (launcher/job_checkpoint.h, through a real file), control.json and a cluster
// state (launcher/cluster_state.h), the job description a role receives (worker/job.h). Each
// must refuse what it cannot read with an error, never abort. Run from the repository root (the
// cluster state is read against examples/clusters/cloud.yaml).

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_target.h"
#include "heterps/base/env.h"
#include "heterps/base/file.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/launcher/cluster_state.h"
#include "heterps/launcher/job_checkpoint.h"
#include "heterps/launcher/job_status.h"
#include "heterps/worker/job.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* cluster = new absl::StatusOr<heterps::config::ClusterSpec>(
      heterps::config::LoadClusterSpec("examples/clusters/cloud.yaml"));
  if (!cluster->ok()) {
    std::fprintf(stderr, "fuzz_job_files: %s (run from the repository root)\n",
                 std::string(cluster->status().message()).c_str());
    std::exit(2);
  }
  static const std::string* dir = [] {
    auto* d = new std::string(heterps::fuzz::ScratchPath("job_files"));
    std::filesystem::create_directories(*d);
    return d;
  }();
  const absl::string_view text = heterps::fuzz::Text(data, size);
  (void)heterps::launcher::ParseJobStatus(text, "status.json");
  (void)heterps::launcher::ParseJobControl(text, "control.json");
  (void)heterps::launcher::ParseClusterState(text, "state.json", **cluster);
  (void)heterps::worker::ParseJob(text, "job.json");
  if (heterps::base::WriteFileAtomically(*dir + "/checkpoint.json", std::string(text)).ok()) {
    (void)heterps::launcher::ReadJobCheckpoint(heterps::base::DefaultEnv(), *dir);
  }
  return 0;
}
