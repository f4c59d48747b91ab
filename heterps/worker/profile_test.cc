// The profile of a GPU type with a GPU tier (ProfileOptions::gpu_tier_bytes), on the host twin:
// the layers measured on the device path, and the tier entry's lookups and loads against batches
// whose keys are known: every key new (each lookup a load), the same batch again (no load once it
// is resident), a tier that holds few rows (the rest passing through), and no tier entry where the
// device is the CPU or no tier is asked for.
#include "heterps/worker/profile.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/data/criteo.h"

namespace heterps::worker {
namespace {

constexpr int kBatch = 64;

config::ModelSpec Spec() {
  auto spec = config::LoadModelSpec("examples/models/dlrm-small.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// Batches of kBatch samples shaped as dlrm-small's data; batch i's keys are i * 1e6 + its own
// numbering where `fresh` (no key seen before; a key per 2, 3 or 4 samples by the batch, so that
// the batches' distinct keys differ), the first batch's again otherwise. `distinct` counts each
// batch's distinct keys.
BatchSource Batches(const config::ModelSpec& spec, bool fresh, std::vector<int64_t>* distinct) {
  auto i = std::make_shared<int>(0);
  const int dense = spec.data.dense_features(), slots = spec.data.slots();
  return [=](data::Batch* batch) -> absl::StatusOr<bool> {
    const int b = fresh ? (*i)++ : 0;
    *batch = data::Batch();
    std::set<uint64_t> keys;
    data::Example e;
    for (int r = 0; r < kBatch; ++r) {
      e.label = static_cast<float>(r % 3 == 0);
      e.dense.assign(dense, 0.25f * static_cast<float>(r % 5));
      e.keys.clear();
      e.counts.assign(slots, 1);
      for (int s = 0; s < slots; ++s) {
        // Some repeats within the batch.
        e.keys.push_back(
            data::SlotKey(s, static_cast<uint64_t>(b) * 1000000 + 1 + r / (2 + b % 3)));
        keys.insert(e.keys.back());
      }
      batch->Add(e);
    }
    if (distinct != nullptr) distinct->push_back(static_cast<int64_t>(keys.size()));
    return true;
  };
}

ProfileOptions TierOptions(int64_t bytes) {
  ProfileOptions options;
  options.type = "gpu";
  options.device = "twin:0";
  options.gpu_tier_bytes = bytes;
  options.hold_dense = true;
  options.warmup = 2;
  options.repeats = 3;
  return options;
}

TEST(ProfileTierTest, EveryNewKeyIsLoadedAndEveryLookupCounted) {
  const config::ModelSpec spec = Spec();
  std::vector<int64_t> distinct;
  for (bool lookahead : {true, false}) {
    distinct.clear();
    ProfileOptions options = TierOptions(int64_t{64} << 20);
    options.tier_lookahead = lookahead;
    auto p = ProfileLayers(spec, Batches(spec, true, &distinct), options);
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->profile.tier.size(), 1u);
    const cost::TierEntry& e = p->profile.tier[0];
    EXPECT_EQ(e.type, "gpu");
    EXPECT_EQ(e.lookups_per_batch, kBatch * spec.data.slots());
    // Each timed batch's distinct keys, all of them new and loaded (batches 2, 3 and 4).
    ASSERT_GE(distinct.size(), 5u);
    EXPECT_NE(distinct[2], distinct[3]);
    EXPECT_EQ(e.loaded_rows_per_batch, (distinct[2] + distinct[3] + distinct[4]) / 3.0);
    EXPECT_EQ(e.passed_rows_per_batch, 0);
    EXPECT_TRUE(e.dense_held);
    // The layers the host path measures, each with a time.
    std::vector<std::string> names;
    for (const auto& [name, seconds] : p->medians) {
      names.push_back(name);
      EXPECT_GT(seconds, 0) << name;
    }
    EXPECT_THAT(names, testing::ElementsAre("emb", "bottom.0", "bottom.1", "interact", "top.0",
                                            "top.1", "top.2", "loss"));
  }
}

TEST(ProfileTierTest, ABatchOfResidentKeysLoadsNothing) {
  const config::ModelSpec spec = Spec();
  auto p = ProfileLayers(spec, Batches(spec, false, nullptr), TierOptions(int64_t{64} << 20));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->profile.tier.size(), 1u);
  EXPECT_EQ(p->profile.tier[0].loaded_rows_per_batch, 0);
  EXPECT_EQ(p->profile.tier[0].passed_rows_per_batch, 0);
  EXPECT_EQ(p->profile.tier[0].lookups_per_batch, kBatch * spec.data.slots());
}

TEST(ProfileTierTest, ATierOfFewRowsPassesTheRestThrough) {
  const config::ModelSpec spec = Spec();
  std::vector<int64_t> distinct;
  // The same batch again, but room for a part of its rows: the rest pass through to the
  // servers, every batch.
  auto p = ProfileLayers(spec, Batches(spec, false, &distinct), TierOptions(12 * 1024));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->profile.tier.size(), 1u);
  const cost::TierEntry& e = p->profile.tier[0];
  EXPECT_EQ(e.loaded_rows_per_batch, 0);  // what it holds stays; nothing else fits
  EXPECT_GT(e.passed_rows_per_batch, 0);
  EXPECT_LT(e.passed_rows_per_batch, e.lookups_per_batch);
}

TEST(ProfileTierTest, WithoutATierOrAGpuNoTierEntry) {
  const config::ModelSpec spec = Spec();
  ProfileOptions options = TierOptions(int64_t{64} << 20);
  options.device = "cpu";  // the job's tier is on a GPU; the CPU's rows come from the servers
  auto cpu = ProfileLayers(spec, Batches(spec, true, nullptr), options);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_TRUE(cpu->profile.tier.empty());
  options = TierOptions(0);
  auto twin = ProfileLayers(spec, Batches(spec, true, nullptr), options);
  ASSERT_TRUE(twin.ok()) << twin.status();
  EXPECT_TRUE(twin->profile.tier.empty());
  EXPECT_EQ(twin->medians.size(), cpu->medians.size());
  // Held or not, as asked.
  options = TierOptions(int64_t{64} << 20);
  options.hold_dense = false;
  auto servers = ProfileLayers(spec, Batches(spec, true, nullptr), options);
  ASSERT_TRUE(servers.ok()) << servers.status();
  ASSERT_EQ(servers->profile.tier.size(), 1u);
  EXPECT_FALSE(servers->profile.tier[0].dense_held);
}

}  // namespace
}  // namespace heterps::worker
