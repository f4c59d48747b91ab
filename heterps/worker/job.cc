#include "heterps/worker/job.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "heterps/base/fnv.h"
#include "heterps/base/json.h"
#include "heterps/base/status_macros.h"
#include "heterps/cost/cost_model.h"
#include "heterps/cost/ps_sizing.h"
#include "heterps/ps/block_tree.h"
#include "nlohmann/json.hpp"

namespace heterps::worker {
namespace {

using json = nlohmann::ordered_json;

constexpr char kFormat[] = "heterps-job-v1";

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("job: ", what));
}

// The plan must cover the model's layers once, in order, in stages of whole replicas.
absl::Status CheckPlan(const sched::RunPlan& plan, const config::ModelSpec& model) {
  if (plan.stages.empty()) return Bad("the plan has no stages");
  int next = 0;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const sched::RunStage& stage = plan.stages[s];
    if (stage.first != next || stage.last < stage.first ||
        stage.last >= static_cast<int>(model.layers.size())) {
      return Bad(absl::StrCat("stage ", s, " covers layers ", stage.first, "..", stage.last,
                              " where the model (", model.source, ") goes on at layer ", next,
                              " of 0..", model.layers.size() - 1));
    }
    if (stage.units < 1) return Bad(absl::StrCat("stage ", s, " has ", stage.units, " units"));
    next = stage.last + 1;
  }
  if (next != static_cast<int>(model.layers.size())) {
    return Bad(absl::StrCat("the plan ends at layer ", next - 1, "; the model (", model.source,
                            ") has ", model.layers.size()));
  }
  if (plan.batch_size != 0 && plan.batch_size != model.batch_size) {
    return Bad(absl::StrCat("the plan is for batches of ", plan.batch_size, ", the model's are ",
                            model.batch_size));
  }
  return absl::OkStatus();
}

absl::Status CheckSettings(const JobSettings& s) {
  if (s.micro_batch < 0) return Bad(absl::StrCat("micro-batch ", s.micro_batch, " < 0"));
  if (s.block_size < 1) return Bad(absl::StrCat("block size ", s.block_size, " < 1"));
  if (s.micro_batch > (int64_t{1} << 30) || s.block_size > (int64_t{1} << 30)) {
    return Bad(absl::StrCat("micro-batch ", s.micro_batch, " or block size ", s.block_size,
                            " above 2^30 samples"));
  }
  if (s.mode == Consistency::kSync && s.micro_batch % s.block_size != 0) {
    return Bad(absl::StrCat("micro-batch ", s.micro_batch, " is not a multiple of the block size ",
                            s.block_size,
                            " (a micro-batch holds whole blocks; --block-size names another)"));
  }
  if (s.ps_shards < 0 || s.ps_shards > cost::kMaxPsShards) {
    return Bad(absl::StrCat("parameter servers ", s.ps_shards, " outside 0..", cost::kMaxPsShards));
  }
  if (s.epochs < 1) return Bad(absl::StrCat("epochs ", s.epochs, " < 1"));
  if (!(s.eval_fraction >= 0 && s.eval_fraction <= 0.5)) {
    return Bad(absl::StrCat("eval fraction ", s.eval_fraction, " outside [0, 0.5]"));
  }
  if (s.checkpoint_every < 0) return Bad("checkpoint interval < 0");
  if (s.eval_interval < 0) return Bad("evaluation interval < 0");
  if (s.max_restarts < 0) return Bad("max restarts < 0");
  if (s.reader_threads < 1 || s.reader_threads > kMaxReaderThreads) {
    return Bad(
        absl::StrCat("reader threads ", s.reader_threads, " outside 1..", kMaxReaderThreads));
  }
  if (!s.gpu_tier_device.empty() && s.gpu_tier_bytes <= 0) {
    return Bad(absl::StrCat("the GPU tier on ", s.gpu_tier_device, " has no memory budget"));
  }
  return absl::OkStatus();
}

