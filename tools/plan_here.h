// The plan `heterps train` runs when the user gives none: this host profiled (its layers and its
// network, docs/cost_model.md "Profiles"; or a profile the user gives), then the chosen scheduler
// on the cluster, at the flags' throughput or, by default, at 1.5x what one unit does by the model
// (the layers measured and, with a network profile, the network: the plan may then use several
// units), then 1x, then 0.5x.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/profile.h"
#include "heterps/launcher/planning.h"
#include "heterps/sched/run_plan.h"
#include "heterps/worker/rpc/network_profile.h"
#include "tools/cli_common.h"
#include "tools/train_command.h"

namespace heterps::tools {

struct Planned {
  sched::RunPlan plan;
  std::string why_not;                   // when no plan is feasible
  std::optional<cost::Profile> profile;  // what the plan was made with
  // Where the throughput limit came from when no --throughput gave it (one line for the user),
  // else empty.
  std::string limit_origin;
};

// This host's network (worker::rpc::ProfileNetwork at `batch`) measured with as many replicas as
// `cpu` has units here (at most this host's hardware threads): the default job's layout, every unit
// a replica sharing the cores with the server. Adds one entry for each of `types`, fitted with its
// data-parallel loss, to `profile`, replacing any it had; the progress line shows the
// measurement.
struct NetworkMeasured {
  int replicas = 1;
  std::vector<worker::rpc::NetworkPoint> points;
  std::vector<worker::rpc::NetworkFit> fits;  // one per type
};
// `layer_seconds`: the layers' time at `batch` on `cpu` as the profile's entries have it.
// `options`: where the batches come from, the job's mode and optimizers (the rest is set here).
absl::StatusOr<NetworkMeasured> AddNetworkProfile(
    const config::ModelSpec& spec, int batch, double layer_seconds, const config::ResourceType& cpu,
    const std::vector<const config::ResourceType*>& types,
    worker::rpc::NetworkProfileOptions options, ProgressLine& progress, cost::Profile* profile);

// The network of each of `types` whose layers `profile` measured with a GPU tier (a tier entry)
// in a synchronous job: worker::rpc::ProfileNetwork of the one replica on the device path
// (`tier(type)`: the type's profile options), fitted with the type's data-parallel loss, in
// place of the type's network entry; the other types keep theirs. `options` as for
// AddNetworkProfile.
absl::Status AddTierNetworkProfiles(
    const config::ModelSpec& spec, int batch, const std::vector<const config::ResourceType*>& types,
    const std::function<worker::ProfileOptions(const config::ResourceType&)>& tier,
    worker::rpc::NetworkProfileOptions options, ProgressLine& progress, cost::Profile* profile);

// The GPU tier's budget the flags ask for (--gpu-cache-gib), bytes; 0 without a tier.
int64_t GpuCacheBytes(const TrainFlags& flags);

// How a local type's layers are profiled for the flags' job: with a GPU tier (--gpu-cache-gib) on
// the type's own device where the job's is (no --gpu-cache-device, or that device), the tier's
// device path (worker::ProfileOptions::gpu_tier_bytes), the look-ahead as the flags have it, and
// the dense parameters held on the device where the job would hold them (synchronous, dense on
// the replicas, one block a step). Type, progress and repeats are the caller's.
worker::ProfileOptions TierProfileOptions(const TrainFlags& flags, const config::ModelSpec& spec,
                                          const std::string& device);
// Whether the flags' job holds its dense parameters with its GPU tier where one stage is the
// whole model (launcher::JobRules::tier_holds_dense): a tier, dense parameters on the replicas of
// a synchronous job, one block a step (no block size named: the plan's, one block for one GPU
// stage).
bool TierHoldsDense(const TrainFlags& flags, const config::ModelSpec& spec);

// OK unless a tier entry of `profile` (the flags' --profile) records a GPU tier of another size
// than the job's --gpu-cache-gib: InvalidArgument naming the file, the entry and both sizes.
absl::Status CheckTierEntries(const cost::Profile& profile, const TrainFlags& flags);

// Adds one type's profile (its entries, network and tier) to `into`, which takes its header where
// it has no entries yet.
void MergeProfile(const cost::Profile& one, cost::Profile* into);

// Batches from the job's data files in the spec's layout, bad lines as the flags say; null (random
// batches) when `files` is empty.
worker::BatchSources DataBatches(const config::ModelSpec& spec,
                                 const std::vector<std::string>& files,
                                 data::BadLinePolicy bad_lines);

// InvalidArgument naming the cluster when no type has a local device to profile. `policy_out`:
// where a learned scheduler saves its policy (empty: nowhere), for the job's re-plans. The
// profile runs on the first lines of `data_files` (the job's data; empty: random batches).
// Without --throughput, plans for 1.5, 1 and 0.5 times one unit's speed are tried in turn, and
// the first feasible one is taken; with a GPU tier (--gpu-cache-gib), whose stage 0 runs on one
// replica (launcher::JobRules: every plan keeps it), a quarter is tried too. A block size in the
// flags (named, or a resumed job's) gives stage 0 at most as many replicas as a step has blocks.
absl::StatusOr<Planned> PlanHere(const TrainFlags& flags, const config::ModelSpec& spec,
                                 const config::ClusterSpec& cluster, int64_t samples,
                                 const std::string& policy_out = "",
                                 const std::vector<std::string>& data_files = {});

// The flags' rules for every plan of the job, set in `rules`, for the plan made here and the
// job's re-plans alike: the data residency (--data-region, --activations-may-cross, and --data
// as the data's name in messages), and whether its dense weights go through the servers
// (--mode async, --dense-on-servers).
void SetPlanRules(const TrainFlags& flags, launcher::JobRules* rules);

}  // namespace heterps::tools
