// The GPU tier in lock-step with the parameter server alone: every optimizer, windows smaller
// than the working set, budgets of a few rows, pushes and accumulated parts. The oracle is the
// same tables without the tier. On the host twin the tier's arithmetic is the servers' to the
// bit; on a CUDA GPU the device's float arithmetic (fused multiply-adds, its sqrt and pow) may
// differ in the last bits, so values are compared to 1e-4 relative there, the rest (which rows,
// update counts) exactly. Built twice (CMakeLists.txt): gpu_tier_test on the twin, and
// gpu_tier_cuda_test (HETERPS_TIER_TEST_CUDA) with the lock-step cases on cuda:0 alone, skipped
// and reported so where there is no GPU.
#include "heterps/ps/gpu/gpu_tier.h"

#include <omp.h>

#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/ps/checkpoint.h"
#include "heterps/ps/forwarding_client.h"
#include "heterps/ps/gpu/tier_engine.h"
#include "heterps/ps/in_process_client.h"

namespace heterps::ps {
namespace {

constexpr int kDim = 8;

// The device the lock-step cases run on.
#if defined(HETERPS_TIER_TEST_CUDA)
constexpr absl::string_view kDevice = "cuda:0";
#else
constexpr absl::string_view kDevice = "twin:0";
#endif

// The host twin's OpenMP backend on 16 threads whatever this host has, so that Thrust's
// allocations from inside its parallel regions (a sort's merges) meet as they do on a 16-core
// machine (a scratch allocator that was not thread-safe failed there and passed on 2 cores).
const int kThreads = [] {
  omp_set_num_threads(16);
  return 16;
}();

SparseTableOptions Options(OptimizerKind kind) {
  SparseTableOptions o;
  o.dim = kDim;
  o.optimizer.kind = kind;
  o.optimizer.learning_rate = 0.05f;
  o.seed = 11;
  o.lock_shards = 2;
  return o;
}

// Every row of table 0 on every server.
std::map<uint64_t, RowData> Rows(InProcessPsClient& client) {
  std::map<uint64_t, RowData> rows;
  for (int s = 0; s < client.num_servers(); ++s) {
    EXPECT_TRUE(client.sparse(0, s)
                    ->ForEachRow([&](uint64_t key, const RowData& row) {
                      rows[key] = row;
                      return absl::OkStatus();
                    })
                    .ok());
  }
  return rows;
}

uint64_t Digest(InProcessPsClient& client) {
  uint64_t digest = 0;
  for (int s = 0; s < client.num_servers(); ++s) digest += *DigestTables(client.Tables(s));
  return digest;
}

struct Case {
  OptimizerKind kind;
  int64_t budget_rows;  // rows the tier may hold
  bool accumulate;      // gradients as accumulated parts, committed per step
};

// Whether `got` equals `want`: to the bit, or to `relative` of the larger magnitude (and 1e-6).
::testing::AssertionResult Same(const std::vector<float>& got, const std::vector<float>& want,
                                double relative) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = want[i];
    const double bound = relative * std::max({std::abs(a), std::abs(b), 1e-6});
    if (relative == 0 ? got[i] != want[i] : std::abs(a - b) > bound) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a << " against " << b;
    }
  }
  return ::testing::AssertionSuccess();
}

// Whether the servers behind a tier, written back, hold what `reference` holds alone: every row's
// value, state and update count (to `relative` as Same), and on the twin the same digest.
::testing::AssertionResult SameRows(InProcessPsClient& behind, InProcessPsClient& reference,
                                    double relative) {
  const auto a = Rows(reference), b = Rows(behind);
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << b.size() << " rows against " << a.size();
  }
  for (const auto& [key, row] : a) {
    const RowData& other = b.at(key);
    ::testing::AssertionResult same = Same(other.value, row.value, relative);
    if (same) same = Same(other.state, row.state, relative);
    if (!same) return same << " (key " << key << ")";
    if (other.steps != row.steps) {
      return ::testing::AssertionFailure()
             << "key " << key << ": " << other.steps << " updates against " << row.steps;
    }
  }
  if (relative == 0 && Digest(behind) != Digest(reference)) {
    return ::testing::AssertionFailure() << "the digests differ";
  }
  return ::testing::AssertionSuccess();
}

// The device the lock-step cases run on, open; null where a GPU is not here (the caller skips).
std::unique_ptr<gpu::Device> OpenTestDevice() {
  auto device = gpu::OpenDevice(kDevice, {});
  if (!device.ok() && kDevice != "twin:0") return nullptr;
  EXPECT_TRUE(device.ok()) << device.status();
  return device.ok() ? *std::move(device) : nullptr;
}

// A tier on `device` in front of `behind`'s table 0 (`rows` rows in all, made with `options`),
// with room for `room` of them; null (and the test failed) where either step fails.
std::unique_ptr<GpuTier> NewTier(PsClient* behind, gpu::Device* device,
                                 const SparseTableOptions& options, int64_t rows, int64_t room) {
  auto tier = GpuTier::Create(behind, device, {room * TierRowBytes(options)});
  EXPECT_TRUE(tier.ok()) << tier.status();
  if (!tier.ok()) return nullptr;
  const absl::Status added = (*tier)->AddTables({{0, options, rows}});
  EXPECT_TRUE(added.ok()) << added;
  return added.ok() ? *std::move(tier) : nullptr;
}

