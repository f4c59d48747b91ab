#include "heterps/worker/stage.h"

#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/forwarding_client.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/ps/key_plan.h"

namespace heterps::worker {
namespace {

using ::testing::HasSubstr;

data::Batch RandomBatch(int size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> unit(0, 1);
  data::Batch batch;
  for (int r = 0; r < size; ++r) {
    data::Example e;
    e.label = unit(rng) < 0.3f ? 1.0f : 0.0f;
    e.dense.resize(data::kDenseFeatures);
    for (float& x : e.dense) x = 3 * unit(rng);
    // Few ids per slot, so that keys repeat within and across micro-batches.
    e.counts.assign(data::kSparseSlots, 1);
    for (int s = 0; s < data::kSparseSlots; ++s) e.keys.push_back(data::SlotKey(s, rng() % 5));
    batch.Add(e);
  }
  return batch;
}

config::ModelSpec DlrmSmall() {
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Reads every parameter the model's stages touch: the dense blocks and the rows of `keys`.
std::vector<float> Snapshot(ps::PsClient& client, const config::ModelSpec& spec,
                            const std::vector<uint64_t>& keys) {
  std::vector<float> all;
  int fc = 0, table = 0;
  for (const config::LayerSpec& layer : spec.layers) {
    std::vector<float> values;
    if (layer.kind == config::LayerKind::kFc) {
      values.resize(layer.out * layer.in + layer.out);
      EXPECT_TRUE(client.Wait(client.PullDense(kDenseTable, fc++, absl::MakeSpan(values))).ok());
    } else if (layer.kind == config::LayerKind::kEmbedding) {
      values.resize(keys.size() * layer.dim);
      EXPECT_TRUE(client.Wait(client.PullSparse(table++, keys, absl::MakeSpan(values))).ok());
    }
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b, float tolerance) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tolerance * (1 + std::abs(b[i]))) << "at " << i;
  }
}

// Three steps of a model trained in blocks of kBlock samples, its steps' losses and the
// parameters the steps touched at the end.
constexpr int kBatch = 64, kBlock = 16, kSteps = 3;
struct Trained {
  std::vector<double> losses;
  std::vector<float> parameters;
};

// The whole model, each step one micro-batch whose blocks one holder merges.
Trained TrainWhole(const config::ModelSpec& spec) {
  ps::InProcessPsClient client(2);
  EXPECT_TRUE(CreateModelTables(spec, &client, ModelOptions()).ok());
  auto whole = Stage::Create(spec, 0, static_cast<int>(spec.layers.size()) - 1, &client);
  EXPECT_TRUE(whole.ok()) << whole.status();
  (*whole)->set_block_rows(kBlock);
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    const data::Batch batch = RandomBatch(kBatch, step);
    Activations in;
    InputActivations(batch, 0, kBatch, &in);
    ParameterGrads grads = (*whole)->NewGrads();
    EXPECT_TRUE((*whole)->PullParameters().ok());
    auto loss = (*whole)->ForwardBackward(0, in, 1.0f / kBatch, nullptr, &grads);
    EXPECT_TRUE(loss.ok()) << loss.status();
    EXPECT_EQ(grads.blocks, kBatch / kBlock);
    StepGrads sums = (*whole)->NewStepGrads();
    sums.Add(0, grads);
    sums.MergeAll();
    EXPECT_EQ(sums.nodes.size(), 1u);
    EXPECT_TRUE((*whole)->Accumulate(sums).ok());
    EXPECT_TRUE(client.Commit().ok());
    out.losses.push_back(*loss);
  }
  out.parameters = Snapshot(client, spec, RandomBatch(kBatch, 0).keys);
  return out;
}

