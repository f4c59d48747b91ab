// The bytes a stage boundary carries, against the cost model's figures for them.
#include <vector>

#include "gtest/gtest.h"
#include "heterps/cost/layer_cost.h"
#include "heterps/ps/in_process_client.h"
#include "heterps/worker/stage.h"

namespace heterps::worker {
namespace {

// What a cut carries per sample is what the cost model prices there (cost::DeriveLayerCosts'
// act_out_bytes): the dense vector and the embedding vectors, the input's ids (with their offsets
// where a slot is multi-hot) while an embedding layer lies ahead, and the labels while the loss
// does; and back (grad_out_bytes), the gradients of the dense vector and the vectors. Every cut of
// three models: one embedding layer, two reading the same slots, and a multi-hot one that leaves
// slots unread.
TEST(CutBytesTest, EachCutCarriesTheBytesTheCostModelPrices) {
  auto multi_hot = config::ParseModelSpec(R"(
name: multi-hot
batch_size: 64
layers:
  - {name: input, kind: input, dense: 13, sparse: 26}
  - {name: emb, kind: embedding, rows: 100, dim: 4, slots: 20, ids_per_slot: 3}
  - {name: cat, kind: interaction, op: concat}
  - {name: fc, kind: fc, in: 93, out: 8, activation: relu}
  - {name: top, kind: fc, in: 8, out: 1}
  - {name: loss, kind: logloss}
)",
                                          "multi-hot.yaml");
  ASSERT_TRUE(multi_hot.ok()) << multi_hot.status();
  auto wide_deep = config::LoadModelSpec("examples/models/wide-deep.yaml");
  ASSERT_TRUE(wide_deep.ok()) << wide_deep.status();
  auto dlrm_small = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(dlrm_small.ok()) << dlrm_small.status();
  for (const config::ModelSpec& spec : {*dlrm_small, *wide_deep, *multi_hot}) {
    SCOPED_TRACE(spec.name);
    constexpr int kSamples = 64;
    const int64_t slots = spec.layers[0].sparse_slots;
    const bool ragged = spec.name == "multi-hot";
    // Every slot an embedding layer reads holds ids_per_slot keys (3 where multi-hot), the
    // unread one one key.
    Activations in;
    in.size = kSamples;
    in.labels.assign(kSamples, 1.0f);
    in.dense.setConstant(kSamples, spec.layers[0].dense_features, 0.5f);
    in.vectors.resize(kSamples, 0);
    for (int r = 0; r < kSamples; ++r) {
      for (int64_t s = 0; s < slots; ++s) {
        if (ragged) in.offsets.push_back(static_cast<int32_t>(in.keys.size()));
        const int ids = ragged && s < 20 ? 3 : 1;
        for (int i = 0; i < ids; ++i) in.keys.push_back(data::SlotKey(s, (r + i) % 7));
      }
    }
    if (ragged) in.offsets.push_back(static_cast<int32_t>(in.keys.size()));
    const std::vector<cost::LayerCost> costs = cost::DeriveLayerCosts(spec, kSamples);
    ps::InProcessPsClient client(2);
    const absl::Status tables = CreateModelTables(spec, &client, ModelOptions());
    ASSERT_TRUE(tables.ok()) << tables;
    int cuts = 0;
    for (int last = 0; spec.layers[last + 1].kind != config::LayerKind::kLogloss; ++last) {
      auto stage = Stage::Create(spec, 0, last, &client);
      ASSERT_TRUE(stage.ok()) << stage.status();
      ASSERT_TRUE((*stage)->PullParameters().ok());
      Activations out;
      ASSERT_TRUE((*stage)->Forward(0, in, &out).ok()) << spec.layers[last].name;
      const double bytes = 4.0 * out.labels.size() + 8.0 * out.keys.size() +
                           4.0 * out.offsets.size() + 4.0 * out.dense.size() +
                           4.0 * out.vectors.size();
      // The offsets' closing entry (4 bytes a micro-batch) is below the model's resolution.
      EXPECT_NEAR(bytes / kSamples, costs[last].act_out_bytes, ragged ? 4.0 / kSamples : 0)
          << "after " << spec.layers[last].name;
      // The rest of the model sends back the gradients of what it received.
      auto rest = Stage::Create(spec, last + 1, static_cast<int>(spec.layers.size()) - 1, &client);
      ASSERT_TRUE(rest.ok()) << rest.status();
      ASSERT_TRUE((*rest)->PullParameters().ok());
      ActivationGrads back;
      ParameterGrads grads = (*rest)->NewGrads();
      ASSERT_TRUE((*rest)->ForwardBackward(0, out, 1.0f / kSamples, &back, &grads).ok());
      EXPECT_EQ(4.0 * (back.dense.size() + back.vectors.size()) / kSamples,
                costs[last].grad_out_bytes)
          << "after " << spec.layers[last].name;
      ++cuts;
    }
    EXPECT_GE(cuts, 4);
  }
}

}  // namespace
}  // namespace heterps::worker