// Records the rows the tier loads (ExportRows) and writes back (ImportRows), in the order it asks.
class RecordingClient : public ForwardingPsClient {
 public:
  using ForwardingPsClient::ForwardingPsClient;
  Ticket ExportRows(int table, absl::Span<const uint64_t> keys, RowBatch* out) override {
    exported.emplace_back(keys.begin(), keys.end());
    return ForwardingPsClient::ExportRows(table, keys, out);
  }
  Ticket ImportRows(int table, absl::Span<const uint64_t> keys, const RowBatch& rows) override {
    imported.emplace_back(keys.begin(), keys.end());
    return ForwardingPsClient::ImportRows(table, keys, rows);
  }
  std::vector<std::vector<uint64_t>> exported, imported;
};

// The lock-step cases: a tier (in front of `behind`, through `recording`) against `reference`, the
// servers alone, both with table 0 of the case's optimizer; keys drawn Zipf from 300 rows.
class GpuTierTest : public ::testing::TestWithParam<std::tuple<Case, std::string>> {
 protected:
  void SetUp() override {
    const auto& [c, name] = GetParam();
    auto device = gpu::OpenDevice(name, {});
    if (!device.ok() && name != "twin:0") {
      GTEST_SKIP() << name << " is not here: " << device.status();
    }
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = *std::move(device);
    relative_ = device_->info().emulated ? 0 : 1e-4;
    ASSERT_TRUE(reference_.CreateSparseTable(0, Options(c.kind)).ok());
    ASSERT_TRUE(behind_.CreateSparseTable(0, Options(c.kind)).ok());
    tier_ = NewTier(&recording_, device_.get(), Options(c.kind), 300, c.budget_rows);
    ASSERT_NE(tier_, nullptr);
  }

  // A step's keys: 1 to 48, duplicates on purpose.
  std::vector<uint64_t> Draw() {
    std::vector<uint64_t> keys(1 + rng_() % 48);
    for (uint64_t& k : keys) k = 7919ull * zipf_(rng_) + 3;
    return keys;
  }
  // Pulls `keys` through the tier and from the servers alone: the same values.
  ::testing::AssertionResult PullBoth(const std::vector<uint64_t>& keys) {
    std::vector<float> want(keys.size() * kDim), got(keys.size() * kDim);
    if (!reference_.Wait(reference_.PullSparse(0, keys, absl::MakeSpan(want))).ok() ||
        !tier_->Wait(tier_->PullSparse(0, keys, absl::MakeSpan(got))).ok()) {
      return ::testing::AssertionFailure() << "a pull failed";
    }
    return Same(got, want, relative_);
  }
  // Random gradients for `keys`, pushed to both (or accumulated as the step's part and committed:
  // the tier's replica is the only contributor of its rows, so the tier applies its rows' share
  // at once, the servers the rest at the commit).
  void TrainBoth(const std::vector<uint64_t>& keys) {
    std::vector<float> grads(keys.size() * kDim);
    for (float& g : grads) g = normal_(rng_);
    if (std::get<0>(GetParam()).accumulate) {
      ASSERT_TRUE(reference_.Wait(reference_.AccumulateSparse(0, keys, grads, 3)).ok());
      ASSERT_TRUE(tier_->Wait(tier_->AccumulateSparse(0, keys, grads, 3)).ok());
      ASSERT_TRUE(reference_.Commit().ok());
      ASSERT_TRUE(tier_->Commit().ok());
    } else {
      ASSERT_TRUE(reference_.Wait(reference_.PushSparse(0, keys, grads)).ok());
      ASSERT_TRUE(tier_->Wait(tier_->PushSparse(0, keys, grads)).ok());
    }
  }
  // Written back, the servers hold what they would hold alone: bit for bit on the twin.
  ::testing::AssertionResult FlushedRowsAgree() {
    if (!tier_->Flush().ok()) return ::testing::AssertionFailure() << "the flush failed";
    return SameRows(behind_, reference_, relative_);
  }

  std::unique_ptr<gpu::Device> device_;
  double relative_ = 0;
  InProcessPsClient reference_{2}, behind_{2};
  RecordingClient recording_{&behind_};
  std::unique_ptr<GpuTier> tier_;
  std::mt19937_64 rng_;
  std::discrete_distribution<int> zipf_ = [] {
    std::vector<double> w(300);
    for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0 / (1 + i);
    return std::discrete_distribution<int>(w.begin(), w.end());
  }();
  std::normal_distribution<float> normal_;
};