// The model cut into three stages, each step cut into micro-batches of `micro` samples (whole
// blocks) that all run forward before any runs backward (as a pipeline has them in flight), the
// backward passes in reverse order, micro-batch m's gradients added to the nodes of "replica"
// m % replicas (so a replica may hold blocks that are not consecutive), each replica's nodes
// sent apart and merged by the servers' commit.
Trained TrainThreeStages(const config::ModelSpec& spec, int micro, int replicas) {
  const int last = static_cast<int>(spec.layers.size()) - 1;
  const int cut1 = spec.FindLayer("bottom.1"), cut2 = spec.FindLayer("top.0");
  EXPECT_GT(cut1, 0);
  EXPECT_GT(cut2, cut1);
  ps::InProcessPsClient client(2);
  EXPECT_TRUE(CreateModelTables(spec, &client, ModelOptions()).ok());
  std::vector<std::unique_ptr<Stage>> stages;
  for (auto [first, end] : {std::pair{0, cut1 - 1}, {cut1, cut2 - 1}, {cut2, last}}) {
    auto stage = Stage::Create(spec, first, end, &client);
    EXPECT_TRUE(stage.ok()) << stage.status();
    (*stage)->set_block_rows(kBlock);
    stages.push_back(*std::move(stage));
  }
  EXPECT_TRUE(stages[0]->passes_labels());
  EXPECT_FALSE(stages[0]->passes_keys());
  EXPECT_TRUE(stages[2]->has_loss());
  const int parts = kBatch / micro;
  Trained out;
  for (int step = 0; step < kSteps; ++step) {
    const data::Batch batch = RandomBatch(kBatch, step);
    for (auto& s : stages) EXPECT_TRUE(s->PullParameters().ok());
    std::vector<Activations> inputs(parts), mid(parts), top(parts);
    std::vector<ActivationGrads> d_mid(parts), d_top(parts);
    std::vector<std::vector<StepGrads>> replica(3);
    std::vector<ParameterGrads> grads;
    for (int s = 0; s < 3; ++s) {
      replica[s].assign(replicas, stages[s]->NewStepGrads());
      grads.push_back(stages[s]->NewGrads());
    }
    std::map<int, std::vector<double>> block_losses;  // by micro-batch
    for (int m = 0; m < parts; ++m) {
      InputActivations(batch, m * micro, micro, &inputs[m]);
      EXPECT_TRUE(stages[0]->Forward(m, inputs[m], &mid[m]).ok());
      EXPECT_TRUE(stages[1]->Forward(m, mid[m], &top[m]).ok());
    }
    for (int m = parts; m-- > 0;) {
      auto part = stages[2]->ForwardBackward(m, top[m], 1.0f / kBatch, &d_top[m], &grads[2],
                                             &block_losses[m]);
      EXPECT_TRUE(part.ok()) << part.status();
      EXPECT_TRUE(stages[1]->Backward(m, d_top[m], &d_mid[m], &grads[1]).ok());
      EXPECT_TRUE(stages[0]->Backward(m, d_mid[m], nullptr, &grads[0]).ok());
      for (int s = 0; s < 3; ++s) replica[s][m % replicas].Add(m * micro / kBlock, grads[s]);
    }
    for (int s = 0; s < 3; ++s) {
      for (int r = 0; r < replicas; ++r) EXPECT_TRUE(stages[s]->Accumulate(replica[s][r]).ok());
    }
    EXPECT_TRUE(client.Commit().ok());
    double loss = 0;
    for (const auto& [m, losses] : block_losses) {
      for (double l : losses) loss += l;
    }
    out.losses.push_back(loss);
  }
  out.parameters = Snapshot(client, spec, RandomBatch(kBatch, 0).keys);
  return out;
}

