// Measuring a model's layers on this host: what `heterps profile` writes, what `heterps train`
// plans with (docs/cost_model.md, "Profiles") and what train_bench reports.
//
//   ProfileOptions options;
//   options.type = "cpu-local";
//   HETERPS_ASSIGN_OR_RETURN(HostProfile p, ProfileHost(spec, 2048, options));
//   for (const auto& [layer, seconds] : p.medians) ...
//
// Thread safety: functions of their arguments; a BatchSource is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/profile.h"
#include "heterps/data/criteo.h"
#include "heterps/data/reader.h"
#include "heterps/ps/gpu/gpu_tier.h"
#include "heterps/worker/dense_group.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {

struct HostProfile {
  cost::Profile profile;                                // entries for the measured type
  std::vector<std::pair<std::string, double>> medians;  // seconds per batch, in layer order
  double total_seconds = 0;                             // their sum: one unit's step
};

// Fills `batch` with the next batch; false when there is none.
using BatchSource = std::function<absl::StatusOr<bool>(data::Batch* batch)>;

// Random batches of `size` samples shaped as `spec`'s data layout, for ever: ids log-uniform over
// 1..1e6 per slot (a heavy head, like real data), dense features log1p of a log-uniform 0..1e4; a
// multi-hot slot holds 0 .. 2k - 1 ids (uniform), k the ids_per_slot (rounded) of the first
// embedding layer that looks it up.
BatchSource RandomBatches(const config::ModelSpec& spec, int size, uint64_t seed);

// Batches of exactly `size` samples read from `files` in the spec's data layout, from the first
// line, starting over at the end (a batch that would be short is filled from the start: a short
// file profiles as long as needed, at the batch size asked); bad lines as `bad_lines` says. The
// reader's errors (a file that cannot be opened, a bad line under kStop), and FailedPrecondition
// naming the files when they hold no line at all.
BatchSource FileBatches(const config::ModelSpec& spec, const std::vector<std::string>& files,
                        int size, data::BadLinePolicy bad_lines);

// Where a profile's batches come from: a source of batches of a given size.
using BatchSources = std::function<BatchSource(int size)>;

struct ProfileOptions {
  int warmup = 2;              // batches run first, untimed (first touches of rows and pages)
  int repeats = 5;             // batches timed; the median counts
  std::string type;            // the resource type the profile entries are for
  std::string device = "cpu";  // where the dense layers run ("cpu", "twin:0", "cuda:0")
  // The embedding layers as a job with a GPU tier (--gpu-cache-gib) runs a one-stage plan on a
  // GPU `device` (docs/cost_model.md, "The GPU tier"): a ps::GpuTier of this many bytes on the
  // device, in front of the tables, feeds the stage there (Stage::UseDeviceTier); each batch's
  // keys are named to it first (Stage::Prefetch: its misses loaded) and, with `tier_lookahead`,
  // the next batch's right after (Stage::Anticipate), both timed as part of the embedding layers
  // (in proportion to their lookups), with the rows' updates on the device; the held dense
  // parameters' update is timed as part of the fc layers (by their parameters). The profile's
  // `tier` entry then says how many of a batch's lookups the tier loaded from the servers and how
  // many passed through to them (cost::TierEntry). 0, or a device that is not a GPU's: the rows
  // come through the client, no tier entry.
  int64_t gpu_tier_bytes = 0;
  bool tier_lookahead = true;
  // With the tier: the dense parameters and their optimizer held on the device (Stage::HoldDense),
  // as a synchronous job holds them whose GPU stage is one replica of one block a step; the
  // tier entry's dense_held says whether they were.
  bool hold_dense = false;
  // The tables' optimizers and seed, as the job has them (a row's bytes in the tier, and the
  // servers' and the device's updates, follow from them).
  ModelOptions tables;
  // Called before each batch with (done, total).
  std::function<void(int, int)> progress;
};

// The device path of a one-stage plan on a GPU as a job with a GPU tier runs it, for measuring it
// (ProfileLayers, rpc::ProfileNetwork): a ps::GpuTier of options.gpu_tier_bytes on `backend`'s
// device in front of `client` (whose tables CreateModelTables made with options.tables), the
// whole model's stage it feeds (Stage::UseDeviceTier, where the layers allow; else the stage
// looks its rows up through the tier) and, with options.hold_dense where the stage can, the dense
// parameters held on the device by a DenseGroup of one replica, loaded from `client`. `client`
// and `backend` (a GPU's) must outlive it. Errors: the tier's, the stage's and the load's.
struct TierStage {
  std::unique_ptr<ps::GpuTier> tier;
  std::unique_ptr<Stage> stage;
  std::unique_ptr<DenseGroup> dense;  // null: the servers hold the dense parameters
  static absl::StatusOr<TierStage> Create(const config::ModelSpec& spec,
                                          const ProfileOptions& options, ps::PsClient* client,
                                          dense::DenseBackend* backend);
};

// Batches read one ahead, as a replica reads the next step's share while a step runs.
struct BatchesAhead {
  data::Batch batch, ahead;  // step i's, and the next step's where has_ahead
  bool has_ahead = false;
  // Step i of `total` (i from 0, one call each in order): its batch in `batch` (the first read
  // here, the others the last call's `ahead`) and, before the last step, the next in `ahead`.
  // False when the source has no batch for step i; its errors.
  absl::StatusOr<bool> Advance(const BatchSource& next, int i, int total);
};

// Builds the model against in-process tables and trains it on the source's batches; per layer,
// the median forward + backward seconds of one batch (Model::ProfileStep, or the device path's
// step with a GPU tier), as profile entries for options.type (the batch size is the first
// batch's). FailedPrecondition when the source ends before a batch is timed; the tier's and the
// device's errors.
absl::StatusOr<HostProfile> ProfileLayers(const config::ModelSpec& spec, const BatchSource& next,
                                          const ProfileOptions& options);

// ProfileLayers on batches(batch), or on RandomBatches(batch, 1) when `batches` is null.
absl::StatusOr<HostProfile> ProfileHost(const config::ModelSpec& spec, int batch,
                                        const ProfileOptions& options,
                                        const BatchSources& batches = nullptr);

}  // namespace heterps::worker