TEST_P(GpuTierTest, LockStepWithTheParameterServerAlone) {
  const Case c = std::get<0>(GetParam());
  rng_.seed(5);
  for (int step = 0; step < 60; ++step) {
    const std::vector<uint64_t> keys = Draw();
    // The window: all of the step's keys, a part of them, or none.
    const size_t named = step % 3 == 0 ? keys.size() : step % 3 == 1 ? keys.size() / 2 : 0;
    ASSERT_TRUE(tier_->Prefetch(0, absl::MakeConstSpan(keys.data(), named)).ok());
    ASSERT_TRUE(PullBoth(keys)) << "step " << step;
    TrainBoth(keys);
    if (step % 10 == 9) {
      ASSERT_TRUE(FlushedRowsAgree()) << "step " << step;
    }
  }
  const GpuTierStats stats = tier_->stats();
  EXPECT_GT(stats.hits, 0);
  EXPECT_GT(stats.loaded_rows, 0);
  EXPECT_GT(stats.written_back_rows, 0);
  EXPECT_LE(stats.resident_rows, c.budget_rows);
  EXPECT_GT(stats.host_to_device_bytes, 0);
  if (c.budget_rows < 100) {
    EXPECT_GT(stats.evicted_rows, 0);
  }
}

// Looking ahead (Anticipate: the next window's rows fetched while this one runs) changes no row:
// the same lock-step, the next window named after each Prefetch (and, every fifth window, keys
// that never come), gradients passing through for some of the next window's keys after it was
// named (rows the fetch ahead read before they changed).
TEST_P(GpuTierTest, LooksAheadAndChangesNothing) {
  rng_.seed(9);
  std::vector<std::vector<uint64_t>> steps(61);
  for (auto& keys : steps) keys = Draw();
  for (int step = 0; step + 1 < static_cast<int>(steps.size()); ++step) {
    const std::vector<uint64_t>& keys = steps[step];
    ASSERT_TRUE(tier_->Prefetch(0, keys).ok());
    const int64_t fetched = tier_->stats().fetched_ahead_rows;
    ASSERT_TRUE(tier_->Anticipate(0, step % 5 == 4 ? Draw() : steps[step + 1]).ok());
    if (step % 5 == 4 && tier_->stats().fetched_ahead_rows > fetched) {
      // Keys named ahead that never come: the servers made the rows fetched ahead (at their
      // initial values), which the servers alone then have too.
      RowBatch made;
      ASSERT_TRUE(
          reference_.Wait(reference_.ExportRows(0, recording_.exported.back(), &made)).ok());
    }
    ASSERT_TRUE(PullBoth(keys)) << "step " << step;
    // Every third step also trains the next step's first keys, after they were named ahead.
    std::vector<uint64_t> pushed = keys;
    if (step % 3 == 0) {
      const std::vector<uint64_t>& later = steps[step + 1];
      pushed.insert(pushed.end(), later.begin(), later.begin() + std::min<size_t>(4, later.size()));
    }
    TrainBoth(pushed);
    if (step % 10 == 9) {
      ASSERT_TRUE(FlushedRowsAgree()) << "step " << step;
    }
  }
  EXPECT_TRUE(FlushedRowsAgree());
  const GpuTierStats stats = tier_->stats();
  EXPECT_GT(stats.ahead_rows, 0);
  EXPECT_GE(stats.fetched_ahead_rows, stats.ahead_rows);
  EXPECT_LE(stats.ahead_rows, stats.loaded_rows);
}

struct BagCase {
  bool one_hot, mean;
  int64_t budget_rows;  // rows the tier may hold
  bool accumulate;      // gradients as accumulated parts, committed per step
};

void PrintTo(const BagCase& c, std::ostream* os) {
  *os << (c.one_hot ? "one-hot"
          : c.mean  ? "multi-hot mean"
                    : "multi-hot sum")
      << ", " << c.budget_rows << " rows" << (c.accumulate ? ", accumulated" : "");
}

class GpuTierBagsTest : public ::testing::TestWithParam<BagCase> {};