// The oracle of the distributed runtime: however the model is cut into stages and a step into
// micro-batches and replicas, and in whatever order the micro-batches finish, the losses and
// the parameters are the whole model's on the whole batch, to the bit (ps/block_tree.h).
TEST(StageTest, AnyCutOfTheModelAndTheStepsGivesTheSameBits) {
  const config::ModelSpec spec = DlrmSmall();
  const Trained whole = TrainWhole(spec);
  for (auto [micro, replicas] : {std::pair{16, 2}, {16, 3}, {32, 2}, {64, 1}, {32, 1}}) {
    SCOPED_TRACE(absl::StrCat(micro, "-sample micro-batches, ", replicas, " replicas"));
    const Trained split = TrainThreeStages(spec, micro, replicas);
    EXPECT_EQ(split.losses, whole.losses);
    ExpectNear(split.parameters, whole.parameters, 0.0f);
  }
}

// The blocks matter: without them (one block per micro-batch) the same cut gives other bits, so
// the test above can fail.
TEST(StageTest, WithoutBlocksTheCutChangesTheBits) {
  const config::ModelSpec spec = DlrmSmall();
  const Trained whole = TrainWhole(spec);
  ps::InProcessPsClient client(2);
  ASSERT_TRUE(CreateModelTables(spec, &client, ModelOptions()).ok());
  auto stage = Stage::Create(spec, 0, static_cast<int>(spec.layers.size()) - 1, &client);
  ASSERT_TRUE(stage.ok()) << stage.status();
  (*stage)->set_block_rows(kBatch);  // a micro-batch of 64 is one block
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    const data::Batch batch = RandomBatch(kBatch, step);
    Activations in;
    InputActivations(batch, 0, kBatch, &in);
    ParameterGrads grads = (*stage)->NewGrads();
    ASSERT_TRUE((*stage)->PullParameters().ok());
    auto loss = (*stage)->ForwardBackward(0, in, 1.0f / kBatch, nullptr, &grads);
    ASSERT_TRUE(loss.ok()) << loss.status();
    StepGrads sums = (*stage)->NewStepGrads();
    sums.Add(0, grads);
    ASSERT_TRUE((*stage)->Accumulate(sums).ok());
    ASSERT_TRUE(client.Commit().ok());
    losses.push_back(*loss);
  }
  EXPECT_NE(Snapshot(client, spec, RandomBatch(kBatch, 0).keys), whole.parameters);
  // The same model, nonetheless.
  ExpectNear(Snapshot(client, spec, RandomBatch(kBatch, 0).keys), whole.parameters, 1e-4f);
}

// A client whose dense pulls travel until they are waited for (as the gRPC client's do): the pull
// is made at Wait, which may fail as a server down does. It notes whether the embedding rows were
// pulled while a dense pull was still travelling.
class DeferredDenseClient : public ps::ForwardingPsClient {
 public:
  using ForwardingPsClient::ForwardingPsClient;
  ps::Ticket PullDense(int table, int block, absl::Span<float> values) override {
    travelling_.push_back({table, block, values});
    return kDeferred - static_cast<ps::Ticket>(travelling_.size());
  }
  std::vector<ps::Ticket> PullDenseBlocks(int table,
                                          absl::Span<const ps::DensePull> blocks) override {
    return PsClient::PullDenseBlocks(table, blocks);  // a deferred PullDense per block
  }
  ps::Ticket PullSparse(int table, absl::Span<const uint64_t> keys,
                        absl::Span<float> values) override {
    if (!travelling_.empty()) ++overlapped_;
    return ForwardingPsClient::PullSparse(table, keys, values);
  }
  absl::Status Wait(ps::Ticket ticket) override {
    if (ticket > kDeferred) return ForwardingPsClient::Wait(ticket);
    const Pull pull = travelling_.at(kDeferred - ticket - 1);
    if (fail_) return absl::UnavailableError("ps shard 0 (127.0.0.1:1): PullDense: down");
    if (--unwaited_ == 0) travelling_.clear();
    return target()->Wait(target()->PullDense(pull.table, pull.block, pull.values));
  }
  void Reset(int blocks, bool fail) {
    travelling_.clear();
    unwaited_ = blocks;
    fail_ = fail;
  }
  int overlapped() const { return overlapped_; }