// The GPU tier owns the rows it holds: one writer, the one replica of the stage with the tables.
absl::Status CheckTier(const JobSpec& job) {
  if (job.settings.gpu_tier_device.empty()) return absl::OkStatus();
  bool embeddings = false;
  const sched::RunStage& first = job.plan.stages[0];
  for (int l = first.first; l <= first.last; ++l) {
    embeddings |= job.model.layers[l].kind == config::LayerKind::kEmbedding;
  }
  if (!embeddings) {
    return Bad("the GPU tier holds stage 0's embedding tables, and stage 0 has none");
  }
  if (first.units != 1) {
    return Bad(
        absl::StrCat("the GPU tier needs stage 0 on one replica (it owns the rows it "
                     "holds); the plan gives it ",
                     first.units));
  }
  return absl::OkStatus();
}

json OptimizerToJson(const ps::OptimizerOptions& o) {
  return {{"kind", std::string(ps::OptimizerName(o.kind))},
          {"learning_rate", o.learning_rate},
          {"initial_accumulator", o.initial_accumulator},
          {"beta1", o.beta1},
          {"beta2", o.beta2},
          {"epsilon", o.epsilon}};
}

absl::StatusOr<ps::OptimizerOptions> OptimizerFromJson(const base::JsonObject& o) {
  ps::OptimizerOptions out;
  HETERPS_ASSIGN_OR_RETURN(std::string kind, o.String("kind"));
  absl::StatusOr<ps::OptimizerKind> parsed = ps::ParseOptimizerKind(kind);
  if (!parsed.ok()) return o.Error("kind", parsed.status().message());
  out.kind = *parsed;
  HETERPS_ASSIGN_OR_RETURN(double lr, o.Double("learning_rate"));
  HETERPS_ASSIGN_OR_RETURN(double acc, o.Double("initial_accumulator"));
  HETERPS_ASSIGN_OR_RETURN(double b1, o.Double("beta1"));
  HETERPS_ASSIGN_OR_RETURN(double b2, o.Double("beta2"));
  HETERPS_ASSIGN_OR_RETURN(double eps, o.Double("epsilon"));
  out.learning_rate = static_cast<float>(lr);
  out.initial_accumulator = static_cast<float>(acc);
  out.beta1 = static_cast<float>(b1);
  out.beta2 = static_cast<float>(b2);
  out.epsilon = static_cast<float>(eps);
  return out;
}

json StageToJson(const sched::RunStage& s) {
  return {{"first", s.first},
          {"last", s.last},
          {"type", s.type},
          {"device", s.device},
          {"units", s.units},
          {"seconds_per_batch", s.seconds_per_batch},
          {"compute_seconds", s.compute_seconds},
          {"comm_seconds", s.comm_seconds}};
}

absl::StatusOr<sched::RunStage> StageFromJson(const base::JsonObject& o) {
  sched::RunStage s;
  HETERPS_ASSIGN_OR_RETURN(int64_t first, o.Int("first", 0, INT32_MAX));
  HETERPS_ASSIGN_OR_RETURN(int64_t last, o.Int("last", 0, INT32_MAX));
  s.first = static_cast<int>(first);
  s.last = static_cast<int>(last);
  HETERPS_ASSIGN_OR_RETURN(s.type, o.String("type"));
  HETERPS_ASSIGN_OR_RETURN(s.device, o.String("device"));
  HETERPS_ASSIGN_OR_RETURN(s.units, o.Int("units", 1, 1 << 20));
  HETERPS_ASSIGN_OR_RETURN(s.seconds_per_batch, o.Double("seconds_per_batch"));
  HETERPS_ASSIGN_OR_RETURN(s.compute_seconds, o.Double("compute_seconds"));
  HETERPS_ASSIGN_OR_RETURN(s.comm_seconds, o.Double("comm_seconds"));
  return s;
}