// The device path against the stage's host path: the same keys pulled from the servers alone and
// pooled on the host (PoolBags), the same bags' gradients spread on the host (SpreadBagGrads) and
// pushed to the servers alone. The vectors land in their columns of the device's rows and nowhere
// else; resident keys and keys that pass through, empty bags, duplicates inside a bag.
TEST_P(GpuTierBagsTest, PooledOnTheDeviceAsTheStagePoolsThemOnTheHost) {
  const BagCase c = GetParam();
  std::unique_ptr<gpu::Device> device = OpenTestDevice();
  if (device == nullptr) GTEST_SKIP() << kDevice << " is not here";
  const double relative = device->info().emulated ? 0 : 1e-4;
  const SparseTableOptions options = Options(OptimizerKind::kAdagrad);
  InProcessPsClient reference(2), behind(2);
  ASSERT_TRUE(reference.CreateSparseTable(0, options).ok());
  ASSERT_TRUE(behind.CreateSparseTable(0, options).ok());
  std::unique_ptr<GpuTier> tier = NewTier(&behind, device.get(), options, 300, c.budget_rows);
  ASSERT_NE(tier, nullptr);
  constexpr int64_t kSlots = 3, kColumn = 5, kStride = kColumn + kSlots * kDim + 2;
  std::mt19937_64 rng(c.budget_rows + 2 * c.one_hot + c.mean);
  std::normal_distribution<float> normal;
  for (int step = 0; step < 40; ++step) {
    const int64_t samples = step == 7 ? 0 : 1 + static_cast<int64_t>(rng() % 16);
    std::vector<uint64_t> keys;
    std::vector<int32_t> offsets;
    for (int64_t b = 0; b < samples * kSlots; ++b) {
      if (!c.one_hot) offsets.push_back(static_cast<int32_t>(keys.size()));
      const int count = c.one_hot ? 1 : static_cast<int>(rng() % 4);  // empty bags too
      for (int k = 0; k < count; ++k) keys.push_back(7919ull * (rng() % 60) + 3);
    }
    if (!c.one_hot) offsets.push_back(static_cast<int32_t>(keys.size()));
    const Bags bags{keys, offsets, samples, kSlots, c.mean};
    const size_t named = step % 3 == 0 ? keys.size() : step % 3 == 1 ? keys.size() / 2 : 0;
    ASSERT_TRUE(tier->Prefetch(0, absl::MakeConstSpan(keys.data(), named)).ok());

    // The lookup: the host's pooling of the servers' rows, and the device's.
    std::vector<float> rows(keys.size() * kDim), want(samples * kStride, 7.0f),
        got(samples * kStride, 0.0f);
    ASSERT_TRUE(reference.Wait(reference.PullSparse(0, keys, absl::MakeSpan(rows))).ok());
    PoolBags(bags, kDim, rows.data(), want.data(), kStride, kColumn);
    auto out = gpu::DeviceArray<float>::Make(device.get(), std::max<int64_t>(1, samples * kStride));
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(device->Fill(out->data(), 0, out->size() * 4).ok());
    std::vector<float> sevens(out->size(), 7.0f);
    ASSERT_TRUE(device->CopyToDevice(out->data(), sevens.data(), sevens.size() * 4).ok());
    ASSERT_TRUE(tier->LookupBags(0, bags, out->data(), kStride, kColumn).ok());
    ASSERT_TRUE(device->CopyToHost(got.data(), out->data(), got.size() * 4).ok());
    ASSERT_TRUE(device->Synchronize().ok());
    ASSERT_TRUE(Same(got, want, relative)) << "step " << step;

    // Its backward: the bags' gradients on the device, spread and pushed there; on the host,
    // spread and pushed to the servers alone.
    std::vector<float> d(samples * kStride);
    for (float& g : d) g = normal(rng);
    std::vector<float> grads(keys.size() * kDim);
    SpreadBagGrads(bags, kDim, d.data(), kStride, kColumn, grads.data());
    ASSERT_TRUE(device->CopyToDevice(out->data(), d.data(), d.size() * 4).ok());
    if (c.accumulate) {
      ASSERT_TRUE(reference.Wait(reference.AccumulateSparse(0, keys, grads, 3)).ok());
      ASSERT_TRUE(tier->AccumulateBags(0, bags, out->data(), kStride, kColumn, 3).ok());
      ASSERT_TRUE(reference.Commit().ok());
      ASSERT_TRUE(tier->Commit().ok());
    } else {
      ASSERT_TRUE(reference.Wait(reference.PushSparse(0, keys, grads)).ok());
      ASSERT_TRUE(tier->PushBags(0, bags, out->data(), kStride, kColumn).ok());
    }
    ASSERT_TRUE(device->Synchronize().ok());
    if (step % 10 == 9) {
      ASSERT_TRUE(tier->Flush().ok());
      ASSERT_TRUE(SameRows(behind, reference, relative)) << "step " << step;
    }
  }
  const GpuTierStats stats = tier->stats();
  EXPECT_GT(stats.hits, 0);
  if (c.budget_rows < 60) {
    EXPECT_GT(stats.misses, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    OneAndMultiHot, GpuTierBagsTest,
    ::testing::Values(BagCase{true, false, 1000, false}, BagCase{false, false, 1000, false},
                      BagCase{false, true, 1000, false}, BagCase{false, true, 12, false},
                      BagCase{true, false, 5, true}, BagCase{false, false, 20, true}));

INSTANTIATE_TEST_SUITE_P(
    EveryOptimizerAndBudget, GpuTierTest,
    ::testing::Combine(::testing::Values(Case{OptimizerKind::kSgd, 1000, false},
                                         Case{OptimizerKind::kAdagrad, 1000, false},
                                         Case{OptimizerKind::kAdam, 1000, false},
                                         Case{OptimizerKind::kAdagrad, 20, false},
                                         Case{OptimizerKind::kAdam, 3, false},
                                         Case{OptimizerKind::kAdagrad, 20, true},
                                         Case{OptimizerKind::kAdam, 40, true}),
#if defined(HETERPS_TIER_TEST_CUDA)
                       ::testing::Values("cuda:0")));
#else
                       ::testing::Values("twin:0")));


