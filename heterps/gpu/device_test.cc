// The device layer on the host twin: memory under a budget and kept apart from host memory,
// copies counted as PCIe bytes, errors that name the device; the GEMMs against plain loops.
#include "heterps/gpu/device.h"

#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "heterps/gpu/blas.h"
#include "heterps/gpu/cuda/cuda_device.h"
#include "heterps/gpu/scratch.h"

namespace heterps::gpu {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<Device> Twin(int64_t budget) {
  auto device = OpenDevice("twin:3", {budget});
  EXPECT_TRUE(device.ok()) << device.status();
  return *std::move(device);
}

TEST(ScratchTest, KeepsItsBlocksAndReusesThemUnderTheBudget) {
  std::unique_ptr<Device> twin = Twin(1 << 20);
  {
    Scratch scratch(twin.get());
    char* a = scratch.allocate(1000);  // a block of 1024 bytes
    ASSERT_TRUE(twin->IsDeviceMemory(a, 1000));
    EXPECT_EQ(scratch.held_bytes(), 1024);
    scratch.deallocate(a, 1000);
    EXPECT_EQ(scratch.allocate(700), a);  // the kept block serves a smaller request
    char* b = scratch.allocate(700);      // a block in use is not handed out twice
    EXPECT_NE(b, a);
    EXPECT_EQ(scratch.held_bytes(), 2048);
    EXPECT_EQ(twin->counters().bytes_in_use, 2048);
    scratch.deallocate(b, 700);
    scratch.deallocate(a, 700);
    EXPECT_EQ(twin->counters().bytes_in_use, 2048);           // kept, not freed
    EXPECT_THROW(scratch.allocate(1 << 21), std::bad_alloc);  // over the device's budget
  }
  EXPECT_EQ(twin->counters().bytes_in_use, 0);  // freed with the Scratch
}

TEST(TwinDeviceTest, MemoryUnderItsBudgetAndApartFromTheHost) {
  std::unique_ptr<Device> twin = Twin(1 << 20);
  EXPECT_EQ(twin->info().name, "twin:3");
  EXPECT_TRUE(twin->info().emulated);
  auto a = DeviceArray<float>::Make(twin.get(), 100000);  // 400 KB
  ASSERT_TRUE(a.ok());
  auto b = DeviceArray<float>::Make(twin.get(), 200000);  // 800 KB: over the 1 MiB budget
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("twin:3"));
  EXPECT_EQ(twin->counters().bytes_in_use, 400000);

  std::vector<float> host(100000, 2.5f), back(100000, 0.0f);
  ASSERT_TRUE(twin->CopyToDevice(a->data(), host.data(), host.size() * 4).ok());
  ASSERT_TRUE(twin->CopyToHost(back.data(), a->data(), back.size() * 4).ok());
  ASSERT_TRUE(twin->Synchronize().ok());
  EXPECT_EQ(back, host);
  const DeviceCounters c = twin->counters();
  EXPECT_EQ(c.host_to_device_bytes, 400000);
  EXPECT_EQ(c.device_to_host_bytes, 400000);
  // Host memory where device memory belongs, or the other way round, or past an allocation's end.
  EXPECT_EQ(twin->CopyToDevice(host.data(), back.data(), 4).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(twin->CopyToHost(a->data(), a->data(), 4).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(twin->CopyToDevice(a->data() + 99999, host.data(), 8).code(),
            absl::StatusCode::kInvalidArgument);
  *a = DeviceArray<float>();
  EXPECT_EQ(twin->counters().bytes_in_use, 0);
  EXPECT_EQ(twin->counters().peak_bytes, 400000);
}

TEST(DevicesTest, NamesAndMissingGpus) {
  EXPECT_EQ(OpenDevice("gpu0", {}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(OpenDevice("tpu:0", {}).status().code(), absl::StatusCode::kInvalidArgument);
  auto cuda = OpenDevice("cuda:0", {});
  if (!cuda.ok()) {
    // No GPU here, or no CUDA in this build: a clear refusal, never a crash.
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(CudaDevices().empty() || !BuiltWithCuda());
  }
}

// Row-major products with every transposition, leading dimensions wider than the matrices, and
// batches, against loops.
TEST(TwinBlasTest, GemmsAgainstLoops) {
  std::unique_ptr<Device> twin = Twin(0);
  std::unique_ptr<Blas> blas = NewTwinBlas(twin.get());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  const int64_t m = 5, n = 4, k = 3, pad = 2, batch = 3;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k, lda = a_cols + pad;
      const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n, ldb = b_cols + pad;
      const int64_t ldc = n + pad;
      const int64_t sa = a_rows * lda, sb = b_rows * ldb, sc = m * ldc;
      std::vector<float> a(sa * batch), b(sb * batch), c(sc * batch);
      for (float& x : a) x = normal(rng);
      for (float& x : b) x = normal(rng);
      for (float& x : c) x = normal(rng);
      auto da = DeviceArray<float>::Make(twin.get(), a.size());
      auto db = DeviceArray<float>::Make(twin.get(), b.size());
      auto dc = DeviceArray<float>::Make(twin.get(), c.size());
      ASSERT_TRUE(twin->CopyToDevice(da->data(), a.data(), a.size() * 4).ok());
      ASSERT_TRUE(twin->CopyToDevice(db->data(), b.data(), b.size() * 4).ok());
      ASSERT_TRUE(twin->CopyToDevice(dc->data(), c.data(), c.size() * 4).ok());
      ASSERT_TRUE(blas->GemmBatched(ta, tb, m, n, k, 2.0f, da->data(), lda, sa, db->data(), ldb, sb,
                                    0.5f, dc->data(), ldc, sc, batch)
                      .ok());
      std::vector<float> got(c.size());
      ASSERT_TRUE(twin->CopyToHost(got.data(), dc->data(), got.size() * 4).ok());
      for (int64_t p = 0; p < batch; ++p) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            double want = 0.5 * c[p * sc + i * ldc + j];
            for (int64_t l = 0; l < k; ++l) {
              const float x = ta ? a[p * sa + l * lda + i] : a[p * sa + i * lda + l];
              const float y = tb ? b[p * sb + j * ldb + l] : b[p * sb + l * ldb + j];
              want += 2.0 * x * y;
            }
            EXPECT_NEAR(got[p * sc + i * ldc + j], want, 1e-4) << ta << tb << p << i << j;
          }
        }
      }
    }
  }
  // The device's memory only.
  std::vector<float> host(16);
  auto dc = DeviceArray<float>::Make(twin.get(), 16);
  EXPECT_EQ(
      blas->Gemm(false, false, 2, 2, 2, 1, host.data(), 2, host.data(), 2, 0, dc->data(), 2).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace heterps::gpu