absl::StatusOr<sched::RunPlan> PlanFromJson(const base::JsonObject& o) {
  sched::RunPlan plan;
  HETERPS_ASSIGN_OR_RETURN(plan.model, o.String("model"));
  HETERPS_ASSIGN_OR_RETURN(plan.cluster, o.String("cluster"));
  HETERPS_ASSIGN_OR_RETURN(plan.scheduler, o.String("scheduler"));
  HETERPS_ASSIGN_OR_RETURN(plan.batch_size, o.Int("batch_size", 0));
  HETERPS_ASSIGN_OR_RETURN(plan.throughput, o.Double("throughput"));
  HETERPS_ASSIGN_OR_RETURN(plan.throughput_limit, o.Double("throughput_limit"));
  HETERPS_ASSIGN_OR_RETURN(plan.cost_per_hour_usd, o.Double("cost_per_hour_usd"));
  HETERPS_ASSIGN_OR_RETURN(plan.cost_usd, o.Double("cost_usd"));
  HETERPS_ASSIGN_OR_RETURN(plan.feasible, o.Bool("feasible"));
  if (o.Has("data_region")) {
    HETERPS_ASSIGN_OR_RETURN(plan.data_region, o.String("data_region"));
  }
  if (o.Has("activations_may_cross")) {
    HETERPS_ASSIGN_OR_RETURN(plan.activations_may_cross, o.Bool("activations_may_cross"));
  }
  HETERPS_ASSIGN_OR_RETURN(std::vector<base::JsonObject> stages, o.Objects("stages"));
  for (const base::JsonObject& stage : stages) {
    HETERPS_ASSIGN_OR_RETURN(sched::RunStage s, StageFromJson(stage));
    plan.stages.push_back(std::move(s));
  }
  return plan;
}

}  // namespace

absl::string_view ConsistencyName(Consistency mode) {
  return mode == Consistency::kSync ? "sync" : "async";
}

absl::StatusOr<Consistency> ParseConsistency(absl::string_view name) {
  if (name == "sync") return Consistency::kSync;
  if (name == "async") return Consistency::kAsync;
  return absl::InvalidArgumentError(
      absl::StrCat("consistency mode '", name, "': expected sync or async"));
}

int64_t StepBlocks(int64_t batch, int64_t block_size) {
  return (batch + block_size - 1) / block_size;
}

std::pair<int64_t, int64_t> ShareBlocks(int64_t batch, int64_t block_size, int r, int k) {
  const int64_t blocks = StepBlocks(batch, block_size);
  return {blocks * r / k, blocks * (r + 1) / k};
}

std::pair<int64_t, int64_t> ShareLines(int64_t batch, int64_t block_size, int r, int k) {
  const auto [first, end] = ShareBlocks(batch, block_size, r, k);
  return {std::min(first * block_size, batch), std::min(end * block_size, batch)};
}

std::pair<int64_t, int64_t> StepShare(int64_t j, int64_t batch, int64_t hi, int64_t block_size,
                                      int r, int k) {
  const auto [begin, stop] = ShareLines(batch, block_size, r, k);
  const int64_t lo = j * batch;
  return {j * (stop - begin), std::max<int64_t>(0, std::min(lo + stop, hi) - (lo + begin))};
}

int64_t PlanBlockSize(const sched::RunPlan& plan, const config::ClusterSpec& cluster, int64_t batch,
                      int64_t micro_batch) {
  bool gpu = false;
  for (const sched::RunStage& stage : plan.stages) {
    const int t = cluster.FindType(stage.type);
    gpu |= (t >= 0 && cluster.types[t].kind == config::DeviceKind::kGpu) ||
           absl::StartsWith(stage.device, "cuda:") || absl::StartsWith(stage.device, "twin:");
  }
  if (!gpu || plan.stages.empty() || batch <= 0) return kDefaultBlockSize;
  const int64_t replicas = std::max<int64_t>(1, plan.stages.front().units);
  const int64_t parts = plan.stages.size() == 1 ? 1 : 2 * static_cast<int64_t>(plan.stages.size());
  int64_t block = std::max(kDefaultBlockSize, (batch + replicas * parts - 1) / (replicas * parts));
  if (micro_batch <= 0) return block;
  block = std::min(block, micro_batch);
  while (micro_batch % block != 0) --block;
  // A micro-batch whose divisors are all small (2 x 1031) keeps the CPU's blocks (MakeJob then
  // asks for a multiple of them) rather than blocks of 2.
  return block >= kDefaultBlockSize ? block : kDefaultBlockSize;
}