// A tier of four rows (SGD, on the twin) in front of one server, recording what it loads and
// writes back.
class FourRowTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = gpu::OpenDevice("twin:0", {});
    ASSERT_TRUE(device.ok());
    device_ = *std::move(device);
    ASSERT_TRUE(servers.CreateSparseTable(0, options).ok());
    tier = NewTier(&client, device_.get(), options, 100, 4);
    ASSERT_NE(tier, nullptr);
  }
  const SparseTableOptions options = Options(OptimizerKind::kSgd);
  std::unique_ptr<gpu::Device> device_;
  InProcessPsClient servers{1};
  RecordingClient client{&servers};
  std::unique_ptr<GpuTier> tier;
};

// Which rows go, and in what order (the lock-step test sees values, not these): the least recently
// used first, in key order among equals; the changed ones written back in key order; and where the
// room is short, the window's most frequent missing keys loaded.
TEST_F(FourRowTierTest, LeastRecentlyUsedGoFirstAndWriteBacksComeInKeyOrder) {
  auto window = [&](std::vector<uint64_t> keys, std::vector<uint64_t> pushed) {
    ASSERT_TRUE(tier->Prefetch(0, keys).ok());
    if (pushed.empty()) return;
    std::vector<float> grads(pushed.size() * kDim, 0.5f);
    ASSERT_TRUE(tier->Wait(tier->PushSparse(0, pushed, grads)).ok());
  };
  using Keys = std::vector<std::vector<uint64_t>>;
  window({50, 40, 30, 20}, {40, 20});  // 1: all four loaded, 20 and 40 changed
  window({30, 10}, {10});              // 2: 20, 40, 50 idle since 1: 20 goes (key order)
  EXPECT_EQ(client.imported, (Keys{{20}}));
  window({50}, {});            // 3: 50 used again
  window({60, 70}, {70, 60});  // 4: 40 (used in 1), then 10 (in 2) go; 30 (2), 50 (3) stay
  EXPECT_EQ(client.imported, (Keys{{20}, {10, 40}}));
  // 5: six keys missing, room for four: every idle row goes, and the four most frequent come.
  window({1, 1, 1, 2, 2, 3, 4, 4, 4, 4, 5, 6, 6}, {});
  EXPECT_EQ(client.imported, (Keys{{20}, {10, 40}, {60, 70}}));
  EXPECT_EQ(client.exported, (Keys{{20, 30, 40, 50}, {10}, {60, 70}, {1, 2, 4, 6}}));
  ASSERT_TRUE(tier->Flush().ok());  // nothing resident changed since
  EXPECT_EQ(client.imported.size(), 3u);
  const GpuTierStats stats = tier->stats();
  EXPECT_EQ(stats.evicted_rows, 1 + 2 + 4);
  EXPECT_EQ(stats.loaded_rows, 4 + 1 + 2 + 4);
  EXPECT_EQ(stats.resident_rows, 4);
}

// What is fetched ahead, and what is fetched again: the next window's missing keys but those
// passing through now (this window's misses without room), each from the rows fetched ahead
// unless the tier sent the servers something for it since; the loads themselves as without it.
TEST_F(FourRowTierTest, FetchesTheNextMissesAndAgainWhatChangedSince) {
  using Keys = std::vector<std::vector<uint64_t>>;
  // 1: six keys missing, room for four: 1-4 loaded (the most frequent; key order among equals),
  // 5 and 6 pass through in this window. The next names 5, 6, 7 and 8: 7 and 8 fetched ahead.
  ASSERT_TRUE(tier->Prefetch(0, std::vector<uint64_t>{1, 2, 3, 4, 5, 6}).ok());
  ASSERT_TRUE(tier->Anticipate(0, std::vector<uint64_t>{8, 5, 7, 6, 7}).ok());
  EXPECT_EQ(client.exported, (Keys{{1, 2, 3, 4}, {7, 8}}));
  // This window trains 5 (passing through) and 8 (not resident: passing through, after its row was
  // fetched ahead), and 1.
  std::vector<float> grads(3 * kDim, 0.5f);
  ASSERT_TRUE(tier->Wait(tier->PushSparse(0, std::vector<uint64_t>{1, 5, 8}, grads)).ok());
  // 2: 2 and 3 (idle, the first in key order) make room for 7 and 8; 7 comes from the rows
  // fetched ahead, 8 from the servers again.
  ASSERT_TRUE(tier->Prefetch(0, std::vector<uint64_t>{1, 7, 8}).ok());
  EXPECT_EQ(client.exported, (Keys{{1, 2, 3, 4}, {7, 8}, {8}}));
  EXPECT_EQ(tier->stats().ahead_rows, 1);
  EXPECT_EQ(tier->stats().fetched_ahead_rows, 2);
  EXPECT_EQ(tier->stats().loaded_rows, 6);
  std::vector<float> got(2 * kDim), want(2 * kDim);
  ASSERT_TRUE(tier->Wait(tier->PullSparse(0, std::vector<uint64_t>{7, 8}, absl::MakeSpan(got))).ok());
  ASSERT_TRUE(tier->Flush().ok());
  ASSERT_TRUE(
      servers.Wait(servers.PullSparse(0, std::vector<uint64_t>{7, 8}, absl::MakeSpan(want))).ok());
  EXPECT_EQ(got, want);
  // Row 8 has its push (not the row fetched ahead before it): as servers alone have it.
  InProcessPsClient alone(1);
  ASSERT_TRUE(alone.CreateSparseTable(0, options).ok());
  ASSERT_TRUE(alone.Wait(alone.PushSparse(0, std::vector<uint64_t>{8}, std::vector<float>(kDim, 0.5f)))
                  .ok());
  std::vector<float> pushed(kDim);
  ASSERT_TRUE(
      alone.Wait(alone.PullSparse(0, std::vector<uint64_t>{8}, absl::MakeSpan(pushed))).ok());
  EXPECT_EQ(std::vector<float>(got.begin() + kDim, got.end()), pushed);
  // 3: a window named ahead that does not come: its rows fetched and dropped.
  ASSERT_TRUE(tier->Anticipate(0, std::vector<uint64_t>{20, 21}).ok());
  ASSERT_TRUE(tier->Prefetch(0, std::vector<uint64_t>{1, 22}).ok());
  EXPECT_EQ(client.exported.back(), (std::vector<uint64_t>{22}));
  EXPECT_EQ(tier->stats().ahead_rows, 1);
  EXPECT_EQ(tier->stats().fetched_ahead_rows, 4);
}

