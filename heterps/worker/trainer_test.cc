#include "heterps/worker/trainer.h"

#include "gtest/gtest.h"
#include "heterps/data/synthetic.h"

namespace heterps::worker {
namespace {

// Trains `model` for one epoch (one thread, so the run is reproducible) on 300,000 synthetic rows
// of its own data layout, and expects the eval AUC within 0.02 of the teacher's that drew the
// labels (the best any model can expect), and not above it by more than noise.
void ExpectWithinTwoHundredthsOfTheTeachersAuc(const std::string& model, const std::string& file) {
  auto spec = config::LoadModelSpec(model);
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string path = ::testing::TempDir() + "/" + file;
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

// The training issue's bar for a model a user can trust, on Criteo-shaped data.
TEST(TrainerTest, DlrmSmallComesWithinTwoHundredthsOfTheTeachersAuc) {
  ExpectWithinTwoHundredthsOfTheTeachersAuc("examples/models/dlrm-small.yaml", "trainer_test.tsv");
}

// The same bar on a layout of its own: a CSV with a header and a multi-hot column (the
// MovieLens-shaped example), pooled by the mean.
TEST(TrainerTest, AMultiHotModelComesWithinTwoHundredthsOfTheTeachersAuc) {
  ExpectWithinTwoHundredthsOfTheTeachersAuc("examples/models/movielens-genres.yaml",
                                            "trainer_test_multi_hot.csv");
}

}  // namespace
}  // namespace heterps::worker
