// The job description: what a distributed training job is, built once from the plan and the
// user's settings (MakeJob), written to <job_dir>/job.json and sent whole to every process of
// the job, which reads it and nothing else (docs/runtime.md).
//
//   JobSettings settings;                 // flags bind straight into these fields
//   settings.mode = Consistency::kAsync;
//   HETERPS_ASSIGN_OR_RETURN(JobSpec job, MakeJob({model_text, "dlrm.yaml", 512}, plan, cluster,
//                                                 {"train.tsv"}, settings));
//   const std::string wire = JobToJson(job);           // what the coordinator sends
//   HETERPS_ASSIGN_OR_RETURN(JobSpec same, ParseJob(wire, "job.json"));
//
// A stage is described once, by the plan's sched::RunStage: its layers first..last, its type,
// the local device that runs it and its replicas (units). Every setting is resolved when the job
// is made (the micro-batch size, the parameter-server shards), so that no role derives one twice.
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/data/reader.h"
#include "heterps/sched/run_plan.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {

// How the replicas' gradients meet the parameters (worker/gradient_policy.h).
enum class Consistency {
  kSync,   // every mini-batch's updates applied, once, before the next mini-batch starts
  kAsync,  // every micro-batch's gradients pushed as they come (parameter-server style)
};
absl::string_view ConsistencyName(Consistency mode);
// "sync" or "async"; InvalidArgument naming them otherwise.
absl::StatusOr<Consistency> ParseConsistency(absl::string_view name);

inline constexpr int kMaxReaderThreads = data::kMaxParserThreads;  // JobSettings::reader_threads

// What the user decides about a job, before and apart from the plan.
struct JobSettings {
  Consistency mode = Consistency::kSync;
  // Samples per block (ps/block_tree.h): a step's gradients are formed block by block and the
  // blocks combined in a fixed tree, so that a synchronous run does not depend on its layout. A
  // stage-0 replica reads consecutive whole blocks of every step (ShareBlocks).
  int64_t block_size = kDefaultBlockSize;
  // Samples per micro-batch, a multiple of block_size; 0: one micro-batch per stage-0 replica and
  // step when the plan has one stage, else two per stage (enough for every stage of the pipeline
  // to have work), rounded up to whole blocks.
  int64_t micro_batch = 0;
  int ps_shards = 0;           // parameter-server processes; 0: cost::SizeParameterServers
  int epochs = 1;              // passes over the training lines
  double eval_fraction = 0.1;  // share of the lines held out (data::EvalEvery); 0: none
  data::BadLinePolicy bad_lines = data::BadLinePolicy::kStop;
  // Threads parsing text in each replica's data reader (data::ReaderOptions::parser_threads):
  // the same batches whatever it is, so not part of the job's identity.
  int reader_threads = 1;
  ModelOptions tables;             // optimizers, seed, the tables' memory budget
  int64_t checkpoint_every = 100;  // steps between checkpoints; 0: none
  // Steps between evaluations of the held-out lines while the job trains (the replicas meet
  // there, as at a checkpoint); 0: once, at the end. The end's evaluation is always made.
  int64_t eval_interval = 0;
  int max_restarts = 3;  // restarts from the last checkpoint after a failure
  // The GPU tier of stage 0's embedding tables (ps/gpu/gpu_tier.h): the device that holds the hot
  // rows ("cuda:0", "twin:0"; empty: none) and its budget, bytes. Needs one replica of stage 0.
  std::string gpu_tier_device;
  int64_t gpu_tier_bytes = 0;
  // The tier fetches the rows the next step will miss while a step runs (GpuTier::Anticipate):
  // the same run either way, so not part of the job's identity; off for comparison.
  bool tier_lookahead = true;
  // GPU stages' GEMMs in TensorFloat-32: faster, less precise; off unless asked for (the host
  // twin computes in FP32 whatever this says).
  bool gpu_tf32 = false;
  // Synchronous jobs: every stage's dense parameters go through the parameter servers (each
  // step's pull, the gradients' sum in the commit) rather than being held by the stage's replicas,
  // which exchange the step's gradient sums among themselves (worker/dense_group.h). The values
  // are the same to the bit either way; kept for comparison.
  bool dense_on_servers = false;

  // Whether the stages' replicas hold their dense parameters: a synchronous job, unless
  // dense_on_servers (the rule the replicas, the coordinator's write-back and the overlap of the
  // later stages' flush with the commit all follow).
  bool dense_on_replicas() const { return mode == Consistency::kSync && !dense_on_servers; }
};

