#include "heterps/launcher/job_checkpoint.h"

#include "absl/strings/str_cat.h"
#include "heterps/base/json.h"
#include "heterps/base/status_macros.h"
#include "heterps/base/token.h"
#include "heterps/cost/cost_model.h"
#include "heterps/ps/checkpoint.h"
#include "nlohmann/json.hpp"

namespace heterps::launcher {
namespace {

constexpr char kCheckpointFile[] = "/checkpoint.json";
constexpr char kFormat[] = "heterps-job-checkpoint-v1";

}  // namespace

absl::StatusOr<std::string> NewJobId() {
  HETERPS_ASSIGN_OR_RETURN(std::string token, base::NewToken());
  return token.substr(0, 16);
}

absl::Status JobFileError(const absl::Status& status) {
  if (status.ok()) return status;
  return absl::FailedPreconditionError(status.message());
}

absl::Status WriteJobCheckpoint(base::Env* env, const std::string& job_dir,
                                const JobCheckpoint& checkpoint) {
  const nlohmann::ordered_json root = {{"format", kFormat},
                                       {"step", checkpoint.step},
                                       {"ps_shards", checkpoint.ps_shards},
                                       {"job_id", checkpoint.job_id},
                                       {"identity", checkpoint.identity},
                                       {"losses", checkpoint.losses}};
  return base::WriteFileAtomically(env, job_dir + kCheckpointFile, root.dump(1) + "\n");
}

absl::StatusOr<std::optional<JobCheckpoint>> ReadJobCheckpoint(base::Env* env,
                                                               const std::string& job_dir) {
  const std::string path = job_dir + kCheckpointFile;
  if (!env->FileExists(path)) return std::nullopt;
  HETERPS_ASSIGN_OR_RETURN(std::string text, base::ReadFile(env, path, 256 << 20));
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject root, base::JsonObject::Parse(text, path));
  HETERPS_ASSIGN_OR_RETURN(std::string format, root.String("format"));
  if (format != kFormat) {
    return root.Error("format", absl::StrCat("'", format, "', expected '", kFormat, "'"));
  }
  JobCheckpoint c;
  HETERPS_ASSIGN_OR_RETURN(c.step, root.Int("step", 0));
  HETERPS_ASSIGN_OR_RETURN(c.losses, root.Doubles("losses"));
  HETERPS_ASSIGN_OR_RETURN(c.ps_shards, root.IntOr("ps_shards", 0));
  if (c.ps_shards < 0 || c.ps_shards > cost::kMaxPsShards) {
    return root.Error("ps_shards",
                      absl::StrCat(c.ps_shards, " is out of range [0, ", cost::kMaxPsShards, "]"));
  }
  HETERPS_ASSIGN_OR_RETURN(c.job_id, root.StringOr("job_id", ""));
  if (root.Has("identity")) {
    HETERPS_ASSIGN_OR_RETURN(c.identity, root.Strings("identity"));
  }
  if (!c.job_id.empty()) {
    if (absl::Status s = ps::CheckJobId(c.job_id); !s.ok())
      return root.Error("job_id", s.message());
  }
  if (static_cast<int64_t>(c.losses.size()) < c.step) {
    return root.Error("losses", absl::StrCat(c.losses.size(), " losses for ", c.step, " steps"));
  }
  c.losses.resize(c.step);
  return c;
}

absl::Status RemoveJobCheckpoint(base::Env* env, const std::string& job_dir) {
  const std::string path = job_dir + kCheckpointFile;
  if (!env->FileExists(path)) return absl::OkStatus();
  return env->RemoveFile(path);
}

}  // namespace heterps::launcher
