#include "heterps/worker/trainer.h"

#include "gtest/gtest.h"
#include "heterps/data/synthetic.h"

namespace heterps::worker {
namespace {

// The training issue's bar for a model a user can trust: on a few hundred thousand rows of
// synthetic data, dlrm-small trained for one epoch gets within 0.02 of the AUC of the teacher that
// drew the labels (the best any model can expect). One thread, so the run is reproducible.
TEST(TrainerTest, DlrmSmallComesWithinTwoHundredthsOfTheTeachersAuc) {
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string path = ::testing::TempDir() + "/trainer_test.tsv";
  data::SyntheticOptions data;
  data.rows = 300000;
  data.seed = 1;
  auto teacher = data::WriteSynthetic(data, path);
  ASSERT_TRUE(teacher.ok()) << teacher.status();

  TrainOptions options;
  options.files = {path};
  options.batch_size = 256;
  options.eval_fraction = 0.1;
  auto result = Train(*spec, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->eval_samples, 30000);
  EXPECT_GE(result->eval_auc, teacher->teacher_auc - 0.02)
      << "eval logloss " << result->eval_loss << ", train logloss " << result->train_loss;
  EXPECT_LT(result->eval_auc, teacher->teacher_auc + 0.01);
}

// The same bar on a layout of its own: a CSV with a header and a multi-hot column (the
// MovieLens-shaped example), pooled by the mean.
TEST(TrainerTest, AMultiHotModelComesWithinTwoHundredthsOfTheTeachersAuc) {
  auto spec = config::LoadModelSpec("examples/models/movielens-genres.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string path = ::testing::TempDir() + "/trainer_test_multi_hot.csv";
  data::SyntheticOptions data;
  data.rows = 300000;
  data.seed = 1;
  data.schema = spec->data;
  auto teacher = data::WriteSynthetic(data, path);
  ASSERT_TRUE(teacher.ok()) << teacher.status();

  TrainOptions options;
  options.files = {path};
  options.batch_size = 256;
  options.eval_fraction = 0.1;
  auto result = Train(*spec, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->eval_samples, 30000);
  EXPECT_GE(result->eval_auc, teacher->teacher_auc - 0.02)
      << "eval logloss " << result->eval_loss << ", train logloss " << result->train_loss;
  EXPECT_LT(result->eval_auc, teacher->teacher_auc + 0.01);
}

}  // namespace
}  // namespace heterps::worker
