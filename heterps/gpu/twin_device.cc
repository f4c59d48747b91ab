#include "heterps/gpu/twin_device.h"

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace heterps::gpu {
namespace {

constexpr int64_t kDefaultBudget = int64_t{16} << 30;
constexpr size_t kAlignment = 256;

class TwinDevice : public Device {
 public:
  TwinDevice(int index, const DeviceOptions& options) {
    info_.name = absl::StrCat("twin:", index);
    info_.model = "host twin of a GPU";
    info_.memory_bytes =
        options.memory_budget_bytes > 0 ? options.memory_budget_bytes : kDefaultBudget;
    info_.emulated = true;
  }
  ~TwinDevice() override {
    for (const auto& [p, bytes] : device_) std::free(p);
    for (void* p : host_) std::free(p);
  }

  const DeviceInfo& info() const override { return info_; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    absl::MutexLock lock(&mu_);
    if (counters_.bytes_in_use + static_cast<int64_t>(bytes) > info_.memory_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(info_.name, ": ", bytes, " bytes do not fit: ", counters_.bytes_in_use,
                       " of ", info_.memory_bytes, " in use"));
    }
    void* p = std::aligned_alloc(kAlignment, RoundUp(bytes));
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat(info_.name, ": the host has no memory left for ", bytes, " bytes"));
    }
    device_[static_cast<char*>(p)] = bytes;
    counters_.bytes_in_use += static_cast<int64_t>(bytes);
    counters_.peak_bytes = std::max(counters_.peak_bytes, counters_.bytes_in_use);
    return p;
  }

  void Free(void* pointer) override {
    if (pointer == nullptr) return;
    absl::MutexLock lock(&mu_);
    auto it = device_.find(static_cast<char*>(pointer));
    if (it == device_.end()) return;
    counters_.bytes_in_use -= static_cast<int64_t>(it->second);
    device_.erase(it);
    std::free(pointer);
  }

  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    void* p = std::aligned_alloc(kAlignment, RoundUp(bytes));
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(info_.name, ": no host memory"));
    }
    absl::MutexLock lock(&mu_);
    host_.push_back(p);
    return p;
  }

  void FreeHost(void* pointer) override {
    absl::MutexLock lock(&mu_);
    for (auto it = host_.begin(); it != host_.end(); ++it) {
      if (*it == pointer) {
        host_.erase(it);
        std::free(pointer);
        return;
      }
    }
  }

  bool IsDeviceMemory(const void* pointer, size_t bytes) const override {
    absl::MutexLock lock(&mu_);
    return Owns(static_cast<const char*>(pointer), bytes);
  }

  Stream stream() override { return this; }

  absl::Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (!IsDeviceMemory(device, bytes)) return NotMine(device, bytes, "the copy's destination");
    if (IsDeviceMemory(host, 1)) return Misused(host, "the copy's host source");
    std::memcpy(device, host, bytes);
    Count(&DeviceCounters::host_to_device_bytes, bytes);
    return absl::OkStatus();
  }

  absl::Status CopyToHost(void* host, const void* device, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (!IsDeviceMemory(device, bytes)) return NotMine(device, bytes, "the copy's source");
    if (IsDeviceMemory(host, 1)) return Misused(host, "the copy's host destination");
    std::memcpy(host, device, bytes);
    Count(&DeviceCounters::device_to_host_bytes, bytes);
    return absl::OkStatus();
  }

  absl::Status CopyOnDevice(void* to, const void* from, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (!IsDeviceMemory(to, bytes)) return NotMine(to, bytes, "the copy's destination");
    if (!IsDeviceMemory(from, bytes)) return NotMine(from, bytes, "the copy's source");
    std::memmove(to, from, bytes);
    Count(&DeviceCounters::device_to_device_bytes, bytes);
    return absl::OkStatus();
  }

  absl::Status Fill(void* device, uint8_t byte, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    if (!IsDeviceMemory(device, bytes)) return NotMine(device, bytes, "the fill");
    std::memset(device, byte, bytes);
    return absl::OkStatus();
  }

  absl::Status Synchronize() override { return absl::OkStatus(); }

  DeviceCounters counters() const override {
    absl::MutexLock lock(&mu_);
    return counters_;
  }

 private:
  static size_t RoundUp(size_t bytes) {
    return (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
  }

  // Whether [p, p + bytes) lies in one allocation.
  bool Owns(const char* p, size_t bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = device_.upper_bound(const_cast<char*>(p));
    if (it == device_.begin()) return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second;
  }

  absl::Status NotMine(const void* p, size_t bytes, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(info_.name, ": ", what, " (", bytes,
                                                   " bytes at ", reinterpret_cast<uintptr_t>(p),
                                                   ") is not this device's memory"));
  }
  absl::Status Misused(const void* p, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(
        info_.name, ": ", what, " at ", reinterpret_cast<uintptr_t>(p), " is device memory"));
  }

  void Count(int64_t DeviceCounters::*field, size_t bytes) {
    absl::MutexLock lock(&mu_);
    counters_.*field += static_cast<int64_t>(bytes);
  }

  DeviceInfo info_;
  mutable absl::Mutex mu_;
  std::map<char*, size_t> device_ ABSL_GUARDED_BY(mu_);  // allocations: start, bytes
  std::vector<void*> host_ ABSL_GUARDED_BY(mu_);
  DeviceCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<Device> NewTwinDevice(int index, const DeviceOptions& options) {
  return std::make_unique<TwinDevice>(index, options);
}

}  // namespace heterps::gpu
