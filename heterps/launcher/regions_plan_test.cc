// A job across regions (MakeRegionsPlan): each region's plan is the one MakePlan makes for its
// data region at its share (of the limit, the samples and every step's batch), a region runs at
// the pace its syncs allow, and the regions step together at the slowest one's pace.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "heterps/launcher/planning.h"

namespace heterps::launcher {
namespace {

PlanRequest Request(double throughput) {
  PlanRequest request;
  request.model =
      *config::LoadModelSpec(std::string(HETERPS_SOURCE_DIR) + "/examples/models/dlrm-small.yaml");
  request.cluster = *config::LoadClusterSpec(std::string(HETERPS_SOURCE_DIR) +
                                             "/examples/clusters/fleet-64.yaml");
  request.workload = {throughput, 1e9};
  return request;
}

TEST(RegionsPlanTest, EachRegionIsPlannedAsItsDataRegionAtItsShare) {
  const PlanRequest request = Request(200000);
  auto made = MakeRegionsPlan(request, {{"us-east-1", 0.75}, {"ap-northeast-1", 0.25}}, 1000);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->regions.size(), 2u);
  EXPECT_TRUE(made->feasible());
  double usd = made->sync.egress_usd, seconds = 0;
  const int64_t b = request.model.batch_size;
  const int64_t batches[2] = {b * 3 / 4, b / 4};  // every step's batch in its shares
  for (size_t r = 0; r < 2; ++r) {
    PlanRequest alone = request;
    alone.rules.data_region = made->shares[r].region;
    alone.model.batch_size = batches[r];
    alone.workload.throughput_limit = 200000 * made->shares[r].share;
    alone.workload.samples = 1e9 * made->shares[r].share;
    auto expected = MakePlan(alone);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const sched::PricedPlan& plan = made->regions[r].plan;
    EXPECT_EQ(made->regions[r].model.batch(), batches[r]);
    EXPECT_DOUBLE_EQ(plan.cost_usd, expected->plan.cost_usd);
    EXPECT_DOUBLE_EQ(plan.throughput, expected->plan.throughput);
    EXPECT_EQ(made->regions[r].run.data_region, made->shares[r].region);
    // At 1000 steps a sync, the plans' own pace: the slower of the two holds both.
    seconds = std::max(seconds, alone.workload.samples / plan.throughput);
  }
  for (size_t r = 0; r < 2; ++r) {
    const sched::PricedPlan& plan = made->regions[r].plan;
    EXPECT_DOUBLE_EQ(made->job_seconds[r], seconds);
    EXPECT_DOUBLE_EQ(made->throughput[r], 1e9 * made->shares[r].share / seconds);
    EXPECT_LE(made->throughput[r], plan.throughput * (1 + 1e-12));
    EXPECT_NEAR(made->cost_usd[r], plan.egress_usd + plan.cost_per_hour_usd * seconds / 3600,
                1e-9 * made->cost_usd[r]);
    usd += made->cost_usd[r];
  }
  EXPECT_DOUBLE_EQ(made->total_cost_usd(), usd);
  EXPECT_DOUBLE_EQ(made->total_job_seconds(), seconds);
}

TEST(RegionsPlanTest, ARegionRunsAtThePaceOfItsSyncs) {
  // A sync every step: each takes longer than a step of the plan, not than the limit allows.
  auto made = MakeRegionsPlan(Request(20000), {{"us-east-1", 0.5}, {"eu-west-1", 0.5}}, 1);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(made->feasible());
  double seconds = 0;
  for (size_t r = 0; r < 2; ++r) {
    const sched::PricedPlan& plan = made->regions[r].plan;
    const double batch = static_cast<double>(made->regions[r].model.batch());
    EXPECT_EQ(batch, 1024);  // half of every step's 2048
    double slowest = 0;  // the longest sync this region waits for
    for (const cost::SyncFlow& flow : made->sync.flows) {
      if (flow.cadence == made->shares[r].region) {
        slowest = std::max(slowest, flow.seconds_per_sync);
      }
    }
    const double pace = batch / slowest;
    ASSERT_LT(pace, plan.throughput);
    EXPECT_GE(pace, 10000);
    seconds = std::max(seconds, 0.5e9 / pace);
  }
  for (size_t r = 0; r < 2; ++r) {
    const sched::PricedPlan& plan = made->regions[r].plan;
    EXPECT_DOUBLE_EQ(made->throughput[r], 0.5e9 / seconds);
    EXPECT_DOUBLE_EQ(made->job_seconds[r], seconds);
    EXPECT_NEAR(made->cost_usd[r], plan.egress_usd + plan.cost_per_hour_usd * seconds / 3600,
                1e-9 * made->cost_usd[r]);
  }
}

TEST(RegionsPlanTest, EagerWindowsAddTheirSecondsToEveryStep) {
  // Every 10 steps, and eagerly after the 9 between: on each link, a tenth of the K-th steps'
  // sync and nine tenths of an eager one's a step, the links side by side.
  const std::vector<cost::DataShare> shares = {{"us-east-1", 0.5}, {"eu-west-1", 0.5}};
  auto windows = MakeRegionsPlan(Request(20000), shares, 10);
  auto eager = MakeRegionsPlan(Request(20000), shares, 10, /*eager=*/true);
  ASSERT_TRUE(windows.ok() && eager.ok()) << eager.status();
  EXPECT_TRUE(eager->eager);
  EXPECT_GT(eager->sync.bytes, windows->sync.bytes);
  EXPECT_GT(eager->sync.egress_usd, windows->sync.egress_usd);
  for (size_t r = 0; r < 2; ++r) {
    std::map<std::pair<std::string, std::string>, double> link;
    for (const cost::SyncFlow& flow : eager->sync.flows) {
      if (flow.cadence == shares[r].region) {
        link[{flow.from, flow.to}] +=
            flow.seconds_per_sync * (flow.eager ? 0.9 : 0.1);
      }
    }
    double per_step = 0;
    for (const auto& [pair, seconds] : link) per_step = std::max(per_step, seconds);
    const double batch = static_cast<double>(eager->regions[r].model.batch());
    EXPECT_LE(eager->throughput[r],
              std::min(eager->regions[r].plan.throughput, batch / per_step) * (1 + 1e-12));
    EXPECT_LE(eager->throughput[r], windows->throughput[r]);
  }
}

TEST(RegionsPlanTest, AJobWithADataRegionOfItsOwnIsRefused) {
  PlanRequest request = Request(20000);
  request.rules.data_region = "us-east-1";
  auto made = MakeRegionsPlan(request, {{"us-east-1", 0.5}, {"eu-west-1", 0.5}}, 10);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace heterps::launcher
