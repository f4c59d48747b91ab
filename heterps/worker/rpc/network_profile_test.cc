#include "heterps/worker/rpc/network_profile.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "heterps/config/model_spec.h"
#include "heterps/cost/cost_model.h"

namespace heterps::worker::rpc {
namespace {

// A point whose one-unit network time (k = 1, no loss) is `net`.
NetworkPoint Point(int64_t batch, double bytes, double messages, double net) {
  NetworkPoint p;
  p.batch = batch;
  p.bytes = bytes;
  p.messages = messages;
  p.layer_seconds = 0.01;
  p.step_seconds = 0.01 + net;
  return p;
}

TEST(NetworkProfileTest, FitRecoversTheRateAndTheLatency) {
  // 4 messages of 0.1 ms and 100 MB/s.
  const auto net = [](double bytes) { return 4 * 1e-4 + bytes / 1e8; };
  const NetworkFit w =
      FitNetwork({Point(2048, 3e6, 4, net(3e6)), Point(512, 1e6, 4, net(1e6))}, 1, 0);
  EXPECT_EQ(w.fit, "two points");
  EXPECT_NEAR(w.bytes_per_second, 1e8, 1e-3);
  EXPECT_NEAR(w.seconds_per_message, 1e-4, 1e-12);
}

TEST(NetworkProfileTest, FitCountsTheReplicasAndTheirLoss) {
  // Measured with 2 replicas at beta 0.25: one unit's time per batch is step * 2 / 1.25.
  NetworkPoint big = Point(2048, 3e6, 4, 0), small = Point(512, 1e6, 4, 0);
  big.step_seconds = 0.05;
  small.step_seconds = 0.03;
  const NetworkFit w = FitNetwork({big, small}, 2, 0.25);
  ASSERT_EQ(w.network_seconds.size(), 2u);
  EXPECT_NEAR(w.network_seconds[0], 0.05 * 2 / 1.25 - 0.01, 1e-15);
  EXPECT_NEAR(w.network_seconds[1], 0.03 * 2 / 1.25 - 0.01, 1e-15);
  EXPECT_EQ(w.fit, "two points");
  EXPECT_NEAR(3e6 / w.bytes_per_second + 4 * w.seconds_per_message, w.network_seconds[0], 1e-15);
  EXPECT_NEAR(1e6 / w.bytes_per_second + 4 * w.seconds_per_message, w.network_seconds[1], 1e-15);
}

TEST(NetworkProfileTest, DegenerateFitsKeepEveryFigureValid) {
  // The smaller batch measured slower (noise): latency only, the bytes free.
  NetworkFit w = FitNetwork({Point(2048, 3e6, 4, 0.010), Point(512, 1e6, 4, 0.012)}, 1, 0);
  EXPECT_EQ(w.fit, "latency only");
  EXPECT_NEAR(w.seconds_per_message, 0.003, 1e-12);
  EXPECT_GT(w.bytes_per_second, 1e12);
  // The line through the points passes below zero: bytes only, through the full batch.
  w = FitNetwork({Point(2048, 3e6, 4, 0.030), Point(512, 2e6, 4, 0.001)}, 1, 0);
  EXPECT_EQ(w.fit, "bytes only");
  EXPECT_DOUBLE_EQ(w.seconds_per_message, 0);
  EXPECT_NEAR(w.bytes_per_second, 1e8, 1e-3);
}

// The real thing: a server on loopback, two replicas' steps through it. The cost model, given the
// fitted figures, predicts the measured step of a two-unit stage of the whole model at both batch
// sizes.
TEST(NetworkProfileTest, TheModelPredictsTheMeasuredStepOverTheNetwork) {
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  NetworkProfileOptions options;
  options.warmup = 1;
  options.repeats = 3;
  options.replicas = 2;
  int calls = 0;
  options.progress = [&](int done, int total) {
    EXPECT_EQ(done, calls++);
    EXPECT_EQ(total, 16);
  };
  auto points = ProfileNetwork(*spec, 256, options);
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_EQ(calls, 16);
  ASSERT_EQ(points->size(), 2u);
  EXPECT_EQ((*points)[0].batch, 256);
  EXPECT_EQ((*points)[1].batch, 64);
  for (const NetworkPoint& p : *points) {
    EXPECT_GT(p.layer_seconds, 0);
    EXPECT_GT(p.step_seconds, 0);
    EXPECT_GT(p.bytes, 0);
    EXPECT_EQ(p.messages, 4);  // rows and dense weights, each pulled and pushed
  }
  const double beta = 0.05;
  const NetworkFit w = FitNetwork(*points, 2, beta);
  EXPECT_GT(w.bytes_per_second, 0);
  EXPECT_TRUE(std::isfinite(w.bytes_per_second));
  EXPECT_GE(w.seconds_per_message, 0);

  config::ClusterSpec cluster;
  cluster.types.emplace_back();
  cluster.types.back().name = "host-cpu";
  cluster.types.back().dp_loss = beta;
  cost::Profile profile{spec->name, 0, "test", {}, {}, {}};
  profile.network.push_back({"host-cpu", w.bytes_per_second, w.seconds_per_message});
  for (size_t i = 0; i < points->size(); ++i) {
    const NetworkPoint& p = (*points)[i];
    config::ModelSpec at = *spec;
    at.batch_size = p.batch;
    profile.batch_size = p.batch;
    auto model = cost::CostModel::Create(at, cluster, cost::ColocatedWorkload(1, 1), &profile);
    ASSERT_TRUE(model.ok()) << model.status();
    const double comm = model->Stage(0, model->num_layers() - 1, 0).comm;
    if (w.fit == "two points") {
      EXPECT_NEAR(comm, w.network_seconds[i], 1e-9 + 1e-9 * w.network_seconds[i]) << p.batch;
      // Two units with the layers' measured time and this DT: the measured step.
      if (w.network_seconds[i] > 0) {
        EXPECT_NEAR(cost::CostModel::ExecSeconds(p.layer_seconds + comm, beta, 2), p.step_seconds,
                    1e-9)
            << p.batch;
      }
    } else if (i == 0) {
      EXPECT_GE(comm, 0.999 * w.network_seconds[i]) << w.fit;
    }
  }

  // The layers' time of the given batch, when the caller has it, is not measured again; an
  // asynchronous job's steps push and commit nothing.
  options.warmup = 0;
  options.repeats = 1;
  options.synchronous = false;
  options.layer_seconds = 0.5;
  int total = 0;
  options.progress = [&](int, int t) { total = t; };
  points = ProfileNetwork(*spec, 256, options);
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_EQ(total, 3);
  EXPECT_EQ((*points)[0].layer_seconds, 0.5);
  EXPECT_NE((*points)[1].layer_seconds, 0.5);
  EXPECT_GT((*points)[0].step_seconds, 0);
}

// A GPU type with a tier (the host twin here): one replica's step on the device path through a
// server on loopback; the points' bytes are the tier's traffic (the rows it moved, no dense
// weights); only one replica of a synchronous job, on a GPU's device.
TEST(NetworkProfileTest, ATiersStepIsMeasuredOnTheDevicePath) {
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  NetworkProfileOptions options;
  options.warmup = 1;
  options.repeats = 3;
  options.tier.device = "twin:0";
  options.tier.gpu_tier_bytes = int64_t{64} << 20;
  options.tier.hold_dense = true;
  auto points = ProfileNetwork(*spec, 256, options);
  ASSERT_TRUE(points.ok()) << points.status();
  ASSERT_EQ(points->size(), 2u);
  NetworkProfileOptions plain;
  plain.warmup = 0;
  plain.repeats = 1;
  auto without = ProfileNetwork(*spec, 256, plain);
  ASSERT_TRUE(without.ok()) << without.status();
  for (size_t i = 0; i < points->size(); ++i) {
    const NetworkPoint& p = (*points)[i];
    EXPECT_GT(p.layer_seconds, 0);
    EXPECT_GT(p.step_seconds, 0);
    // The tier's rows (random batches: most keys new, each loaded with its Adagrad state and
    // written back), no dense weights: the rows' bytes are not the servers' pulls and pushes.
    EXPECT_GT(p.bytes, 0);
    EXPECT_NE(p.bytes, (*without)[i].bytes);
    EXPECT_EQ(p.messages, 2);
  }
  const NetworkFit w = FitNetwork(*points, 1, 0);
  EXPECT_GT(w.bytes_per_second, 0);
  EXPECT_GE(w.seconds_per_message, 0);
  // One replica of a synchronous job only.
  options.replicas = 2;
  EXPECT_EQ(ProfileNetwork(*spec, 256, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.replicas = 1;
  options.synchronous = false;
  EXPECT_EQ(ProfileNetwork(*spec, 256, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A device that is not a GPU's: named.
  options.synchronous = true;
  options.tier.device = "cpu";
  auto cpu = ProfileNetwork(*spec, 256, options);
  ASSERT_FALSE(cpu.ok());
  EXPECT_NE(cpu.status().message().find("'cpu'"), std::string::npos) << cpu.status();
}

// Criteo lines (label, 13 counts, 26 hex ids) into a temporary file.
std::string CriteoFile(const std::string& name, int lines) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream out(path);
  for (int i = 0; i < lines; ++i) {
    out << (i % 3 == 0 ? 1 : 0);
    for (int d = 0; d < 13; ++d) out << '\t' << (i * 7 + d) % 50;
    for (int s = 0; s < 26; ++s) out << '\t' << std::hex << (0x1000 + i * 31 + s) << std::dec;
    out << '\n';
  }
  return path;
}

// A file shorter than the batch still gives full batches, from its start again; a file of no
// line is an error naming it.
TEST(NetworkProfileTest, FileBatchesAreFullAndStartOver) {
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string path = CriteoFile("heterps_network_short.tsv", 10);
  BatchSource next = FileBatches(*spec, {path}, 4, data::BadLinePolicy::kStop);
  data::Batch batch;
  std::vector<float> labels;
  for (int i = 0; i < 6; ++i) {
    auto more = next(&batch);
    ASSERT_TRUE(more.ok()) << more.status();
    ASSERT_TRUE(*more);
    ASSERT_EQ(batch.size, 4);
    labels.insert(labels.end(), batch.labels.begin(), batch.labels.end());
  }
  // Lines 0..9, then 0..9 again, ...: line i's label is 1 when i % 3 == 0.
  for (size_t i = 0; i < labels.size(); ++i) EXPECT_EQ(labels[i], (i % 10) % 3 == 0 ? 1 : 0) << i;

  // The network profile on that file at a batch above its length: every step full.
  NetworkProfileOptions options;
  options.warmup = 0;
  options.repeats = 1;
  options.replicas = 2;
  options.batches = [&](int size) {
    return FileBatches(*spec, {path}, size, data::BadLinePolicy::kStop);
  };
  auto points = ProfileNetwork(*spec, 64, options);
  ASSERT_TRUE(points.ok()) << points.status();
  EXPECT_GT((*points)[0].step_seconds, 0);

  const std::string empty = CriteoFile("heterps_network_empty.tsv", 0);
  next = FileBatches(*spec, {empty}, 4, data::BadLinePolicy::kStop);
  auto none = next(&batch);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find(empty), std::string::npos) << none.status();
  std::filesystem::remove(path);
  std::filesystem::remove(empty);
}

}  // namespace
}  // namespace heterps::worker::rpc