// With every key of a step resident, the keys go up once (the window's prefetch; the pull and
// the push use them where they are), a pull brings their rows down, and a push takes the
// gradients up and nothing down: over PCIe, the step's own data and no more.
TEST(GpuTierTrafficTest, ResidentKeysMoveOnlyTheStepsOwnData) {
  auto device = gpu::OpenDevice("twin:0", {});
  ASSERT_TRUE(device.ok());
  const SparseTableOptions options = Options(OptimizerKind::kAdagrad);
  InProcessPsClient behind(1);
  ASSERT_TRUE(behind.CreateSparseTable(0, options).ok());
  std::unique_ptr<GpuTier> tier = NewTier(&behind, device->get(), options, 1000, 1000);
  ASSERT_NE(tier, nullptr);
  for (int step = 0; step < 3; ++step) {
    std::vector<uint64_t> keys;  // the same 150 keys every step, with duplicates, in other orders
    for (uint64_t i = 0; i < 200; ++i) keys.push_back(13 * ((i + 7 * step) % 150) + 1);
    const gpu::DeviceCounters before = (*device)->counters();
    ASSERT_TRUE(tier->Prefetch(0, keys).ok());
    const gpu::DeviceCounters prefetched = (*device)->counters();
    std::vector<float> values(keys.size() * kDim);
    ASSERT_TRUE(tier->Wait(tier->PullSparse(0, keys, absl::MakeSpan(values))).ok());
    const gpu::DeviceCounters pulled = (*device)->counters();
    std::vector<float> grads(values.size(), 0.25f);
    ASSERT_TRUE(tier->Wait(tier->PushSparse(0, keys, grads)).ok());
    const gpu::DeviceCounters pushed = (*device)->counters();
    if (step == 0) continue;  // the rows loaded
    EXPECT_EQ(prefetched.host_to_device_bytes - before.host_to_device_bytes, keys.size() * 8);
    EXPECT_EQ(prefetched.device_to_host_bytes, before.device_to_host_bytes);
    EXPECT_EQ(pulled.host_to_device_bytes, prefetched.host_to_device_bytes);
    EXPECT_EQ(pulled.device_to_host_bytes - prefetched.device_to_host_bytes, values.size() * 4);
    EXPECT_EQ(pushed.host_to_device_bytes - pulled.host_to_device_bytes, grads.size() * 4);
    EXPECT_EQ(pushed.device_to_host_bytes, pulled.device_to_host_bytes);
  }
  EXPECT_EQ(tier->stats().misses, 0);
  EXPECT_EQ(tier->stats().loaded_rows, 150);
}

