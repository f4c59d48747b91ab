// The cluster spec's fields, units, regions and links, and its refusals.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/config/cluster_spec.h"
#include "heterps/config/spec_testing.h"

namespace heterps::config {
namespace {

using testing::BadSpec;
using testing::Edit;

constexpr char kGoodCluster[] = R"(name: c
types:
  - name: cpu
    kind: cpu
    tflops: 1
    mem_gbs: 50
    lookup_mrows: 60
    memory_gib: 32
    network_gbps: 10
    price_per_hour: 0.5
    units: 4
)";

TEST(ClusterSpecTest, ParsesInBaseUnits) {
  auto cluster = ParseClusterSpec(kGoodCluster, "c.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const ResourceType& t = cluster->types[0];
  EXPECT_DOUBLE_EQ(t.flops, 1e12);
  EXPECT_DOUBLE_EQ(t.mem_bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(t.lookup_rate, 60e6);
  EXPECT_DOUBLE_EQ(t.memory, 32.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(t.network, 10e9 / 8);
  EXPECT_DOUBLE_EQ(t.overhead, 0);
  EXPECT_DOUBLE_EQ(t.dp_loss, 0);
  EXPECT_EQ(t.units, 4);
  EXPECT_EQ(t.line, 3);
}

// A second region, eu-west-1, for kGoodCluster under `region: us-east-1`, and the links between
// them.
constexpr char kFarType[] =
    "  - {name: far, kind: gpu, tflops: 1, mem_gbs: 1, lookup_mrows: 1, memory_gib: 1, "
    "network_gbps: 1, price_per_hour: 1, units: 1, region: eu-west-1}\n";
constexpr char kTwoRegionLinks[] =
    "links:\n"
    "  - {from: us-east-1, to: eu-west-1, bandwidth_gbps: 1, latency_ms: 40, egress_per_gb: "
    "0.02}\n"
    "  - {from: eu-west-1, to: us-east-1, bandwidth_gbps: 0.5, latency_ms: 41, egress_per_gb: "
    "0}\n";

TEST(ClusterSpecTest, TypesTakeTheClustersRegionUnlessTheyNameTheirOwn) {
  auto none = ParseClusterSpec(kGoodCluster, "c.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(none->types[0].region, "");
  EXPECT_TRUE(none->Regions().empty());

  const std::string other =
      "  - {name: far, kind: gpu, tflops: 1, mem_gbs: 1, lookup_mrows: 1, memory_gib: 1, "
      "network_gbps: 1, price_per_hour: 1, units: 1, region: eu-west-1}\n"
      "  - {name: near, kind: gpu, tflops: 1, mem_gbs: 1, lookup_mrows: 1, memory_gib: 1, "
      "network_gbps: 1, price_per_hour: 1, units: 1}\n";
  auto two = ParseClusterSpec(
      "region: us-east-1\n" + std::string(kGoodCluster) + other + kTwoRegionLinks, "c.yaml");
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->types.size(), 3u);
  EXPECT_EQ(two->types[0].region, "us-east-1");
  EXPECT_EQ(two->types[1].region, "eu-west-1");
  EXPECT_EQ(two->types[2].region, "us-east-1");
  EXPECT_EQ(two->Regions(), (std::vector<std::string>{"us-east-1", "eu-west-1"}));
  // Where a type is is not what it is: the same machine in another region is the same hardware.
  ResourceType moved = two->types[0];
  moved.region = "ap-northeast-1";
  EXPECT_TRUE(SameHardware(moved, two->types[0]));
}

TEST(ClusterSpecTest, LinksBetweenRegionsAreReadInBaseUnits) {
  auto cluster = ParseClusterSpec(
      "region: us-east-1\n" + std::string(kGoodCluster) + kFarType + kTwoRegionLinks, "c.yaml");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_EQ(cluster->links.size(), 2u);
  const RegionLink* there = cluster->FindLink("us-east-1", "eu-west-1");
  const RegionLink* back = cluster->FindLink("eu-west-1", "us-east-1");
  ASSERT_NE(there, nullptr);
  ASSERT_NE(back, nullptr);
  EXPECT_DOUBLE_EQ(there->bandwidth, 1e9 / 8);
  EXPECT_DOUBLE_EQ(there->latency, 0.040);
  EXPECT_DOUBLE_EQ(there->egress_per_byte, 0.02e-9);
  EXPECT_EQ(there->line, 15);
  EXPECT_DOUBLE_EQ(back->bandwidth, 0.5e9 / 8);
  EXPECT_DOUBLE_EQ(back->egress_per_byte, 0);
  EXPECT_EQ(cluster->FindLink("us-east-1", "us-east-1"), nullptr);
  // One region needs no links.
  auto one = ParseClusterSpec(kGoodCluster, "c.yaml");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_TRUE(one->links.empty());
}

std::vector<BadSpec> BadClusters() {
  const std::string g = kGoodCluster;
  return {
      {"no price", Edit(g, "    price_per_hour: 0.5\n", ""),
       "c.yaml:3: types[0].price_per_hour: missing required field"},
      {"typo in the price", Edit(g, "    price_per_hour: 0.5\n", "    price_per_hr: 0.5\n"),
       "c.yaml:10: types[0].price_per_hr: unknown field, did you mean 'price_per_hour'? (a "
       "required field)"},
      {"zero price", Edit(g, "price_per_hour: 0.5", "price_per_hour: 0"),
       "c.yaml:10: types[0].price_per_hour: must be > 0, got 0"},
      {"bad kind", Edit(g, "kind: cpu", "kind: tpu"),
       "c.yaml:4: types[0].kind: unknown value 'tpu' (expected one of: cpu, gpu)"},
      {"dp_loss of 1", Edit(g, "    units: 4\n", "    units: 4\n    dp_loss: 1\n"),
       "c.yaml:12: types[0].dp_loss: must be < 1, got 1"},
      {"an SSD without its reads", Edit(g, "    units: 4\n", "    units: 4\n    ssd_gib: 100\n"),
       "c.yaml:3: types[0].ssd_kiops: must be > 0 where ssd_gib is (the SSD's random reads/s)"},
      {"negative SSD", Edit(g, "    units: 4\n", "    units: 4\n    ssd_gib: -1\n"),
       "c.yaml:12: types[0].ssd_gib: must be >= 0, got -1"},
      {"fractional units", Edit(g, "units: 4", "units: 2.5"),
       "c.yaml:11: types[0].units: must be a whole number, got '2.5'"},
      {"bad device", Edit(g, "    units: 4\n", "    units: 4\n    local_device: gpu0\n"),
       "c.yaml:12: types[0].local_device: must be 'cpu', 'cuda:N' or 'twin:N', got 'gpu0'"},
      {"device of the wrong kind",
       Edit(g, "    units: 4\n", "    units: 4\n    local_device: cuda:0\n"),
       "c.yaml:12: types[0].local_device: 'cuda:0' is not a device of kind cpu"},
      {"no types", "name: c\ntypes: []\n",
       "c.yaml:2: types: must be a non-empty list of resource types"},
      {"duplicate type",
       g + "  - {name: cpu, kind: gpu, tflops: 1, mem_gbs: 1, lookup_mrows: 1, memory_gib: 1, "
           "network_gbps: 1, price_per_hour: 1, units: 1}\n",
       "c.yaml:12: types[1].name: duplicate type name 'cpu' (first at line 3)"},
      {"unknown field", Edit(g, "    units: 4\n", "    units: 4\n    gpus: 8\n"),
       "c.yaml:12: types[0].gpus: unknown field (expected one of: dp_loss, kind, latency_us, "
       "local_device, lookup_mrows, mem_gbs, memory_gib, name, network_gbps, overhead_us, "
       "price_per_hour, region, ssd_gib, ssd_kiops, tflops, units)"},
      {"a region with a space", Edit(g, "    units: 4\n", "    units: 4\n    region: us east\n"),
       "c.yaml:12: types[0].region: must be letters, digits, '-', '_' or '.', got 'us east'"},
      {"an empty region", Edit(g, "    units: 4\n", "    units: 4\n    region: ''\n"),
       "c.yaml:12: types[0].region: must be letters, digits, '-', '_' or '.', got ''"},
      {"a bad cluster region", "region: eu/west\n" + g,
       "c.yaml:1: region: must be letters, digits, '-', '_' or '.', got 'eu/west'"},
      {"two regions and no links", "region: us-east-1\n" + g + kFarType,
       "c.yaml:1: links: no link from 'us-east-1' to 'eu-west-1': the types are in 2 regions "
       "(us-east-1, eu-west-1), and each ordered pair of them needs one (from, to, "
       "bandwidth_gbps, latency_ms, egress_per_gb)"},
      {"a missing way back",
       "region: us-east-1\n" + g + kFarType +
           Edit(kTwoRegionLinks,
                "  - {from: eu-west-1, to: us-east-1, bandwidth_gbps: 0.5, latency_ms: 41, "
                "egress_per_gb: 0}\n",
                ""),
       "c.yaml:14: links: no link from 'eu-west-1' to 'us-east-1': the types are in 2 regions "
       "(us-east-1, eu-west-1), and each ordered pair of them needs one (from, to, "
       "bandwidth_gbps, latency_ms, egress_per_gb)"},
      {"a link to a region no type is in",
       "region: us-east-1\n" + g + kFarType + Edit(kTwoRegionLinks, "to: eu-west-1", "to: mars-1"),
       "c.yaml:15: links[0].to: no type is in region 'mars-1'; the types' regions: us-east-1, "
       "eu-west-1"},
      {"a link within a region",
       "region: us-east-1\n" + g + kFarType +
           Edit(kTwoRegionLinks, "to: eu-west-1", "to: us-east-1"),
       "c.yaml:15: links[0].to: a link joins two regions, not 'us-east-1' with itself (inside a "
       "region the types' own network figures apply)"},
      {"a second link for a pair",
       "region: us-east-1\n" + g + kFarType + kTwoRegionLinks +
           "  - {from: eu-west-1, to: us-east-1, bandwidth_gbps: 9, latency_ms: 1, "
           "egress_per_gb: 0}\n",
       "c.yaml:17: links[2]: a second link from 'eu-west-1' to 'us-east-1' (first at line 16)"},
      {"a negative egress price",
       "region: us-east-1\n" + g + kFarType +
           Edit(kTwoRegionLinks, "egress_per_gb: 0.02", "egress_per_gb: -0.02"),
       "c.yaml:15: links[0].egress_per_gb: must be >= 0, got -0.02"},
      {"no bandwidth",
       "region: us-east-1\n" + g + kFarType +
           Edit(kTwoRegionLinks, "bandwidth_gbps: 1,", "bandwidth_gbps: 0,"),
       "c.yaml:15: links[0].bandwidth_gbps: must be > 0, got 0"},
      {"links that are not a list", g + "links: {from: a}\n",
       "c.yaml:12: links: must be a list of links between regions (from, to, bandwidth_gbps, "
       "latency_ms, egress_per_gb)"},
  };
}

TEST(ClusterSpecTest, BadSpecsNameFileLineAndField) {
  for (const BadSpec& bad : BadClusters()) {
    auto cluster = ParseClusterSpec(bad.text, "c.yaml");
    ASSERT_FALSE(cluster.ok()) << bad.what;
    EXPECT_EQ(std::string(cluster.status().message()), bad.message) << bad.what;
  }
  EXPECT_GE(BadClusters().size(), 20u);
}

}  // namespace
}  // namespace heterps::config
