// Running the heterps binary from integration tests: a command and its outputs, a job killed in
// the middle, the job directory's files (tests only).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "heterps/base/subprocess.h"
#include "nlohmann/json.hpp"

namespace heterps::testing {

extern const std::string kBinary;  // build/tools/heterps

std::string Slurp(const std::string& path);
// A fresh directory under the test's temporary directory.
std::string Dir(const std::string& name);

struct Outcome {
  int exit_code = -1;
  std::string out, err;
};
// Runs heterps with `args` (stdout and stderr into `dir`), waiting at most `limit`.
Outcome Heterps(const std::vector<std::string>& args, const std::string& dir,
                absl::Duration limit = absl::Seconds(120));

// <job_dir>/metrics.json, parsed (discarded when missing).
nlohmann::json Metrics(const std::string& job_dir);

// Every process the job's launcher started has ended.
void ExpectNoneLeft(const std::string& job_dir);
// The same, allowing them `limit` to end (a zombie not yet reaped counts as ended).
void ExpectAllEndWithin(const std::string& job_dir, absl::Duration limit);

// A heterps command running in the background, its stdout and stderr in <dir>/out and <dir>/err.
class Background {
 public:
  // `prefix`: a command that runs heterps (`ip netns exec NS`: RegionNet::Exec).
  Background(const std::vector<std::string>& args, const std::string& dir,
             const std::vector<std::string>& prefix = {});
  // Polls `done` every 20 ms until it holds (true) or `limit` passes or the command ends (false).
  bool WaitFor(const std::function<bool()>& done, absl::Duration limit = absl::Seconds(60));
  // Its exit code (-1 if it is still running after `limit`).
  int Wait(absl::Duration limit = absl::Seconds(180));
  std::string err() const;
  void Signal(int signal);

 private:
  std::string dir_;
  std::unique_ptr<base::Subprocess> child_;
};

// Runs the job of `args` in `dir` and kills parameter-server shard `shard` (rank shard + 1) the
// moment it creates the temporary directory of its checkpoint of step `step` (inotify), so that
// the kill lands inside the save; then waits for the job to end (exit 0 expected, no process
// left). `tmp_left` says whether the save's temporary directory was there after the kill (the
// kill came before the save's rename). The job's metrics.
nlohmann::json KillInSave(const std::vector<std::string>& args, const std::string& dir, int shard,
                          int step, bool* tmp_left);

// A free port on loopback (closed again: the caller binds it).
int FreePort();

// The step of <job_dir>/checkpoint.json (-1 when there is none).
int CheckpointStep(const std::string& job_dir);

// Runs `args` (a train command whose --job-dir is `dir`) in the background, waits until the job
// has checkpointed step `steps`, kills rank `rank` with SIGKILL, waits for the job to end (it
// must end well) and returns its metrics.
nlohmann::json KillMidRun(const std::vector<std::string>& args, const std::string& dir, int rank,
                          int steps);
// The same with several kills in a row: (rank, step) each, in order, each once the job has
// checkpointed that step (which must grow from one kill to the next).
nlohmann::json KillMidRun(const std::vector<std::string>& args, const std::string& dir,
                          const std::vector<std::pair<int, int>>& kills);

}  // namespace heterps::testing
