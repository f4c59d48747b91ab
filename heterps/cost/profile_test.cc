// A profile file to and from JSON: every field kept, a bad value named by its path.
#include "heterps/cost/profile.h"

#include <string>

#include "gtest/gtest.h"

namespace heterps::cost {
namespace {

TEST(ProfileTest, JsonRoundTrip) {
  Profile p{"tiny", 100, "host", {{"fc0", "box", 1.5e-3}, {"fc1", "box", 2e-4}}, {}, {}};
  auto back = ParseProfile(ProfileToJson(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->entries.size(), 2u);
  EXPECT_TRUE(back->network.empty());
  p.network = {{"box", 2.5e8, 3e-4}, {"other", 1e9, 0}};
  back = ParseProfile(ProfileToJson(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->network.size(), 2u);
  EXPECT_EQ(back->network[1].type, "other");
  EXPECT_DOUBLE_EQ(back->network[0].bytes_per_second, 2.5e8);
  EXPECT_DOUBLE_EQ(back->network[0].seconds_per_message, 3e-4);
  auto bad_network = ParseProfile(R"({"format": "heterps-profile-v1", "model": "m", "batch_size": 8,
                                   "entries": [], "network": [{"type": "b", "bytes_per_second": 0,
                                                            "seconds_per_message": 0}]})",
                                  "p.json");
  ASSERT_FALSE(bad_network.ok());
  EXPECT_EQ(bad_network.status().message(),
            "p.json: network[0].bytes_per_second: must be a positive number");
  EXPECT_EQ(back->entries[1].layer, "fc1");
  EXPECT_DOUBLE_EQ(back->entries[0].seconds_per_batch, 1.5e-3);
  auto bad = ParseProfile(R"({"format": "heterps-profile-v1", "model": "m", "batch_size": 8,
                              "entries": [{"layer": "a", "type": "b", "seconds_per_batch": -1}]})",
                          "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(),
            "p.json: entries[0].seconds_per_batch: must be a positive number");
  EXPECT_FALSE(ParseProfile("{not json", "p.json").ok());
}

// A GPU tier's entries: kept through JSON; rows beyond the lookups, or a missing field, named.
TEST(ProfileTest, TierEntriesRoundTripAndTheirErrorsAreNamed) {
  Profile p{
      "tiny", 100, "host", {{"fc0", "gpu", 1e-3}}, {}, {{"gpu", 53248, 1210.5, 3, true, 4 << 20}}};
  auto back = ParseProfile(ProfileToJson(p), "p.json");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->tier.size(), 1u);
  EXPECT_EQ(back->tier[0].type, "gpu");
  EXPECT_DOUBLE_EQ(back->tier[0].lookups_per_batch, 53248);
  EXPECT_DOUBLE_EQ(back->tier[0].loaded_rows_per_batch, 1210.5);
  EXPECT_DOUBLE_EQ(back->tier[0].passed_rows_per_batch, 3);
  EXPECT_TRUE(back->tier[0].dense_held);
  EXPECT_EQ(back->tier[0].tier_bytes, 4 << 20);
  p.tier.clear();
  EXPECT_EQ(ProfileToJson(p).find("\"tier\""), std::string::npos);
  const std::string head = R"({"format": "heterps-profile-v1", "model": "m", "batch_size": 8,
                               "entries": [], "tier": )";
  auto beyond = ParseProfile(head + R"([{"type": "g", "lookups_per_batch": 10,
      "loaded_rows_per_batch": 6, "passed_rows_per_batch": 5, "dense_held": false}]})",
                             "p.json");
  ASSERT_FALSE(beyond.ok());
  EXPECT_EQ(beyond.status().message(),
            "p.json: tier[0].passed_rows_per_batch: must be a number >= 0 that with "
            "loaded_rows_per_batch is at most lookups_per_batch");
  auto negative = ParseProfile(head + R"([{"type": "g", "lookups_per_batch": 10,
      "loaded_rows_per_batch": -1, "passed_rows_per_batch": 0, "dense_held": false}]})",
                               "p.json");
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(),
            "p.json: tier[0].loaded_rows_per_batch: must be a number >= 0");
  auto missing = ParseProfile(head + R"([{"type": "g", "lookups_per_batch": 10,
      "loaded_rows_per_batch": 1, "passed_rows_per_batch": 0}]})",
                              "p.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "p.json: tier[0].dense_held: missing required field");
  auto fraction = ParseProfile(head + R"([{"type": "g", "lookups_per_batch": 10,
      "loaded_rows_per_batch": 1, "passed_rows_per_batch": 0, "dense_held": true,
      "tier_bytes": 1.5}]})",
                               "p.json");
  ASSERT_FALSE(fraction.ok());
  EXPECT_EQ(fraction.status().message(), "p.json: tier[0].tier_bytes: must be a whole number >= 0");
  const std::string entry = R"({"type": "g", "lookups_per_batch": 10, "loaded_rows_per_batch": 1,
      "passed_rows_per_batch": 0, "dense_held": true})";
  auto twice = ParseProfile(head + "[" + entry + ", " + entry + "]}", "p.json");
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(), "p.json: tier[1].type: a second tier entry for g");
}

// The network entries' key was called "wire" before: files with it are read, their errors name
// it, and a file with both keys is refused.
TEST(ProfileTest, ReadsTheNetworkKeysOldName) {
  const std::string head = R"({"format": "heterps-profile-v1", "model": "m", "batch_size": 8,
                               "entries": [], )";
  const std::string entry = R"([{"type": "b", "bytes_per_second": 2e8, "seconds_per_message": 0}])";
  auto old = ParseProfile(head + R"("wire": )" + entry + "}", "p.json");
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_EQ(old->network.size(), 1u);
  EXPECT_DOUBLE_EQ(old->network[0].bytes_per_second, 2e8);
  EXPECT_NE(ProfileToJson(*old).find("\"network\""), std::string::npos);
  auto old_bad = ParseProfile(head + R"("wire": [{"type": "b"}]})", "p.json");
  ASSERT_FALSE(old_bad.ok());
  EXPECT_EQ(old_bad.status().message(), "p.json: wire[0].bytes_per_second: missing required field");
  auto both =
      ParseProfile(head + R"("wire": )" + entry + R"(, "network": )" + entry + "}", "p.json");
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("p.json: wire: the old name"), std::string::npos);
}

}  // namespace
}  // namespace heterps::cost