 private:
  static constexpr ps::Ticket kDeferred = -1000;
  struct Pull {
    int table, block;
    absl::Span<float> values;
  };
  std::vector<Pull> travelling_;
  int unwaited_ = 0, overlapped_ = 0;
  bool fail_ = false;
};

// The dense pull travels while the first micro-batch's rows are pulled, and completes at the first
// dense layer: the step is the same as with a pull that completed at once; a failed pull is the
// error of the call that needed it.
TEST(StageTest, TheDensePullTravelsWithTheEmbeddingLookups) {
  const config::ModelSpec spec = DlrmSmall();
  const int last = static_cast<int>(spec.layers.size()) - 1;
  ps::InProcessPsClient plain(1), target(1);
  ASSERT_TRUE(CreateModelTables(spec, &plain, ModelOptions()).ok());
  ASSERT_TRUE(CreateModelTables(spec, &target, ModelOptions()).ok());
  DeferredDenseClient deferred(&target);
  auto reference = Stage::Create(spec, 0, last, &plain);
  auto stage = Stage::Create(spec, 0, last, &deferred);
  ASSERT_TRUE(reference.ok() && stage.ok());
  const int blocks = 5;  // dlrm-small's fc layers
  for (int step = 0; step < 2; ++step) {
    const data::Batch batch = RandomBatch(32, step);
    Activations in;
    InputActivations(batch, 0, 32, &in);
    ParameterGrads want = (*reference)->NewGrads(), got = (*stage)->NewGrads();
    ASSERT_TRUE((*reference)->PullParameters().ok());
    auto expected = (*reference)->ForwardBackward(0, in, 1.0f / 32, nullptr, &want);
    deferred.Reset(blocks, false);
    ASSERT_TRUE((*stage)->PullParameters().ok());
    auto loss = (*stage)->ForwardBackward(0, in, 1.0f / 32, nullptr, &got);
    ASSERT_TRUE(expected.ok() && loss.ok()) << loss.status();
    EXPECT_EQ(*loss, *expected) << "step " << step;
    EXPECT_EQ(deferred.overlapped(), step + 1);
    ASSERT_TRUE((*reference)->Push(want).ok());
    ASSERT_TRUE((*stage)->Push(got).ok());
  }
  const data::Batch batch = RandomBatch(32, 9);
  Activations in;
  InputActivations(batch, 0, 32, &in);
  ParameterGrads grads = (*stage)->NewGrads();
  deferred.Reset(blocks, true);
  ASSERT_TRUE((*stage)->PullParameters().ok());
  auto failed = (*stage)->ForwardBackward(0, in, 1.0f / 32, nullptr, &grads);
  EXPECT_THAT(failed.status().message(), HasSubstr("ps shard 0 (127.0.0.1:1)"));
}