std::pair<int64_t, int64_t> JobSpec::ShareBlocks(int replica) const {
  return worker::ShareBlocks(batch_size(), settings.block_size, replica, replicas(0));
}

data::ReaderOptions JobSpec::Reader(int replica, data::ReaderOptions::Part part) const {
  data::ReaderOptions read;
  read.files = files;
  read.schema = model.data;
  read.rank = replica;
  read.world = replicas(0);
  if (part == data::ReaderOptions::Part::kTrain) {
    // Consecutive whole blocks of every step.
    read.cycle = batch_size();
    std::tie(read.cycle_begin, read.cycle_end) =
        ShareLines(batch_size(), settings.block_size, replica, replicas(0));
  }
  read.batch_size = static_cast<int>(settings.micro_batch);
  read.bad_lines = settings.bad_lines;
  read.parser_threads = settings.reader_threads;
  read.eval_every = eval_every();
  read.part = part;
  return read;
}

absl::StatusOr<JobSpec> MakeJob(const ModelText& model, const sched::RunPlan& plan,
                                const config::ClusterSpec& cluster, std::vector<std::string> files,
                                const JobSettings& settings) {
  HETERPS_RETURN_IF_ERROR(CheckSettings(settings));
  if (files.empty()) return Bad("no data files");
  JobSpec job;
  job.model_source = model.source;
  job.model_yaml = model.yaml;
  if (model.batch_size > 0) {
    HETERPS_ASSIGN_OR_RETURN(job.model_yaml,
                             config::WithBatchSize(model.yaml, model.source, model.batch_size));
  }
  HETERPS_ASSIGN_OR_RETURN(job.model, config::ParseModelSpec(job.model_yaml, job.model_source));
  job.plan = plan;
  job.plan.batch_size = job.model.batch_size;
  HETERPS_RETURN_IF_ERROR(CheckPlan(plan, job.model));
  job.files = std::move(files);
  job.settings = settings;
  HETERPS_RETURN_IF_ERROR(CheckTier(job));
  JobSettings& s = job.settings;
  const int64_t blocks = StepBlocks(job.model.batch_size, s.block_size);
  if (s.micro_batch == 0) {
    const int64_t share = (blocks + job.replicas(0) - 1) / job.replicas(0);
    const int64_t parts = job.stages() == 1 ? 1 : 2 * job.stages();
    s.micro_batch = s.block_size * std::max<int64_t>(1, (share + parts - 1) / parts);
  }
  if (blocks > ps::kMaxStepBlocks) {
    return Bad(absl::StrCat("a batch of ", job.model.batch_size, " samples makes more than ",
                            ps::kMaxStepBlocks, " blocks of ", s.block_size));
  }
  if (blocks < job.replicas(0)) {
    return Bad(absl::StrCat("a batch of ", job.model.batch_size, " samples makes ", blocks,
                            " block", blocks == 1 ? "" : "s", " of ", s.block_size, " for ",
                            job.replicas(0),
                            " replicas of the first stage, which each read whole blocks: lower "
                            "the block size (--block-size) or raise the batch"));
  }
  if (s.ps_shards == 0) {
    // The type that runs the first embedding layer holds the tables' traffic.
    const config::ResourceType* type = nullptr;
    for (size_t l = 0; l < job.model.layers.size() && type == nullptr; ++l) {
      if (job.model.layers[l].kind != config::LayerKind::kEmbedding) continue;
      for (const sched::RunStage& stage : plan.stages) {
        const int t = cluster.FindType(stage.type);
        if (static_cast<int>(l) >= stage.first && static_cast<int>(l) <= stage.last && t >= 0) {
          type = &cluster.types[t];
        }
      }
    }
    s.ps_shards = cost::SizeParameterServers(
        job.model, type, {ps::StateFloats(s.tables.sparse_optimizer.kind), plan.throughput});
  }
  return job;
}