// The device path with every key resident: a step's keys go up once (its window's prefetch; the
// lookup and the backward's push use them where they are), the bags' offsets once (the lookup),
// and nothing else crosses PCIe either way (the rows stay on the device, and so do their
// gradients).
TEST(GpuTierTrafficTest, BagsOfResidentKeysMoveOnlyTheKeysAndOffsets) {
  auto device = gpu::OpenDevice("twin:0", {});
  ASSERT_TRUE(device.ok());
  const SparseTableOptions options = Options(OptimizerKind::kAdam);
  InProcessPsClient behind(1);
  ASSERT_TRUE(behind.CreateSparseTable(0, options).ok());
  std::unique_ptr<GpuTier> tier = NewTier(&behind, device->get(), options, 1000, 1000);
  ASSERT_NE(tier, nullptr);
  std::vector<uint64_t> all;
  for (uint64_t k = 0; k < 90; ++k) all.push_back(13 * k + 1);
  ASSERT_TRUE(tier->Prefetch(0, all).ok());  // every key the steps use, resident
  constexpr int64_t kSamples = 50, kSlots = 2;
  auto rows = gpu::DeviceArray<float>::Make(device->get(), kSamples * kSlots * kDim);
  ASSERT_TRUE(rows.ok());
  for (int step = 0; step < 3; ++step) {
    std::vector<uint64_t> keys;  // other keys and bags each step
    std::vector<int32_t> offsets;
    for (int64_t b = 0; b < kSamples * kSlots; ++b) {
      offsets.push_back(static_cast<int32_t>(keys.size()));
      for (int64_t k = 0; k < (b + step) % 3; ++k) keys.push_back(all[(b * 7 + k + step) % 90]);
    }
    offsets.push_back(static_cast<int32_t>(keys.size()));
    const Bags bags{keys, offsets, kSamples, kSlots, true};
    const gpu::DeviceCounters before = (*device)->counters();
    ASSERT_TRUE(tier->Prefetch(0, keys).ok());
    const gpu::DeviceCounters prefetched = (*device)->counters();
    ASSERT_TRUE(tier->LookupBags(0, bags, rows->data(), kSlots * kDim, 0).ok());
    const gpu::DeviceCounters looked_up = (*device)->counters();
    ASSERT_TRUE(tier->PushBags(0, bags, rows->data(), kSlots * kDim, 0).ok());
    const gpu::DeviceCounters pushed = (*device)->counters();
    EXPECT_EQ(prefetched.host_to_device_bytes - before.host_to_device_bytes, keys.size() * 8);
    EXPECT_EQ(looked_up.host_to_device_bytes - prefetched.host_to_device_bytes, offsets.size() * 4);
    EXPECT_EQ(pushed.host_to_device_bytes, looked_up.host_to_device_bytes);
    EXPECT_EQ(pushed.device_to_host_bytes, before.device_to_host_bytes);
  }
  EXPECT_EQ(tier->stats().misses, 0);
}

// Between regions: a table's deltas (and a GEO window's) are exported after the tier's rows are
// written back, so that its rows' changes are in them; deltas or a window's merge into a table it
// holds, and the pending parts while it holds any, are refused rather than left stale or short.
TEST(GpuTierOptionsTest, DeltasBetweenRegionsSeeTheTiersRows) {
  auto device = gpu::OpenDevice("twin:0", {});
  ASSERT_TRUE(device.ok());
  const SparseTableOptions options = Options(OptimizerKind::kAdagrad);
  InProcessPsClient behind(2);
  ASSERT_TRUE(behind.CreateSparseTable(0, options).ok());
  std::unique_ptr<GpuTier> tier = NewTier(&behind, device->get(), options, 1000, 1000);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->TrackDeltas().ok());
  const std::vector<uint64_t> keys = {5, 1, 9};
  ASSERT_TRUE(tier->Prefetch(0, keys).ok());
  ASSERT_TRUE(tier->Wait(tier->PushSparse(0, keys, std::vector<float>(3 * kDim, 1.0f))).ok());
  std::vector<uint64_t> sent;
  std::vector<float> deltas;
  // A GEO window's export too (the bases left where they are, for the export below).
  ASSERT_TRUE(tier->ExportWindow(0, 0, &sent, &deltas).ok());
  std::sort(sent.begin(), sent.end());
  EXPECT_EQ(sent, (std::vector<uint64_t>{1, 5, 9}));
  EXPECT_EQ(tier->ApplyWindow(0, {1}, std::vector<float>(kDim), std::vector<float>(kDim)).code(),
            absl::StatusCode::kFailedPrecondition);
  sent.clear();
  deltas.clear();
  ASSERT_TRUE(tier->ExportDeltas(0, 0, &sent, &deltas).ok());
  std::sort(sent.begin(), sent.end());
  EXPECT_EQ(sent, (std::vector<uint64_t>{1, 5, 9}));  // changed on the device, written back
  for (float d : deltas) EXPECT_NE(d, 0.0f);
  EXPECT_EQ(tier->AddDeltas(0, {1}, std::vector<float>(kDim)).code(),
            absl::StatusCode::kFailedPrecondition);
  PendingParts parts;
  EXPECT_EQ(tier->ExportPending(&parts).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(GpuTierOptionsTest, BagsRefusals) {
  auto device = gpu::OpenDevice("twin:0", {});
  ASSERT_TRUE(device.ok());
  const SparseTableOptions options = Options(OptimizerKind::kSgd);
  InProcessPsClient behind(1);
  ASSERT_TRUE(behind.CreateSparseTable(0, options).ok());
  ASSERT_TRUE(behind.CreateSparseTable(1, options).ok());
  std::unique_ptr<GpuTier> tier = NewTier(&behind, device->get(), options, 100, 100);
  ASSERT_NE(tier, nullptr);
  auto rows = gpu::DeviceArray<float>::Make(device->get(), 4 * kDim);
  ASSERT_TRUE(rows.ok());
  const std::vector<uint64_t> keys = {1, 2, 3, 4};
  const std::vector<int32_t> offsets = {0, 1, 3, 3, 4};
  const Bags bags{keys, offsets, 2, 2, false};
  EXPECT_TRUE(tier->LookupBags(0, bags, rows->data(), 2 * kDim, 0).ok());
  const absl::Status other = tier->LookupBags(1, bags, rows->data(), 2 * kDim, 0);
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), ::testing::HasSubstr("table 1, which has no rows on twin:0"));
  std::vector<float> host(4 * kDim);
  EXPECT_THAT(tier->LookupBags(0, bags, host.data(), 2 * kDim, 0).message(),
              ::testing::HasSubstr("not memory of twin:0"));
  EXPECT_THAT(tier->PushBags(0, bags, rows->data(), 2 * kDim, 1).message(),
              ::testing::HasSubstr("do not fit rows of 16"));
  EXPECT_THAT(
      tier->LookupBags(0, {keys, offsets, 2, 4, false}, rows->data(), 2 * kDim, 0).message(),
      ::testing::HasSubstr("5 offsets for 8 bags"));
  EXPECT_THAT(tier->LookupBags(0, {keys, {}, 1, 2, false}, rows->data(), 2 * kDim, 0).message(),
              ::testing::HasSubstr("4 keys for 2 one-key bags"));
  const std::vector<int32_t> backwards = {0, 3, 1, 3, 4};
  EXPECT_THAT(tier->AccumulateBags(0, {keys, backwards, 2, 2, false}, rows->data(), 2 * kDim, 0, 1)
                  .message(),
              ::testing::HasSubstr("must ascend from 0"));
}

