// A job across regions (MakeRegionsPlan): each region's plan is the one MakePlan makes for its
// data region at its share, and a region runs at the pace its syncs allow.
#include <string>

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
  double usd = made->sync.egress_usd;
  for (size_t r = 0; r < 2; ++r) {
    PlanRequest alone = request;
    alone.rules.data_region = made->shares[r].region;
    alone.workload.throughput_limit = 200000 * made->shares[r].share;
    alone.workload.samples = 1e9 * made->shares[r].share;
    auto expected = MakePlan(alone);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const sched::PricedPlan& plan = made->regions[r].plan;
    EXPECT_DOUBLE_EQ(plan.cost_usd, expected->plan.cost_usd);
    EXPECT_DOUBLE_EQ(plan.throughput, expected->plan.throughput);
    EXPECT_EQ(made->regions[r].run.data_region, made->shares[r].region);
    // At 1000 steps a sync the plans' own pace.
    EXPECT_DOUBLE_EQ(made->throughput[r], plan.throughput);
    EXPECT_DOUBLE_EQ(made->cost_usd[r], plan.cost_usd);
    usd += made->cost_usd[r];
  }
  EXPECT_DOUBLE_EQ(made->total_cost_usd(), usd);
  EXPECT_DOUBLE_EQ(made->total_job_seconds(), std::max(made->job_seconds[0], made->job_seconds[1]));
}

TEST(RegionsPlanTest, ARegionRunsAtThePaceOfItsSyncs) {
  // A sync every step: each takes longer than a step of the plan, not than the limit allows.
  auto made = MakeRegionsPlan(Request(20000), {{"us-east-1", 0.5}, {"eu-west-1", 0.5}}, 1);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(made->feasible());
  for (size_t r = 0; r < 2; ++r) {
    const sched::PricedPlan& plan = made->regions[r].plan;
    double slowest = 0;  // the longest sync on this region's pace
    for (const cost::SyncFlow& flow : made->sync.flows) {
      if (flow.cadence == made->shares[r].region) {
        slowest = std::max(slowest, flow.seconds_per_sync);
      }
    }
    const double pace = static_cast<double>(made->regions[r].model.batch()) / slowest;
    ASSERT_LT(pace, plan.throughput);
    EXPECT_GE(pace, 10000);
    EXPECT_DOUBLE_EQ(made->throughput[r], pace);
    EXPECT_DOUBLE_EQ(made->job_seconds[r], 0.5e9 / pace);
    EXPECT_NEAR(made->cost_usd[r], plan.cost_per_hour_usd * 0.5e9 / pace / 3600,
                1e-9 * made->cost_usd[r]);
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
