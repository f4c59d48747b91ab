#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/model_spec.h"
#include "heterps/config/spec_testing.h"

namespace heterps::config {
namespace {

using ::testing::HasSubstr;
using testing::BadSpec;
using testing::Edit;

constexpr char kGoodModel[] = R"(name: m
batch_size: 64
layers:
  - name: input
    kind: input
    dense: 4
    sparse: 2
  - name: emb
    kind: embedding
    rows: 100
    dim: 4
  - name: bottom
    kind: mlp
    sizes: [4, 8, 4]
  - name: dot
    kind: interaction
    op: dot
  - name: top
    kind: fc
    in: 7
    out: 1
  - name: loss
    kind: logloss
)";

TEST(ModelSpecTest, OptimizerSettingsAreReadAndTheRestLeftToTheDefaults) {
  auto spec = ParseModelSpec(
      Edit(kGoodModel, "name: m\n",
           "name: m\noptimizer:\n  embeddings: {kind: adagrad, lr: 0.2, initial_accumulator: 0}\n"
           "  dense: {beta1: 0.8, beta2: 0.99, epsilon: 1e-6}\n"),
      "m.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->embedding_optimizer.kind, "adagrad");
  EXPECT_EQ(spec->embedding_optimizer.learning_rate, 0.2);
  EXPECT_EQ(spec->embedding_optimizer.initial_accumulator, 0);
  EXPECT_LT(spec->embedding_optimizer.epsilon, 0);  // not given
  EXPECT_EQ(spec->dense_optimizer.kind, "");
  EXPECT_EQ(spec->dense_optimizer.learning_rate, 0);
  EXPECT_EQ(spec->dense_optimizer.beta1, 0.8);
  EXPECT_EQ(spec->dense_optimizer.beta2, 0.99);
  EXPECT_EQ(spec->dense_optimizer.epsilon, 1e-6);
  auto plain = ParseModelSpec(kGoodModel, "m.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->embedding_optimizer.kind, "");
  EXPECT_EQ(plain->embedding_optimizer.learning_rate, 0);
}

TEST(ModelSpecTest, ParsesAndDerivesShapes) {
  auto model = ParseModelSpec(kGoodModel, "m.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->name, "m");
  EXPECT_EQ(model->batch_size, 64);
  ASSERT_EQ(model->layers.size(), 7u);  // the mlp expands to bottom.0 and bottom.1
  EXPECT_EQ(model->layers[2].name, "bottom.0");
  EXPECT_EQ(model->layers[3].name, "bottom.1");
  EXPECT_EQ(model->layers[3].activation, Activation::kRelu);
  EXPECT_EQ(model->layers[1].slots, 2);
  EXPECT_EQ(model->layers[1].vectors_out, 2);
  // Dot of 3 vectors of width 4: 3 pairs, plus the dense 4 = 7.
  EXPECT_EQ(model->layers[4].dense_width_out, 7);
  EXPECT_EQ(model->layers[5].line, 18);  // "top", after the mlp expanded
}

TEST(ModelSpecTest, ExamplesParse) {
  for (const char* name : {"dlrm-small", "ctr-dnn", "wide-deep", "dlrm-large", "bst-attention",
                           "avazu-ctr", "movielens-genres", "dlrm-criteo-kaggle"}) {
    auto model = LoadModelSpec(std::string("examples/models/") + name + ".yaml");
    EXPECT_TRUE(model.ok()) << model.status();
  }
  // Criteo Kaggle's 26 vocabularies: 33,762,577 ids, plus an empty id's row per slot.
  EXPECT_EQ(LoadModelSpec("examples/models/dlrm-criteo-kaggle.yaml")->layers[1].rows,
            (33762577 + 26 + 25) / 26);
  for (const char* name : {"cloud", "fleet-64", "local"}) {
    auto cluster = LoadClusterSpec(std::string("examples/clusters/") + name + ".yaml");
    EXPECT_TRUE(cluster.ok()) << cluster.status();
  }
  EXPECT_EQ(LoadClusterSpec("examples/clusters/fleet-64.yaml")->types.size(), 64u);
  EXPECT_GE(LoadClusterSpec("examples/clusters/cloud.yaml")->types.size(), 8u);
}

TEST(ModelSpecTest, DlrmSmallIsExactlyAsSpecified) {
  auto model = LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->batch_size, 2048);
  const auto& l = model->layers;
  ASSERT_EQ(l.size(), 9u);
  EXPECT_EQ(l[0].dense_features, 13);
  EXPECT_EQ(l[0].sparse_slots, 26);
  EXPECT_EQ(l[1].rows, 100000);
  EXPECT_EQ(l[1].dim, 16);
  EXPECT_EQ(l[1].pooling, Pooling::kSum);
  EXPECT_EQ(l[2].in, 13);
  EXPECT_EQ(l[2].out, 64);
  EXPECT_EQ(l[3].out, 16);
  EXPECT_EQ(l[4].op, InteractionOp::kDot);
  EXPECT_EQ(l[4].dense_width_out, 367);
  EXPECT_EQ(l[5].out, 256);
  EXPECT_EQ(l[6].out, 128);
  EXPECT_EQ(l[7].out, 1);
  EXPECT_EQ(l[7].activation, Activation::kNone);
  EXPECT_EQ(l[6].activation, Activation::kRelu);
  EXPECT_EQ(l[8].kind, LayerKind::kLogloss);
}

std::vector<BadSpec> BadModels() {
  const std::string g = kGoodModel;
  return {
      {"malformed yaml", "name: m\nlayers: [\n",
       "m.yaml:3: malformed YAML: end of sequence flow not found"},
      {"empty", "", "m.yaml:1: the document is empty"},
      {"not a mapping", "- 1\n- 2\n", "m.yaml:1: must be a mapping"},
      {"missing batch", Edit(g, "batch_size: 64\n", ""),
       "m.yaml:1: batch_size: missing required field"},
      {"zero batch", Edit(g, "batch_size: 64", "batch_size: 0"),
       "m.yaml:2: batch_size: must be > 0, got 0"},
      {"text batch", Edit(g, "batch_size: 64", "batch_size: lots"),
       "m.yaml:2: batch_size: must be a number, got 'lots'"},
      {"fraction batch", Edit(g, "batch_size: 64", "batch_size: 6.5"),
       "m.yaml:2: batch_size: must be a whole number, got '6.5'"},
      {"unknown top field", Edit(g, "name: m\n", "name: m\nsolver: adam\n"),
       "m.yaml:2: solver: unknown field (expected one of: batch_size, data, layers, name, "
       "optimizer)"},
      {"unknown kind", Edit(g, "kind: logloss", "kind: softmax"),
       "m.yaml:23: layers[5].kind: unknown value 'softmax' (expected one of: input, embedding, "
       "mlp, fc, interaction, logloss, custom)"},
      {"unknown layer field", Edit(g, "    dim: 4\n", "    dim: 4\n    dims: 4\n"),
       "m.yaml:12: layers[1].dims: unknown field (expected one of: dim, ids_per_slot, kind, name, "
       "pooling, rows, slots)"},
      {"typo in an optional field", Edit(g, "    dim: 4\n", "    dim: 4\n    poolng: mean\n"),
       "m.yaml:12: layers[1].poolng: unknown field, did you mean 'pooling'? (expected one of: dim, "
       "ids_per_slot, kind, name, pooling, rows, slots)"},
      {"optimizer kind", Edit(g, "name: m\n", "name: m\noptimizer: {dense: {kind: lamb}}\n"),
       "m.yaml:2: optimizer.dense.kind: unknown value 'lamb' (expected one of: sgd, adagrad, "
       "adam)"},
      {"optimizer beta", Edit(g, "name: m\n", "name: m\noptimizer: {dense: {beta2: 1}}\n"),
       "m.yaml:2: optimizer.dense.beta2: must be < 1, got 1"},
      {"optimizer part", Edit(g, "name: m\n", "name: m\noptimizer: {embedding: {lr: 1}}\n"),
       "m.yaml:2: optimizer.embedding: unknown field, did you mean 'embeddings'? (expected one of: "
       "dense, embeddings)"},
      {"typo in a required field", Edit(g, "batch_size: 64", "batch_sise: 64"),
       "m.yaml:2: batch_sise: unknown field, did you mean 'batch_size'? (a required field)"},
      {"typo in a required layer field", Edit(g, "    rows: 100\n", "    rosw: 100\n"),
       "m.yaml:10: layers[1].rosw: unknown field, did you mean 'rows'? (expected one of: dim, "
       "ids_per_slot, kind, name, pooling, rows, slots)"},
      {"missing rows", Edit(g, "    rows: 100\n", ""),
       "m.yaml:8: layers[1].rows: missing required field (or declare buckets for every one of "
       "the layer's slots in the data section)"},
      {"negative dim", Edit(g, "dim: 4", "dim: -4"),
       "m.yaml:11: layers[1].dim: must be > 0, got -4"},
      {"zero rows", Edit(g, "rows: 100", "rows: 0"),
       "m.yaml:10: layers[1].rows: must be > 0, got 0"},
      {"layers not a list", "name: m\nbatch_size: 1\nlayers: 3\n",
       "m.yaml:3: layers: must be a non-empty list of layers"},
      {"duplicate name", Edit(g, "name: top", "name: emb"),
       "m.yaml:18: layers[4].name: duplicate layer name 'emb' (first at line 8)"},
      {"duplicate field", Edit(g, "    rows: 100\n", "    rows: 100\n    rows: 200\n"),
       "m.yaml:11: layers[1].rows: duplicate field"},
      {"width mismatch", Edit(g, "in: 7", "in: 8"),
       "m.yaml:20: layers[4].in: 8 does not match the previous layer's output width 7"},
      {"mlp width mismatch", Edit(g, "sizes: [4, 8, 4]", "sizes: [5, 8, 4]"),
       "m.yaml:14: layers[2].sizes: 5 does not match the previous layer's output width 4"},
      {"mlp bad size", Edit(g, "sizes: [4, 8, 4]", "sizes: [4, x, 4]"),
       "m.yaml:14: layers[2].sizes[1]: must be a positive whole number"},
      {"dot width mismatch", Edit(g, "sizes: [4, 8, 4]", "sizes: [4, 8, 5]"),
       "m.yaml:17: layers[3].op: dot needs the dense vector and every embedding vector to have one "
       "width; the dense vector has 5, the embeddings 4"},
      {"loss without logit", Edit(Edit(g, "in: 7", "in: 7"), "out: 1", "out: 2"),
       "m.yaml:23: layers[5].kind: logloss needs a single logit, but the previous layer's output "
       "width is 2"},
      {"no loss", Edit(g, "  - name: loss\n    kind: logloss\n", ""),
       "m.yaml:18: layers: the last layer must be a logloss layer"},
      {"input not first", Edit(g, "kind: input", "kind: fc"),
       "m.yaml:5: layers[0].kind: the first layer must be the input layer"},
      {"too many slots", Edit(g, "    dim: 4\n", "    dim: 4\n    slots: 3\n"),
       "m.yaml:12: layers[1].slots: 3 is more than the input's 2 sparse slots"},
      {"bad pooling", Edit(g, "    dim: 4\n", "    dim: 4\n    pooling: max\n"),
       "m.yaml:12: layers[1].pooling: unknown value 'max' (expected one of: sum, mean)"},
      {"infinite size", Edit(g, "rows: 100", "rows: .inf"),
       "m.yaml:10: layers[1].rows: must be finite, got '.inf'"},
      {"empty value", Edit(g, "rows: 100", "rows:"), "m.yaml:10: layers[1].rows: has no value"},
      {"empty model name", Edit(g, "name: m\n", "name: ''\n"), "m.yaml:1: name: must not be empty"},
      {"layer after the loss", g + "  - {name: extra, kind: logloss}\n",
       "m.yaml:24: layers[6].kind: no layer may follow the logloss layer"},
      {"mlp name reused", Edit(g, "name: top", "name: bottom"),
       "m.yaml:18: layers[4].name: duplicate layer name 'bottom' (first at line 12)"},
      {"custom unknown field",
       Edit(g, "    kind: fc\n    in: 7\n    out: 1\n",
            "    kind: custom\n    in: 7\n    out: 1\n    flops: 10\n    flop: 1\n"),
       "m.yaml:23: layers[4].flop: unknown field (expected one of: activation_bytes, flops, in, "
       "kind, name, out, params)"},
      {"a name that is not UTF-8", Edit(g, "name: top", "name: \xff\xfe"),
       "m.yaml:18: not UTF-8 text (byte 260 of the file)"},
      {"a cut UTF-8 sequence", g + "# caf\xc3", "m.yaml:24: not UTF-8 text (byte 336 of the file)"},
      {"an overlong UTF-8 sequence", Edit(g, "name: top", "name: \xc0\xafx"),
       "m.yaml:18: not UTF-8 text (byte 260 of the file)"},
  };
}

TEST(ModelSpecTest, BadSpecsNameFileLineAndField) {
  for (const BadSpec& bad : BadModels()) {
    auto model = ParseModelSpec(bad.text, "m.yaml");
    ASSERT_FALSE(model.ok()) << bad.what;
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << bad.what;
    EXPECT_EQ(std::string(model.status().message()), bad.message) << bad.what;
  }
}

// kGoodModel with a multi-hot embedding and a data section that fits it: a label, 4 dense columns
// (f1..f4), one sparse and one multi-hot column.
std::string WithData(const std::string& columns, const std::string& ids_per_slot = "2") {
  return Edit(kGoodModel, "    dim: 4\n", "    dim: 4\n    ids_per_slot: " + ids_per_slot + "\n") +
         "data:\n"
         "  delimiter: \",\"\n"
         "  columns:\n" +
         columns;
}
constexpr char kFitting[] =
    "    - {name: click, role: label}\n"
    "    - {name: f, count: 4, role: dense, type: integer, transform: log1p}\n"
    "    - {name: item, role: sparse, ids: decimal}\n"
    "    - {name: tags, role: multi_hot, separator: ' ', max_ids: 8}\n";

TEST(ModelSpecTest, ADataSectionDeclaresTheLayout) {
  auto model = ParseModelSpec(WithData(kFitting), "m.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_TRUE(model->data_declared);
  const data::Schema& s = model->data;
  EXPECT_EQ(s.delimiter, ',');
  EXPECT_FALSE(s.header);
  ASSERT_EQ(s.columns.size(), 7u);
  EXPECT_EQ(s.columns[4].name, "f4");
  EXPECT_TRUE(s.columns[4].integer);
  EXPECT_EQ(s.columns[4].transform, data::Transform::kLog1p);
  EXPECT_EQ(s.columns[5].ids, data::IdFormat::kDecimal);
  EXPECT_EQ(s.columns[6].separator, ' ');
  EXPECT_EQ(s.columns[6].max_ids, 8);
  EXPECT_EQ(s.columns[6].line, 31);
  EXPECT_TRUE(s.multi_hot(1));
  // No section: Criteo's layout.
  auto plain = ParseModelSpec(kGoodModel, "m.yaml");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->data_declared);
  EXPECT_EQ(plain->data.columns.size(), 40u);
}

TEST(ModelSpecTest, ALayoutThatDoesNotFitTheModelNamesColumnAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {WithData(Edit(kFitting, "count: 4", "count: 3")),
       "m.yaml:27: data.columns: 3 dense and 2 sparse/multi_hot columns, but the input layer "
       "(m.yaml:4) declares dense: 4 and sparse: 2"},
      {WithData(kFitting, "1"),
       "m.yaml:31: data.columns (tags): a multi_hot column (slot 1), but embedding layer emb "
       "(m.yaml:8) looks it up one-hot: set its ids_per_slot to the average ids per sample of "
       "its slots (> 1)"},
      {WithData(Edit(kFitting, "role: sparse", "role: categorical")),
       "m.yaml:30: data.columns[2].role: unknown value 'categorical' (expected one of: label, "
       "dense, sparse, multi_hot, ignore)"},
      {WithData(Edit(kFitting, "ids: decimal", "ids: decimal, transform: log1p")),
       "m.yaml:30: data.columns[2].transform: only for dense columns"},
      {WithData(Edit(kFitting, "separator: ' '", "separator: ','")),
       "m.yaml:31: data.columns (tags): the multi-hot separator must differ from the delimiter"},
      {WithData(Edit(kFitting, "{name: click, role: label}", "{name: click, role: ignore}")),
       "m.yaml:28: data.columns: no column is the label"},
      {WithData(Edit(kFitting, "max_ids: 8", "max_ids: 0")),
       "m.yaml:31: data.columns[3].max_ids: must be >= 1, got 0"},
      {WithData(Edit(kFitting, "role: dense,", "role: dense, typo: 1,")),
       "m.yaml:29: data.columns[1].typo: unknown field (expected one of: buckets, count, ids, "
       "max_ids, name, role, separator, threshold, transform, type)"},
      {WithData(Edit(kFitting, "role: dense,", "role: dense, threshold: 4,")),
       "m.yaml:29: data.columns[1].threshold: only for label columns"},
      {Edit(WithData(kFitting), "delimiter: \",\"", "delimiter: \";;\""),
       "m.yaml:26: data.delimiter: must be one character (or \"tab\"), not a line end"},
  };
  for (const auto& [text, message] : cases) {
    auto model = ParseModelSpec(text, "m.yaml");
    ASSERT_FALSE(model.ok()) << message;
    EXPECT_EQ(std::string(model.status().message()), message);
  }
}

// Per-slot vocabularies: ids hashed into `buckets` values; the tables' rows follow from them.
TEST(ModelSpecTest, BucketsBoundEachSlotAndSizeItsTables) {
  const std::string columns =
      "    - {name: click, role: label}\n"
      "    - {name: f, count: 4, role: dense}\n"
      "    - {name: item, role: sparse, ids: decimal, buckets: 1000}\n"
      "    - {name: tags, role: multi_hot, separator: ' ', buckets: 99}\n";
  auto model = ParseModelSpec(Edit(WithData(columns), "    rows: 100\n", ""), "m.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->data.slot_column(0).buckets, 1000u);
  EXPECT_EQ(model->data.slot_column(1).buckets, 99u);
  EXPECT_EQ(model->layers[1].rows, (1001 + 100 + 1) / 2);  // the empty id's row included
  // A declared rows within reach stays.
  model = ParseModelSpec(WithData(columns), "m.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->layers[1].rows, 100);
  // A group takes one number for all its columns or a list of one each.
  const std::string group =
      "    - {name: click, role: label}\n"
      "    - {name: f, count: 4, role: dense}\n"
      "    - {name: c, count: 2, role: sparse, buckets: [10, 20]}\n";
  model = ParseModelSpec(
      Edit(Edit(WithData(group), "    rows: 100\n", ""), "ids_per_slot: 2", "ids_per_slot: 1"),
      "m.yaml");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->data.slot_column(0).buckets, 10u);
  EXPECT_EQ(model->data.slot_column(1).buckets, 20u);
  EXPECT_EQ(model->layers[1].rows, 16);

  const std::vector<std::pair<std::string, std::string>> cases = {
      {Edit(WithData(columns), "rows: 100", "rows: 5000"),
       "m.yaml:10: layers[1].rows: 5000 per table, but the slots' buckets give at most 1001 keys "
       "each (the "
       "empty id's included): lower it, or leave it out to take it from the buckets"},
      {Edit(WithData(Edit(columns, ", buckets: 99", "")), "    rows: 100\n", ""),
       "m.yaml:8: layers[1].rows: missing required field (or declare buckets for every one of "
       "the layer's slots in the data section)"},
      {Edit(kGoodModel, "    rows: 100\n", ""),
       "m.yaml:8: layers[1].rows: missing required field (or declare buckets for every one of "
       "the layer's slots in the data section)"},
      {WithData(Edit(columns, "buckets: 1000", "buckets: 0")),
       "m.yaml:30: data.columns[2].buckets: must be a whole number of ids from 1 to 4.6e18, got "
       "'0'"},
      {WithData(Edit(columns, "buckets: 1000", "buckets: [1, x]")),
       "m.yaml:30: data.columns[2].buckets: a list of 2 for 1 columns (count)"},
      {WithData(Edit(columns, "role: dense}", "role: dense, buckets: 5}")),
       "m.yaml:29: data.columns[1].buckets: only for sparse and multi_hot columns"},
  };
  for (const auto& [text, message] : cases) {
    auto bad = ParseModelSpec(text, "m.yaml");
    ASSERT_FALSE(bad.ok()) << message;
    EXPECT_EQ(std::string(bad.status().message()), message);
  }
}

TEST(SpecFileTest, MissingFileIsNotFound) {
  auto model = LoadModelSpec("no/such/model.yaml");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(model.status().message(), HasSubstr("no/such/model.yaml: cannot open"));
}

}  // namespace
}  // namespace heterps::config