TEST(GpuTierOptionsTest, Refusals) {
  auto device = gpu::OpenDevice("twin:0", {});
  InProcessPsClient behind(1);
  EXPECT_EQ(GpuTier::Create(&behind, device->get(), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto tier = GpuTier::Create(&behind, device->get(), {10});
  ASSERT_TRUE(tier.ok());
  EXPECT_THAT((*tier)->AddTables({{0, Options(OptimizerKind::kSgd), 100}}).message(),
              ::testing::HasSubstr("hold no row"));
  auto again = GpuTier::Create(&behind, device->get(), {1 << 20});
  ASSERT_TRUE(again.ok());
  EXPECT_THAT((*again)->AddTables({{0, Options(OptimizerKind::kSgd), 0}}).message(),
              ::testing::HasSubstr("has no rows"));
  auto twice = GpuTier::Create(&behind, device->get(), {1 << 20});
  EXPECT_THAT(
      (*twice)
          ->AddTables({{0, Options(OptimizerKind::kSgd), 5}, {0, Options(OptimizerKind::kSgd), 5}})
          .message(),
      ::testing::HasSubstr("named twice"));
}

// Several tables share the budget: the rows' bytes never pass it, whatever the tables' sizes,
// dims, optimizers and order (each table holding the same share of its rows), and a budget that
// holds every table whole gives each all its rows.
TEST(GpuTierOptionsTest, TablesShareTheBudgetAndNeverPassIt) {
  auto device = gpu::OpenDevice("twin:0", {});
  ASSERT_TRUE(device.ok());
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<TierTable> tables(1 + rng() % 26);
    int64_t whole = 0;
    for (size_t i = 0; i < tables.size(); ++i) {
      const OptimizerKind kinds[] = {OptimizerKind::kSgd, OptimizerKind::kAdagrad,
                                     OptimizerKind::kAdam};
      tables[i].table = static_cast<int>(i);
      tables[i].options = Options(kinds[rng() % 3]);
      tables[i].options.dim = 1 + static_cast<int>(rng() % 64);
      tables[i].rows = 1 + static_cast<int64_t>(rng() % 1'000'000);
      whole += tables[i].rows * TierRowBytes(tables[i].options);
    }
    const int64_t budget = trial % 10 == 0 ? whole + static_cast<int64_t>(rng() % 1000)
                                           : 1 + static_cast<int64_t>(rng() % whole);
    const std::vector<int64_t> capacity = SplitTierBudget(budget, tables);
    int64_t bytes = 0;
    for (size_t i = 0; i < tables.size(); ++i) {
      ASSERT_GE(capacity[i], 0);
      ASSERT_LE(capacity[i], tables[i].rows);
      bytes += capacity[i] * TierRowBytes(tables[i].options);
      if (budget >= whole) {
        EXPECT_EQ(capacity[i], tables[i].rows);
      } else {
        // The same share of its rows as the budget is of the whole, to a row.
        EXPECT_NEAR(static_cast<double>(capacity[i]),
                    static_cast<double>(tables[i].rows) * budget / whole, 1.0);
      }
    }
    EXPECT_LE(bytes, budget) << "trial " << trial << ": " << tables.size() << " tables";
  }
  // Through a tier, the reserved bytes say the same: 26 tables of three sizes.
  InProcessPsClient behind(1);
  const int64_t budget = 4 << 20;
  auto tier = GpuTier::Create(&behind, device->get(), {budget});
  ASSERT_TRUE(tier.ok());
  std::vector<TierTable> tables;
  for (int t = 0; t < 26; ++t)
    tables.push_back({t, Options(OptimizerKind::kAdagrad), 1000 << (t % 3)});
  ASSERT_TRUE((*tier)->AddTables(tables).ok());
  EXPECT_LE((*tier)->stats().reserved_bytes, budget);
  EXPECT_GT((*tier)->stats().reserved_bytes, budget * 0.99);
}

#endif  // HETERPS_TIER_TEST_CUDA

}  // namespace
}  // namespace heterps::ps