// The blocks [first, end) of a step of `batch` samples, cut in blocks of `block_size`, that
// replica r of k reads: consecutive, as even as whole blocks allow, in replica order. The step's
// lines [first * block_size, min(end * block_size, batch)) are the replica's; a short last step of
// a pass keeps the same cut (a replica may then get fewer samples, or none).
std::pair<int64_t, int64_t> ShareBlocks(int64_t batch, int64_t block_size, int r, int k);
// The blocks of a step of `batch` samples: ceil(batch / block_size).
int64_t StepBlocks(int64_t batch, int64_t block_size);
// Replica r's lines of such a step, [begin, end) (ShareBlocks in samples).
std::pair<int64_t, int64_t> ShareLines(int64_t batch, int64_t block_size, int r, int k);

// The share of step j of a pass (its lines [j * batch, hi)) of stage-0 replica r of k: where it
// starts in the replica's own lines of the pass (JobSpec::Reader), and how many.
std::pair<int64_t, int64_t> StepShare(int64_t j, int64_t batch, int64_t hi, int64_t block_size,
                                      int r, int k);

// The block size of a job whose user names none (--block-size), chosen once from the plan the
// job starts with and kept for the job's life: its re-plans and restarts keep it, so that its
// sums stay the same (a checkpoint's job identity names it).
//
// kDefaultBlockSize where every stage runs on CPUs. Where a stage runs on a GPU (its type's kind
// is gpu, or its device is "cuda:N" or "twin:N"), that stage runs its dense chains once per
// block, and each run costs a GPU a millisecond or so of copies and waits (docs/benchmarks.md,
// the sixth GPU run: blocks of 64 made dlrm-small 2.8x slower than one block a step): blocks as
// large as stage 0's default micro-batch, ceil(batch / (R P)) for the step's `batch` samples, R
// replicas of stage 0 and P micro-batches per replica (1 for one stage, 2 per stage in a
// pipeline), so that the replicas' shares are as even as the samples allow; never below
// kDefaultBlockSize. With a `micro_batch` the user named (> 0), the largest divisor of it that
// is not above that, so that a micro-batch holds whole blocks (kDefaultBlockSize where that
// divisor is smaller). Two plans may so choose two block
// sizes: runs to compare bit for bit across plans name one.
int64_t PlanBlockSize(const sched::RunPlan& plan, const config::ClusterSpec& cluster, int64_t batch,
                      int64_t micro_batch = 0);

struct JobSpec {
  std::string model_yaml;    // the model spec's text, with the job's batch size in it
  std::string model_source;  // where it came from, for messages
  config::ModelSpec model;   // model_yaml parsed (not part of the wire form: every role parses)
  sched::RunPlan plan;       // the stages: layers, type, device, replicas; the predictions
  std::vector<std::string> files;  // the training data
  JobSettings settings;            // resolved: micro_batch >= 1, ps_shards >= 1

  int64_t batch_size() const { return model.batch_size; }
  int stages() const { return static_cast<int>(plan.stages.size()); }
  int replicas(int stage) const { return static_cast<int>(plan.stages[stage].units); }
  // The blocks [first, end) of every step that stage-0 replica `replica` reads (ShareBlocks).
  std::pair<int64_t, int64_t> ShareBlocks(int replica) const;
  // Line n of the data is held out when n % eval_every == eval_every - 1; 0: no held-out lines.
  int64_t eval_every() const { return data::EvalEvery(settings.eval_fraction); }
  // How stage-0 replica `replica` reads `part` of the data, `batch` samples at a time.
  data::ReaderOptions Reader(int replica, data::ReaderOptions::Part part) const;
};

// The model spec's text and where it came from; `batch_size` > 0 replaces the spec's.
struct ModelText {
  std::string yaml;
  std::string source;
  int64_t batch_size = 0;
};

// Builds the job: parses the model (with the batch size applied to its text), checks the plan
// against it (every layer once, in order, in stages of consecutive layers; its batch size) and
// the settings (ranges), and resolves the defaults. `cluster` sizes the parameter servers when
// settings.ps_shards is 0. InvalidArgument naming the file and the field, or the setting.
absl::StatusOr<JobSpec> MakeJob(const ModelText& model, const sched::RunPlan& plan,
                                const config::ClusterSpec& cluster, std::vector<std::string> files,
                                const JobSettings& settings);

// The wire form (JSON, docs/runtime.md), and back. ParseJob checks every field (a wrong type, a
// missing field, a value out of range: InvalidArgument naming `source` and the field) and parses
// the model again.
std::string JobToJson(const JobSpec& job);

// What a job resumed from a checkpoint must share with the job that wrote it, as "name=value"
// lines: the model (its spec text, by a hash), the batch size, the data files, the passes, the
// held-out share, the bad-line policy, the optimizers, the seed, the consistency mode, the block
// size and the region the data is kept in (the plan's data_region: a resume under another rule, or
// none, could take the data out of it). The plan, the shards and the checkpoint policy may differ
// (a resume lays the job out anew).
std::vector<std::string> JobIdentity(const JobSpec& job);
absl::StatusOr<JobSpec> ParseJob(absl::string_view json_text, absl::string_view source);

}  // namespace heterps::worker
