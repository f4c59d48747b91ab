#include "heterps/base/json.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace heterps::base {
namespace {

using ::testing::HasSubstr;

TEST(JsonTest, ReadsCheckedFields) {
  auto root = JsonObject::Parse(
      R"({"step": 15, "rate": 0.5, "name": "job", "on": true, "stages": [{"units": 2}],
          "names": ["a", "b"], "losses": [0.5, 1]})",
      "f.json");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root->Int("step"), 15);
  EXPECT_EQ(*root->Double("rate"), 0.5);
  EXPECT_EQ(*root->Double("step"), 15.0);
  EXPECT_EQ(*root->String("name"), "job");
  EXPECT_TRUE(*root->Bool("on"));
  auto stages = root->Objects("stages");
  ASSERT_TRUE(stages.ok());
  EXPECT_EQ(*(*stages)[0].Int("units"), 2);
  EXPECT_THAT(*root->Strings("names"), ::testing::ElementsAre("a", "b"));
  EXPECT_THAT(*root->Doubles("losses"), ::testing::ElementsAre(0.5, 1.0));
  EXPECT_EQ(*root->IntOr("absent", 7), 7);
}

TEST(JsonTest, EveryMistakeNamesTheFileAndTheField) {
  auto root = JsonObject::Parse(
      R"({"step": "ten", "units": 1.5, "neg": -3, "stages": [{"units": "x"}], "s": 3})", "c.json");
  ASSERT_TRUE(root.ok());
  auto step = root->Int("step");
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(step.status().message(), HasSubstr("c.json: step: expected an integer"));
  EXPECT_THAT(root->Int("units").status().message(), HasSubstr("units: expected an integer"));
  EXPECT_THAT(root->Int("neg", 0).status().message(), HasSubstr("neg: -3 is out of range"));
  EXPECT_THAT(root->Int("missing").status().message(), HasSubstr("missing: missing"));
  EXPECT_THAT(root->String("s").status().message(), HasSubstr("s: expected a string"));
  auto stages = root->Objects("stages");
  ASSERT_TRUE(stages.ok());
  EXPECT_THAT((*stages)[0].Int("units").status().message(),
              HasSubstr("c.json: stages[0].units: expected an integer"));
  EXPECT_THAT(root->IntOr("step", 0).status().message(), HasSubstr("step"));
}

TEST(JsonTest, UnknownFieldsAreNamed) {
  auto root = JsonObject::Parse(R"({"units": 2, "pirce": 1.5})", "s.json");
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->OnlyKeys({"units", "pirce"}).ok());
  const absl::Status status = root->OnlyKeys({"units", "price"});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("s.json: pirce: unknown field (expected one of: units, "
                                          "price)"));
}

TEST(JsonTest, DocumentsThatAreNotObjects) {
  EXPECT_THAT(JsonObject::Parse("garbage", "g.json").status().message(),
              HasSubstr("g.json: not JSON"));
  EXPECT_THAT(JsonObject::Parse("", "e.json").status().message(), HasSubstr("e.json: not JSON"));
  EXPECT_THAT(JsonObject::Parse("[1]", "a.json").status().message(),
              HasSubstr("expected a JSON object"));
  // A number too large for a double is refused, when parsed or when read.
  auto huge = JsonObject::Parse("{\"x\": 1e999}", "n.json");
  if (huge.ok()) {
    EXPECT_THAT(huge->Double("x").status().message(), HasSubstr("n.json: x"));
  } else {
    EXPECT_THAT(huge.status().message(), HasSubstr("n.json"));
  }
}

}  // namespace
}  // namespace heterps::base
