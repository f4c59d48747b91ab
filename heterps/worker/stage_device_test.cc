// The device path (Stage::UseDeviceTier): a GPU tier feeding the stage's first chain on their
// shared device gives the run of the host path (rows pooled on the host, gradients spread there)
// to the bit, on the host twin: the same losses, and the same parameters once the tier has
// written its rows back, asynchronous and synchronous, one-hot and multi-hot (two embedding
// layers side by side in the chain's input). With the dense parameters held on the device too
// (Stage::HoldDense through a DenseGroup of one replica), the same again, and a step whose keys
// are all resident moves its input over PCIe and little more.
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/dense/gpu/device_backend.h"
#include "heterps/gpu/device.h"
#include "heterps/ps/gpu/gpu_tier.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/worker/dense_group.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {
namespace {

constexpr int kBatch = 48, kSteps = 6;

config::ModelSpec Spec(bool multi_hot) {
  if (!multi_hot) {
    auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
    EXPECT_TRUE(spec.ok()) << spec.status();
    return *spec;
  }
  auto spec = config::ParseModelSpec(R"(
name: multi-hot
batch_size: 48
layers:
  - {name: input, kind: input, dense: 1, sparse: 2}
  - {name: emb, kind: embedding, rows: 100, dim: 4, ids_per_slot: 3, pooling: mean}
  - {name: emb2, kind: embedding, rows: 100, dim: 3, ids_per_slot: 3, pooling: sum}
  - {name: cat, kind: interaction, op: concat}
  - {name: top, kind: fc, in: 15, out: 1}
  - {name: loss, kind: logloss}
data:
  columns:
    - {role: label}
    - {role: dense}
    - {name: item, role: sparse}
    - {name: tags, role: multi_hot}
)",
                                     "multi-hot.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Step `step`'s micro-batch of `n` samples: few ids per slot (keys repeat, and a small tier
// misses some), multi-hot slots of zero to three ids.
Activations Input(const config::ModelSpec& spec, int64_t n, int step) {
  std::mt19937_64 rng(step);
  std::uniform_real_distribution<float> unit(0, 1);
  const int64_t dense = spec.layers[0].dense_features, slots = spec.layers[0].sparse_slots;
  const bool multi_hot = spec.name == "multi-hot";
  Activations in;
  in.size = n;
  in.dense.resize(n, dense);
  for (int64_t i = 0; i < in.dense.size(); ++i) in.dense.data()[i] = unit(rng);
  for (int64_t r = 0; r < n; ++r) {
    in.labels.push_back(unit(rng) < 0.3f ? 1.0f : 0.0f);
    for (int64_t s = 0; s < slots; ++s) {
      if (multi_hot) in.offsets.push_back(static_cast<int32_t>(in.keys.size()));
      const int count = multi_hot ? static_cast<int>(rng() % 4) : 1;
      for (int k = 0; k < count; ++k) in.keys.push_back(97 * s + rng() % 7);
    }
  }
  if (multi_hot) in.offsets.push_back(static_cast<int32_t>(in.keys.size()));
  return in;
}

struct Trained {
  std::vector<double> losses;
  std::vector<float> rows, dense;
  int64_t device_to_host_bytes = 0;
  int64_t last_step_bytes = 0;   // over PCIe, both ways, in the last step
  int64_t last_input_bytes = 0;  // the last step's input: see InputBytes
};

// The bytes of a micro-batch's input as the stage takes it to the device: the keys and the bags'
// offsets once per embedding layer (each of these models' looks up every slot), the dense
// features and the labels; and what the loss brings back, the logits and each sample's loss.
int64_t InputBytes(const config::ModelSpec& spec, const Activations& in) {
  int64_t tables = 0;
  for (const config::LayerSpec& layer : spec.layers) {
    tables += layer.kind == config::LayerKind::kEmbedding ? 1 : 0;
  }
  return tables * static_cast<int64_t>(in.keys.size() * sizeof(uint64_t) +
                                       in.offsets.size() * sizeof(int32_t)) +
         static_cast<int64_t>(in.labels.size() * sizeof(float)) +
         in.dense.size() * static_cast<int64_t>(sizeof(float)) + in.size * 2 * sizeof(float);
}

// kSteps steps of the whole model on twin:0 with a GPU tier of `room` rows a table: on the
// stage's device with the device path, or on a device of its own (twin:1: the host path). With
// `held` (synchronous, the device path), the stage holds its dense parameters on the device.
Trained Train(const config::ModelSpec& spec, bool device_path, bool sync, int64_t room,
              bool held = false) {
  Trained out;
  ps::InProcessPsClient servers(2);
  const ModelOptions options;
  EXPECT_TRUE(CreateModelTables(spec, &servers, options).ok());
  auto backend = dense::NewGpuBackend("twin:0", {});
  EXPECT_TRUE(backend.ok()) << backend.status();
  std::unique_ptr<gpu::Device> own;
  gpu::Device* device = (*backend)->gpu_device();
  if (!device_path) {
    own = *gpu::OpenDevice("twin:1", {});
    device = own.get();
  }
  std::vector<ps::TierTable> tables;
  int64_t bytes = 0;
  for (const config::LayerSpec& layer : spec.layers) {
    if (layer.kind != config::LayerKind::kEmbedding) continue;
    const int table = static_cast<int>(tables.size());
    tables.push_back(
        {table, EmbeddingTableOptions(layer, table, options), layer.rows * layer.slots});
    bytes += room * ps::TierRowBytes(tables.back().options) * layer.slots;
  }
  auto tier = ps::GpuTier::Create(&servers, device, {bytes});
  EXPECT_TRUE(tier.ok());
  EXPECT_TRUE((*tier)->AddTables(tables).ok());
  const int last = static_cast<int>(spec.layers.size()) - 1;
  auto stage = Stage::Create(spec, 0, last, tier->get(), backend->get());
  EXPECT_TRUE(stage.ok()) << stage.status();
  Stage& s = **stage;
  EXPECT_EQ(s.UseDeviceTier(tier->get()), device_path);
  EXPECT_EQ(s.can_hold_dense(), true);  // both on twin:0
  DenseGroup group(kDenseTable, s.dense_blocks(), options.dense_optimizer, 0, 1, nullptr,
                   tier->get());
  if (held) {
    EXPECT_TRUE(group.LoadHeld(s).ok());
  }
  EXPECT_EQ(s.holds_dense(), held);
  for (int step = 0; step < kSteps; ++step) {
    const Activations in = Input(spec, kBatch, step);
    const auto before = (*backend)->stats();
    EXPECT_TRUE(s.Prefetch(in).ok());
    if (!held) {
      EXPECT_TRUE(s.PullParameters().ok());
    }
    ParameterGrads grads = s.NewGrads();
    auto loss = s.ForwardBackward(0, in, 1.0f / kBatch, nullptr, &grads);
    EXPECT_TRUE(loss.ok()) << loss.status();
    out.losses.push_back(loss.ok() ? *loss : 0);
    if (sync) {
      StepGrads sums = s.NewStepGrads();
      sums.Add(0, grads);
      sums.MergeAll();
      if (held) {
        EXPECT_TRUE(s.Accumulate(sums, false, [&] { return group.StepHeld(s); }).ok());
      } else {
        EXPECT_TRUE(s.Accumulate(sums).ok());
      }
      EXPECT_TRUE((*tier)->Commit().ok());
    } else {
      EXPECT_TRUE(s.Push(grads).ok());
    }
    const auto after = (*backend)->stats();
    out.last_step_bytes = after.host_to_device_bytes - before.host_to_device_bytes +
                          after.device_to_host_bytes - before.device_to_host_bytes;
    out.last_input_bytes = InputBytes(spec, in);
  }
  if (held) {
    EXPECT_TRUE(group.WriteBackHeld(s).ok());
  }
  EXPECT_TRUE((*tier)->Flush().ok());
  std::vector<uint64_t> keys;
  for (int64_t s = 0; s < spec.layers[0].sparse_slots; ++s) {
    for (uint64_t k = 0; k < 7; ++k) keys.push_back(97 * s + k);
  }
  for (const ps::TierTable& t : tables) {
    std::vector<float> rows(keys.size() * t.options.dim);
    EXPECT_TRUE(servers.Wait(servers.PullSparse(t.table, keys, absl::MakeSpan(rows))).ok());
    out.rows.insert(out.rows.end(), rows.begin(), rows.end());
  }
  // The dense parameters as the servers hold them at the end (and their optimizer's state).
  for (const auto& [block, floats] : s.dense_blocks()) {
    ps::DenseSlice slice;
    EXPECT_TRUE(servers.Wait(servers.ExportDense(kDenseTable, block, 0, floats, &slice)).ok());
    out.dense.insert(out.dense.end(), slice.value.begin(), slice.value.end());
    out.dense.insert(out.dense.end(), slice.state.begin(), slice.state.end());
    out.dense.push_back(static_cast<float>(slice.steps));
  }
  out.device_to_host_bytes = (*backend)->stats().device_to_host_bytes;
  return out;
}

struct Case {
  bool multi_hot, sync;
  int64_t room;  // rows a table's tier holds (per slot)
  bool held = false;
};

class StageDeviceTest : public ::testing::TestWithParam<Case> {};

TEST_P(StageDeviceTest, TheTierFeedingTheChainGivesTheHostPathsBits) {
  const Case c = GetParam();
  const config::ModelSpec spec = Spec(c.multi_hot);
  const Trained host = Train(spec, false, c.sync, c.room);
  const Trained device = Train(spec, true, c.sync, c.room, c.held);
  EXPECT_EQ(device.losses, host.losses);
  EXPECT_EQ(device.rows, host.rows);
  EXPECT_EQ(device.dense, host.dense);
  // The rows did not come down to the host (the host path's chain device got its vectors from
  // the host and gave their gradients back; the tier on twin:1 moved the rows).
  EXPECT_LT(device.device_to_host_bytes, host.device_to_host_bytes);
  if (c.held && c.room >= 7) {
    // Every key resident after the first steps (7 ids a slot): the last step moved its input
    // once and the loss, no row, parameter or gradient.
    EXPECT_LE(device.last_step_bytes, device.last_input_bytes);
  }
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << (c.multi_hot ? "multi-hot" : "dlrm-small") << (c.sync ? ", sync" : ", async") << ", "
      << c.room << " rows" << (c.held ? ", dense held" : "");
}

INSTANTIATE_TEST_SUITE_P(OneAndMultiHot, StageDeviceTest,
                         ::testing::Values(Case{false, false, 100}, Case{false, true, 100},
                                           Case{false, true, 3}, Case{true, false, 2},
                                           Case{true, true, 100}, Case{false, true, 100, true},
                                           Case{false, true, 3, true}, Case{true, true, 100, true},
                                           Case{true, true, 2, true}));

// A synchronous step's rows on the device take one micro-batch: a second one is an error, not
// a wrong sum.
TEST(StageDeviceRulesTest, ASynchronousStepOfTwoMicroBatchesIsRefused) {
  const config::ModelSpec spec = Spec(false);
  ps::InProcessPsClient servers(1);
  ASSERT_TRUE(CreateModelTables(spec, &servers, ModelOptions()).ok());
  auto backend = dense::NewGpuBackend("twin:0", {});
  ASSERT_TRUE(backend.ok());
  auto tier = ps::GpuTier::Create(&servers, (*backend)->gpu_device(), {1 << 20});
  ASSERT_TRUE(tier.ok());
  ASSERT_TRUE(
      (*tier)
          ->AddTables({{0, EmbeddingTableOptions(spec.layers[1], 0, ModelOptions()), 100000 * 26}})
          .ok());
  auto stage =
      Stage::Create(spec, 0, static_cast<int>(spec.layers.size()) - 1, tier->get(), backend->get());
  ASSERT_TRUE(stage.ok());
  ASSERT_TRUE((*stage)->UseDeviceTier(tier->get()));
  ASSERT_TRUE((*stage)->PullParameters().ok());
  StepGrads sums = (*stage)->NewStepGrads();
  for (int m = 0; m < 2; ++m) {
    ParameterGrads grads = (*stage)->NewGrads();
    ASSERT_TRUE((*stage)->ForwardBackward(m, Input(spec, 16, m), 1.0f / 32, nullptr, &grads).ok());
    sums.Add(m, grads);
  }
  sums.MergeAll();
  EXPECT_THAT((*stage)->Accumulate(sums).message(),
              ::testing::HasSubstr("need one micro-batch of one block a step; this step has 2 "
                                   "micro-batches"));
  // A stage whose later chain folds embedding layers of its own keeps the host path.
  auto two_folds = config::ParseModelSpec(R"(
name: two-folds
batch_size: 8
layers:
  - {name: input, kind: input, dense: 1, sparse: 2}
  - {name: emb, kind: embedding, rows: 100, dim: 4}
  - {name: cat, kind: interaction, op: concat}
  - {name: mid, kind: fc, in: 9, out: 4}
  - {name: emb2, kind: embedding, rows: 100, dim: 3}
  - {name: cat2, kind: interaction, op: concat}
  - {name: top, kind: fc, in: 10, out: 1}
  - {name: loss, kind: logloss}
data:
  columns:
    - {role: label}
    - {role: dense}
    - {name: a, role: sparse}
    - {name: b, role: sparse}
)",
                                          "two-folds.yaml");
  ASSERT_TRUE(two_folds.ok()) << two_folds.status();
  ps::InProcessPsClient more(1);
  auto both = ps::GpuTier::Create(&more, (*backend)->gpu_device(), {1 << 20});
  ASSERT_TRUE(both.ok());
  ASSERT_TRUE(
      (*both)
          ->AddTables({{0, EmbeddingTableOptions(two_folds->layers[1], 0, ModelOptions()), 200},
                       {1, EmbeddingTableOptions(two_folds->layers[4], 1, ModelOptions()), 200}})
          .ok());
  auto folds = Stage::Create(*two_folds, 0, static_cast<int>(two_folds->layers.size()) - 1,
                             both->get(), backend->get());
  ASSERT_TRUE(folds.ok()) << folds.status();
  EXPECT_FALSE((*folds)->UseDeviceTier(both->get()));
  // A stage on the host's CPU, or a tier on another device, keeps the host path.
  auto cpu = Stage::Create(spec, 0, static_cast<int>(spec.layers.size()) - 1, tier->get());
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE((*cpu)->UseDeviceTier(tier->get()));
}

// What a stage holding its dense parameters refuses: a second hold, pulls and updates from the
// host, a micro-batch of several blocks, an update without a backward; a stage on the host's CPU
// cannot hold, and a group of several replicas does not.
TEST(StageDeviceRulesTest, HeldDenseParametersRefuseWhatWouldLoseUpdates) {
  const config::ModelSpec spec = Spec(false);
  const int last = static_cast<int>(spec.layers.size()) - 1;
  ps::InProcessPsClient servers(1);
  const ModelOptions options;
  ASSERT_TRUE(CreateModelTables(spec, &servers, options).ok());
  auto cpu = Stage::Create(spec, 0, last, &servers);
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE((*cpu)->can_hold_dense());
  DenseGroup on_cpu(kDenseTable, (*cpu)->dense_blocks(), options.dense_optimizer, 0, 1, nullptr,
                    &servers);
  EXPECT_EQ(on_cpu.LoadHeld(**cpu).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(on_cpu.held());
  EXPECT_FALSE(on_cpu.loaded());

  auto backend = dense::NewGpuBackend("twin:0", {});
  ASSERT_TRUE(backend.ok());
  auto stage = Stage::Create(spec, 0, last, &servers, backend->get());
  ASSERT_TRUE(stage.ok());
  Stage& s = **stage;
  DenseGroup two(kDenseTable, s.dense_blocks(), options.dense_optimizer, 0, 2, nullptr, &servers);
  EXPECT_THAT(two.LoadHeld(s).message(), ::testing::HasSubstr("one replica holds"));
  DenseGroup group(kDenseTable, s.dense_blocks(), options.dense_optimizer, 0, 1, nullptr, &servers);
  EXPECT_EQ(group.StepHeld(s).code(), absl::StatusCode::kFailedPrecondition);
  std::vector<AlignedFloats> values(s.dense_blocks().size());
  std::vector<std::vector<float>> state(values.size());
  EXPECT_EQ(s.HoldDense(options.dense_optimizer, values, state).code(),
            absl::StatusCode::kInvalidArgument);  // of the wrong sizes
  EXPECT_FALSE(s.holds_dense());
  ASSERT_TRUE(group.LoadHeld(s).ok());
  EXPECT_TRUE(s.holds_dense());
  EXPECT_EQ(group.LoadHeld(s).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.PullParameters().message(), ::testing::HasSubstr("PullParameters while the dense"));
  EXPECT_EQ(s.UpdateDense([](std::vector<AlignedFloats>&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(group.StepHeld(s).message(), ::testing::HasSubstr("after 0 backward passes"));
  ParameterGrads grads = s.NewGrads();
  s.set_block_rows(8);
  EXPECT_THAT(
      s.ForwardBackward(0, Input(spec, 16, 0), 1.0f / 16, nullptr, &grads).status().message(),
      ::testing::HasSubstr("a micro-batch of 2 blocks while the dense parameters are held"));
  s.set_block_rows(0);
  ASSERT_TRUE(s.ForwardBackward(0, Input(spec, 16, 0), 1.0f / 16, nullptr, &grads).ok());
  EXPECT_TRUE(grads.dense_held);
  ASSERT_TRUE(group.StepHeld(s).ok());
  ASSERT_TRUE(group.WriteBackHeld(s).ok());
}

}  // namespace
}  // namespace heterps::worker
