#include "heterps/base/call_stats.h"

#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace heterps::base {
namespace {

TEST(CallStatsTest, BucketsFollowTheirUpperBounds) {
  EXPECT_EQ(LatencyBucket(0), 0);
  EXPECT_EQ(LatencyBucket(50e-6), 0);  // a bound belongs to its own bucket ("le")
  EXPECT_EQ(LatencyBucket(51e-6), 1);
  EXPECT_EQ(LatencyBucket(0.003), 6);  // (2.5 ms, 5 ms]
  EXPECT_EQ(LatencyBucket(10.0), 15);
  EXPECT_EQ(LatencyBucket(11.0), 16);  // slower than every bound
}

TEST(CallStatsTest, CountsErrorsAndLatenciesPerMethod) {
  CallStats stats;
  stats.Record("Push", true, absl::Microseconds(30));
  stats.Record("Pull", true, absl::Milliseconds(3));
  stats.Record("Pull", false, absl::Seconds(20));
  const std::vector<MethodStats> s = stats.Snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].method, "Pull");  // sorted
  EXPECT_EQ(s[0].calls, 2);
  EXPECT_EQ(s[0].errors, 1);
  EXPECT_DOUBLE_EQ(s[0].seconds, 20.003);
  ASSERT_EQ(s[0].buckets.size(), kCallLatencyBounds.size() + 1);
  EXPECT_EQ(s[0].buckets[6], 1);
  EXPECT_EQ(s[0].buckets[16], 1);
  EXPECT_EQ(s[1].method, "Push");
  EXPECT_EQ(s[1].buckets[0], 1);
  EXPECT_EQ(s[1].errors, 0);
}

TEST(CallStatsTest, ConcurrentRecordsAreAllCounted) {
  CallStats stats;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&stats, t] {
      for (int i = 0; i < 10000; ++i) {
        stats.Record(t % 2 == 0 ? "A" : "B", i % 10 != 0, absl::Microseconds(i % 2000));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int64_t calls = 0, errors = 0, bucketed = 0;
  for (const MethodStats& m : stats.Snapshot()) {
    calls += m.calls;
    errors += m.errors;
    for (int64_t b : m.buckets) bucketed += b;
  }
  EXPECT_EQ(calls, 40000);
  EXPECT_EQ(errors, 4000);
  EXPECT_EQ(bucketed, 40000);
}

}  // namespace
}  // namespace heterps::base