TEST(StageTest, EmbeddingGradientsOfARepeatedKeyAreOneUpdate) {
  auto spec = config::ParseModelSpec(R"(
name: emb
batch_size: 2
layers:
  - {name: input, kind: input, dense: 13, sparse: 26}
  - {name: emb, kind: embedding, rows: 10, dim: 3, slots: 2}
  - {name: mix, kind: interaction, op: concat}
  - {name: out, kind: fc, in: 19, out: 1}
  - {name: loss, kind: logloss}
)",
                                     "emb.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ps::InProcessPsClient client(2);
  ModelOptions options;
  options.sparse_optimizer = {ps::OptimizerKind::kSgd, 1.0f};  // a row moves by minus its sum
  ASSERT_TRUE(CreateModelTables(*spec, &client, options).ok());
  auto stage = Stage::Create(*spec, 0, 1, &client);
  ASSERT_TRUE(stage.ok()) << stage.status();
  // Two samples; key 7 in both.
  Activations in;
  in.size = 2;
  in.keys.assign(2 * data::kSparseSlots, 1);
  in.keys[0] = 7, in.keys[1] = 8, in.keys[26] = 9, in.keys[27] = 7;
  in.dense.setZero(2, data::kDenseFeatures);
  Activations out;
  ASSERT_TRUE((*stage)->Forward(0, in, &out).ok());
  ASSERT_EQ(out.vectors.rows(), 2);
  ASSERT_EQ(out.vectors.cols(), 6);
  const uint64_t order[4] = {7, 8, 9, 7};
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> initial =
        client.sparse(0, ps::ServerOf(order[i], 2))->InitialValue(order[i]);
    for (int d = 0; d < 3; ++d) EXPECT_EQ(out.vectors(i / 2, (i % 2) * 3 + d), initial[d]) << i;
  }
  ActivationGrads d_out;
  d_out.dense.setZero(2, data::kDenseFeatures);
  d_out.vectors.resize(2, 6);
  d_out.vectors << 1, 2, 3, 4, 5, 6,  //
      7, 8, 9, 10, 20, 30;
  ParameterGrads grads = (*stage)->NewGrads();
  ASSERT_TRUE((*stage)->Backward(0, d_out, nullptr, &grads).ok());
  ASSERT_TRUE((*stage)->Push(grads).ok());
  Activations after;
  ASSERT_TRUE((*stage)->Forward(1, in, &after).ok());
  for (int d = 0; d < 3; ++d) {
    EXPECT_FLOAT_EQ(after.vectors(0, d), out.vectors(0, d) - 11 * (d + 1));  // 7: 1,2,3 + 10,20,30
    EXPECT_FLOAT_EQ(after.vectors(1, 3 + d), after.vectors(0, d));
    EXPECT_FLOAT_EQ(after.vectors(0, 3 + d), out.vectors(0, 3 + d) - (4 + d));  // 8
    EXPECT_FLOAT_EQ(after.vectors(1, d), out.vectors(1, d) - (7 + d));          // 9
  }
  // Wrong shapes are errors, not crashes.
  ActivationGrads wrong;
  wrong.dense.setZero(3, 1);
  EXPECT_FALSE((*stage)->Backward(0, wrong, nullptr, &grads).ok());
  EXPECT_THAT((*stage)->Backward(5, d_out, nullptr, &grads).message(), HasSubstr("before"));
  EXPECT_FALSE(Stage::Create(*spec, 3, 2, &client).ok());
}