std::vector<std::string> JobIdentity(const JobSpec& job) {
  const uint64_t hash = base::Fnv1a64(job.model_yaml.data(), job.model_yaml.size());
  const JobSettings& s = job.settings;
  return {
      absl::StrCat("model=", job.model.name, " (spec ", absl::Hex(hash, absl::kZeroPad16), ")"),
      absl::StrCat("batch_size=", job.batch_size()),
      absl::StrCat("data=", absl::StrJoin(job.files, ", ")),
      absl::StrCat("epochs=", s.epochs),
      absl::StrCat("eval_fraction=", s.eval_fraction),
      absl::StrCat("skip_bad_lines=", s.bad_lines == data::BadLinePolicy::kSkip),
      absl::StrCat("sparse_optimizer=", OptimizerToJson(s.tables.sparse_optimizer).dump()),
      absl::StrCat("dense_optimizer=", OptimizerToJson(s.tables.dense_optimizer).dump()),
      absl::StrCat("seed=", s.tables.seed),
      absl::StrCat("mode=", ConsistencyName(s.mode)),
      absl::StrCat("block_size=", s.block_size),
      absl::StrCat("data_region=", job.plan.data_region.empty() ? "(none)" : job.plan.data_region),
      absl::StrCat("activations_may_cross=", job.plan.activations_may_cross)};
}

std::string JobToJson(const JobSpec& job) {
  const JobSettings& s = job.settings;
  json stages = json::array();
  for (const sched::RunStage& stage : job.plan.stages) stages.push_back(StageToJson(stage));
  const sched::RunPlan& p = job.plan;
  json root = {{"format", kFormat},
               {"model_source", job.model_source},
               {"model_yaml", job.model_yaml},
               {"plan",
                {{"model", p.model},
                 {"cluster", p.cluster},
                 {"scheduler", p.scheduler},
                 {"batch_size", p.batch_size},
                 {"throughput", p.throughput},
                 {"throughput_limit", p.throughput_limit},
                 {"cost_per_hour_usd", p.cost_per_hour_usd},
                 {"cost_usd", p.cost_usd},
                 {"feasible", p.feasible},
                 {"data_region", p.data_region},
                 {"activations_may_cross", p.activations_may_cross},
                 {"stages", stages}}},
               {"files", job.files},
               {"settings",
                {{"mode", std::string(ConsistencyName(s.mode))},
                 {"block_size", s.block_size},
                 {"micro_batch", s.micro_batch},
                 {"ps_shards", s.ps_shards},
                 {"epochs", s.epochs},
                 {"eval_fraction", s.eval_fraction},
                 {"skip_bad_lines", s.bad_lines == data::BadLinePolicy::kSkip},
                 {"reader_threads", s.reader_threads},
                 {"sparse_optimizer", OptimizerToJson(s.tables.sparse_optimizer)},
                 {"dense_optimizer", OptimizerToJson(s.tables.dense_optimizer)},
                 {"seed", s.tables.seed},
                 {"sparse_memory_budget_bytes", s.tables.sparse_memory_budget_bytes},
                 {"checkpoint_every", s.checkpoint_every},
                 {"eval_interval", s.eval_interval},
                 {"max_restarts", s.max_restarts},
                 {"gpu_tier_device", s.gpu_tier_device},
                 {"gpu_tier_bytes", s.gpu_tier_bytes},
                 {"tier_lookahead", s.tier_lookahead},
                 {"gpu_tf32", s.gpu_tf32},
                 {"dense_on_servers", s.dense_on_servers}}}};
  return root.dump(1) + "\n";
}

