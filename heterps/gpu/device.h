// The device layer of a GPU: memory under a byte budget, a stream of work, copies between host and
// device memory. Two implementations: a CUDA device (gpu/cuda, built where the CUDA toolkit is
// found) and its host twin (twin_device.h), which keeps "device" memory apart from host memory,
// runs the work of its stream in order on the host and counts every copy as PCIe bytes, so that
// GPU code runs, and is tested, where no GPU exists (docs/gpu.md).
//
//   HETERPS_ASSIGN_OR_RETURN(std::unique_ptr<Device> gpu, OpenDevice("twin:0", {}));
//   HETERPS_ASSIGN_OR_RETURN(DeviceArray<float> x, DeviceArray<float>::Make(gpu.get(), n));
//   HETERPS_RETURN_IF_ERROR(gpu->CopyToDevice(x.data(), host, n * sizeof(float)));
//   ... kernels on gpu->stream() ...
//   HETERPS_RETURN_IF_ERROR(gpu->CopyToHost(host, x.data(), n * sizeof(float)));
//   HETERPS_RETURN_IF_ERROR(gpu->Synchronize());
//
// Copies and kernels are ordered on the device's stream. A copy to the host is complete after
// Synchronize (the twin completes it at once). Errors name the device.
//
// Thread safety: a Device may be used from one thread at a time for its stream's work; Allocate,
// Free and stats may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace heterps::gpu {

struct DeviceInfo {
  std::string name;            // "cuda:0", "twin:1"
  std::string model;           // "NVIDIA H100 80GB HBM3", "host twin of a GPU"
  int64_t memory_bytes = 0;    // what the device has (the twin: its budget)
  int compute_capability = 0;  // 90 for sm_90; 0 for the twin
  bool emulated = false;       // the host twin
};

struct DeviceCounters {
  int64_t bytes_in_use = 0, peak_bytes = 0;  // device memory
  int64_t host_to_device_bytes = 0;          // copies over PCIe
  int64_t device_to_host_bytes = 0;
  int64_t device_to_device_bytes = 0;
};

struct DeviceOptions {
  // Device memory this process may hold, bytes; 0: the twin's default (16 GiB), a GPU's free
  // memory.
  int64_t memory_budget_bytes = 0;
};

// The device's stream: a cudaStream_t, or the twin's (the twin runs work as it is enqueued).
using Stream = void*;

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;

  // Device memory, 256-byte aligned. ResourceExhausted naming the device, the request and the
  // budget when it does not fit.
  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* pointer) = 0;
  // Host memory for copies (pinned on a GPU).
  virtual absl::StatusOr<void*> AllocateHost(size_t bytes) = 0;
  virtual void FreeHost(void* pointer) = 0;
  // Whether [pointer, pointer + bytes) is device memory this device allocated.
  virtual bool IsDeviceMemory(const void* pointer, size_t bytes) const = 0;

  virtual Stream stream() = 0;
  // Copies on the stream. InvalidArgument when the device side is not this device's memory.
  virtual absl::Status CopyToDevice(void* device, const void* host, size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* host, const void* device, size_t bytes) = 0;
  virtual absl::Status CopyOnDevice(void* to, const void* from, size_t bytes) = 0;
  virtual absl::Status Fill(void* device, uint8_t byte, size_t bytes) = 0;
  // Waits for the stream's work; its first error (a kernel's, a copy's) naming the device.
  virtual absl::Status Synchronize() = 0;

  virtual DeviceCounters counters() const = 0;
};

// "twin:N" (always) or "cuda:N" (a CUDA build with that GPU). InvalidArgument for another name;
// Unavailable for a GPU this host or build does not have.
absl::StatusOr<std::unique_ptr<Device>> OpenDevice(absl::string_view name,
                                                   const DeviceOptions& options);

// The GPUs of this host (none without a CUDA build or a driver).
std::vector<DeviceInfo> CudaDevices();

// An array of T in a device's memory, freed with it.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  static absl::StatusOr<DeviceArray> Make(Device* device, size_t n) {
    DeviceArray out;
    out.device_ = device;
    out.size_ = n;
    if (n == 0) return out;
    absl::StatusOr<void*> p = device->Allocate(n * sizeof(T));
    if (!p.ok()) return p.status();
    out.data_ = static_cast<T*>(*p);
    return out;
  }
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  ~DeviceArray() {
    if (data_ != nullptr) device_->Free(data_);
  }
  // Grows (contents lost) to at least `n` elements.
  absl::Status Reserve(Device* device, size_t n) {
    if (n <= size_ && device_ == device) return absl::OkStatus();
    absl::StatusOr<DeviceArray> bigger = Make(device, n);
    if (!bigger.ok()) return bigger.status();
    *this = std::move(*bigger);
    return absl::OkStatus();
  }
  T* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Device* device_ = nullptr;
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace heterps::gpu