// A multi-hot embedding: pooling forward against the rows, and its gradients against finite
// differences of f = sum_r <d_out_r, vectors_r>, for sum and for mean pooling.
TEST(StageTest, MultiHotPoolingMatchesItsRowsAndFiniteDifferences) {
  for (const std::string pooling : {"sum", "mean"}) {
    SCOPED_TRACE(pooling);
    auto spec = config::ParseModelSpec(R"(
name: multi-hot
batch_size: 3
layers:
  - {name: input, kind: input, dense: 1, sparse: 2}
  - {name: emb, kind: embedding, rows: 100, dim: 3, ids_per_slot: 2, pooling: )" +
                                           pooling + R"(}
  - {name: cat, kind: interaction, op: concat}
  - {name: top, kind: fc, in: 7, out: 1}
  - {name: loss, kind: logloss}
data:
  columns:
    - {role: label}
    - {role: dense}
    - {name: item, role: sparse}
    - {name: tags, role: multi_hot}
)",
                                       "multi-hot.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    ps::InProcessPsClient client(2);
    ModelOptions options;
    options.sparse_optimizer = {ps::OptimizerKind::kSgd, 1.0f};  // a row moves by minus its grad
    ASSERT_TRUE(CreateModelTables(*spec, &client, options).ok());
    auto stage = Stage::Create(*spec, 0, 1, &client);
    ASSERT_TRUE(stage.ok()) << stage.status();
    // Sample 0: {7} and {5, 6, 5}; sample 1: {7, 8} and {}; sample 2: {} and {6}.
    Activations in;
    in.size = 3;
    in.keys = {7, 5, 6, 5, 7, 8, 6};
    in.offsets = {0, 1, 4, 6, 6, 6, 7};
    in.dense.setZero(3, 1);
    Activations out;
    // Offsets that do not describe the keys are an error, not a read out of bounds.
    Activations bad = in;
    bad.offsets = {0, 1, 6, 4, 6, 6, 7};
    EXPECT_THAT((*stage)->Forward(0, bad, &out).message(), HasSubstr("offsets decrease"));
    bad.offsets = {0, 1, 4, 6, 6, 7};
    EXPECT_THAT((*stage)->Forward(0, bad, &out).message(), HasSubstr("6 offsets for 3 samples"));
    ASSERT_TRUE((*stage)->Forward(0, in, &out).ok());
    ASSERT_EQ(out.vectors.rows(), 3);
    ASSERT_EQ(out.vectors.cols(), 6);
    auto row = [&](uint64_t key) {
      return client.sparse(0, ps::ServerOf(key, 2))->InitialValue(key);
    };
    const float third = pooling == "mean" ? 1.0f / 3 : 1.0f, half = pooling == "mean" ? 0.5f : 1.0f;
    for (int d = 0; d < 3; ++d) {
      EXPECT_FLOAT_EQ(out.vectors(0, d), row(7)[d]);
      EXPECT_NEAR(out.vectors(0, 3 + d), (2 * row(5)[d] + row(6)[d]) * third, 1e-6);
      EXPECT_NEAR(out.vectors(1, d), (row(7)[d] + row(8)[d]) * half, 1e-6);
      EXPECT_EQ(out.vectors(1, 3 + d), 0.0f);  // an empty slot: a zero vector
      EXPECT_EQ(out.vectors(2, d), 0.0f);
      EXPECT_FLOAT_EQ(out.vectors(2, 3 + d), row(6)[d]);
    }
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> unit(-1, 1);
    ActivationGrads d_out;
    d_out.dense.setZero(3, 1);
    d_out.vectors.resize(3, 6);
    for (int i = 0; i < d_out.vectors.size(); ++i) d_out.vectors.data()[i] = unit(rng);
    ParameterGrads grads = (*stage)->NewGrads();
    ASSERT_TRUE((*stage)->Backward(0, d_out, nullptr, &grads).ok());
    ASSERT_EQ(grads.sparse[0].keys.size(), in.keys.size());
    std::map<uint64_t, std::vector<double>> analytic;
    for (size_t k = 0; k < grads.sparse[0].keys.size(); ++k) {
      std::vector<double>& g = analytic[grads.sparse[0].keys[k]];
      g.resize(3);
      for (int d = 0; d < 3; ++d) g[d] += grads.sparse[0].grads[k * 3 + d];
    }
    auto f = [&]() {
      Activations o;
      EXPECT_TRUE((*stage)->Forward(1, in, &o).ok());
      return static_cast<double>((o.vectors.array() * d_out.vectors.array()).sum());
    };
    auto move = [&](uint64_t key, int d, float by) {  // row(key)[d] += by
      std::vector<float> g(3, 0.0f);
      g[d] = -by;
      const uint64_t keys[1] = {key};
      ASSERT_TRUE(client.Wait(client.PushSparse(0, keys, g)).ok());
    };
    const float eps = 0.01f;
    for (const auto& [key, g] : analytic) {
      for (int d = 0; d < 3; ++d) {
        move(key, d, eps);
        const double plus = f();
        move(key, d, -2 * eps);
        const double minus = f();
        move(key, d, eps);
        EXPECT_NEAR(g[d], (plus - minus) / (2 * eps), 2e-3) << "key " << key << " dim " << d;
      }
    }
  }
}

}  // namespace
}  // namespace heterps::worker