absl::StatusOr<JobSpec> ParseJob(absl::string_view json_text, absl::string_view source) {
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject root, base::JsonObject::Parse(json_text, source));
  HETERPS_ASSIGN_OR_RETURN(std::string format, root.String("format"));
  if (format != kFormat) {
    return root.Error("format", absl::StrCat("'", format, "', expected '", kFormat, "'"));
  }
  JobSpec job;
  HETERPS_ASSIGN_OR_RETURN(job.model_source, root.String("model_source"));
  HETERPS_ASSIGN_OR_RETURN(job.model_yaml, root.String("model_yaml"));
  HETERPS_ASSIGN_OR_RETURN(job.model, config::ParseModelSpec(job.model_yaml, job.model_source));
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject plan, root.Object("plan"));
  HETERPS_ASSIGN_OR_RETURN(job.plan, PlanFromJson(plan));
  HETERPS_ASSIGN_OR_RETURN(job.files, root.Strings("files"));
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject s, root.Object("settings"));
  JobSettings& out = job.settings;
  HETERPS_ASSIGN_OR_RETURN(std::string mode, s.String("mode"));
  absl::StatusOr<Consistency> consistency = ParseConsistency(mode);
  if (!consistency.ok()) return s.Error("mode", consistency.status().message());
  out.mode = *consistency;
  HETERPS_ASSIGN_OR_RETURN(out.block_size, s.Int("block_size", 1));
  HETERPS_ASSIGN_OR_RETURN(out.micro_batch, s.Int("micro_batch", 1));
  HETERPS_ASSIGN_OR_RETURN(int64_t shards, s.Int("ps_shards", 1, cost::kMaxPsShards));
  out.ps_shards = static_cast<int>(shards);
  HETERPS_ASSIGN_OR_RETURN(int64_t epochs, s.Int("epochs", 1, INT32_MAX));
  out.epochs = static_cast<int>(epochs);
  HETERPS_ASSIGN_OR_RETURN(out.eval_fraction, s.Double("eval_fraction"));
  HETERPS_ASSIGN_OR_RETURN(bool skip, s.Bool("skip_bad_lines"));
  out.bad_lines = skip ? data::BadLinePolicy::kSkip : data::BadLinePolicy::kStop;
  HETERPS_ASSIGN_OR_RETURN(const int64_t reader_threads, s.IntOr("reader_threads", 1));
  if (reader_threads < 1 || reader_threads > kMaxReaderThreads) {
    return s.Error("reader_threads",
                   absl::StrCat(reader_threads, " outside 1..", kMaxReaderThreads));
  }
  out.reader_threads = static_cast<int>(reader_threads);
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject sparse, s.Object("sparse_optimizer"));
  HETERPS_ASSIGN_OR_RETURN(out.tables.sparse_optimizer, OptimizerFromJson(sparse));
  HETERPS_ASSIGN_OR_RETURN(base::JsonObject dense, s.Object("dense_optimizer"));
  HETERPS_ASSIGN_OR_RETURN(out.tables.dense_optimizer, OptimizerFromJson(dense));
  HETERPS_ASSIGN_OR_RETURN(out.tables.seed, s.Uint("seed"));
  HETERPS_ASSIGN_OR_RETURN(out.tables.sparse_memory_budget_bytes,
                           s.Int("sparse_memory_budget_bytes", 0));
  HETERPS_ASSIGN_OR_RETURN(out.checkpoint_every, s.Int("checkpoint_every", 0));
  HETERPS_ASSIGN_OR_RETURN(out.eval_interval, s.Int("eval_interval", 0));
  HETERPS_ASSIGN_OR_RETURN(int64_t restarts, s.Int("max_restarts", 0, 1000));
  out.max_restarts = static_cast<int>(restarts);
  HETERPS_ASSIGN_OR_RETURN(out.gpu_tier_device, s.String("gpu_tier_device"));
  HETERPS_ASSIGN_OR_RETURN(out.gpu_tier_bytes, s.Int("gpu_tier_bytes", 0));
  HETERPS_ASSIGN_OR_RETURN(out.tier_lookahead, s.BoolOr("tier_lookahead", true));
  HETERPS_ASSIGN_OR_RETURN(out.gpu_tf32, s.Bool("gpu_tf32"));
  HETERPS_ASSIGN_OR_RETURN(out.dense_on_servers, s.Bool("dense_on_servers"));
  HETERPS_RETURN_IF_ERROR(CheckSettings(out));
  if (job.files.empty()) return root.Error("files", "no data files");
  absl::Status plan_ok = CheckPlan(job.plan, job.model);
  if (!plan_ok.ok()) return root.Error("plan", plan_ok.message());
  HETERPS_RETURN_IF_ERROR(CheckTier(job));
  return job;
}

}  // namespace heterps::worker
