#include "heterps/gpu/cuda/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <iterator>
#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace heterps::gpu {
namespace {

absl::Status CudaError(absl::string_view device, absl::string_view what, cudaError_t error) {
  return absl::UnavailableError(absl::StrCat(device, ": ", what, ": ", cudaGetErrorString(error)));
}

class CudaDevice : public Device {
 public:
  static absl::StatusOr<std::unique_ptr<Device>> Open(int index, const DeviceOptions& options) {
    const std::string name = absl::StrCat("cuda:", index);
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) {
      return CudaError(name, "no usable GPU", e);
    }
    if (index < 0 || index >= count) {
      return absl::UnavailableError(
          absl::StrCat(name, ": this host has ", count, " GPU", count == 1 ? "" : "s"));
    }
    auto device = std::unique_ptr<CudaDevice>(new CudaDevice(index, name));
    if (cudaError_t e = cudaSetDevice(index); e != cudaSuccess) {
      return CudaError(name, "cannot select it", e);
    }
    cudaDeviceProp props;
    if (cudaError_t e = cudaGetDeviceProperties(&props, index); e != cudaSuccess) {
      return CudaError(name, "cannot read its properties", e);
    }
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    device->info_.model = props.name;
    device->info_.compute_capability = props.major * 10 + props.minor;
    device->info_.memory_bytes = options.memory_budget_bytes > 0
                                     ? std::min<int64_t>(options.memory_budget_bytes, free)
                                     : static_cast<int64_t>(free);
    if (cudaError_t e = cudaStreamCreateWithFlags(&device->stream_, cudaStreamNonBlocking);
        e != cudaSuccess) {
      return CudaError(name, "cannot create a stream", e);
    }
    return std::unique_ptr<Device>(std::move(device));
  }

  ~CudaDevice() override {
    cudaSetDevice(index_);
    if (stream_ != nullptr) {
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    for (const auto& [p, bytes] : device_) cudaFree(p);
    for (void* p : host_) cudaFreeHost(p);
  }

  const DeviceInfo& info() const override { return info_; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    absl::MutexLock lock(&mu_);
    if (counters_.bytes_in_use + static_cast<int64_t>(bytes) > info_.memory_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(info_.name, ": ", bytes, " bytes do not fit: ", counters_.bytes_in_use,
                       " of ", info_.memory_bytes, " in use"));
    }
    cudaSetDevice(index_);
    void* p = nullptr;
    if (cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess) {
      return absl::ResourceExhaustedError(
          absl::StrCat(info_.name, ": cudaMalloc of ", bytes, " bytes: ", cudaGetErrorString(e)));
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
    cudaFree(pointer);
  }

  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    void* p = nullptr;
    if (cudaError_t e = cudaMallocHost(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess) {
      return CudaError(info_.name, "cannot pin host memory", e);
    }
    absl::MutexLock lock(&mu_);
    host_.push_back(p);
    return p;
  }

  void FreeHost(void* pointer) override {
    absl::MutexLock lock(&mu_);
    auto it = std::find(host_.begin(), host_.end(), pointer);
    if (it == host_.end()) return;
    host_.erase(it);
    cudaFreeHost(pointer);
  }

  bool IsDeviceMemory(const void* pointer, size_t bytes) const override {
    absl::MutexLock lock(&mu_);
    const char* p = static_cast<const char*>(pointer);
    auto it = device_.upper_bound(const_cast<char*>(p));
    if (it == device_.begin()) return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second;
  }

  Stream stream() override { return stream_; }

  absl::Status CopyToDevice(void* device, const void* host, size_t bytes) override {
    return Copy(device, host, bytes, cudaMemcpyHostToDevice, &DeviceCounters::host_to_device_bytes);
  }
  absl::Status CopyToHost(void* host, const void* device, size_t bytes) override {
    return Copy(host, device, bytes, cudaMemcpyDeviceToHost, &DeviceCounters::device_to_host_bytes);
  }
  absl::Status CopyOnDevice(void* to, const void* from, size_t bytes) override {
    return Copy(to, from, bytes, cudaMemcpyDeviceToDevice, &DeviceCounters::device_to_device_bytes);
  }

  absl::Status Fill(void* device, uint8_t byte, size_t bytes) override {
    if (bytes == 0) return absl::OkStatus();
    cudaSetDevice(index_);
    if (cudaError_t e = cudaMemsetAsync(device, byte, bytes, stream_); e != cudaSuccess) {
      return CudaError(info_.name, "memset", e);
    }
    return absl::OkStatus();
  }

  absl::Status Synchronize() override {
    cudaSetDevice(index_);
    if (cudaError_t e = cudaStreamSynchronize(stream_); e != cudaSuccess) {
      return CudaError(info_.name, "the stream's work failed", e);
    }
    return absl::OkStatus();
  }

  DeviceCounters counters() const override {
    absl::MutexLock lock(&mu_);
    return counters_;
  }

 private:
  CudaDevice(int index, std::string name) : index_(index) { info_.name = std::move(name); }

  absl::Status Copy(void* to, const void* from, size_t bytes, cudaMemcpyKind kind,
                    int64_t DeviceCounters::*field) {
    if (bytes == 0) return absl::OkStatus();
    cudaSetDevice(index_);
    if (cudaError_t e = cudaMemcpyAsync(to, from, bytes, kind, stream_); e != cudaSuccess) {
      return CudaError(info_.name, "copy", e);
    }
    absl::MutexLock lock(&mu_);
    counters_.*field += static_cast<int64_t>(bytes);
    return absl::OkStatus();
  }

  const int index_;
  DeviceInfo info_;
  cudaStream_t stream_ = nullptr;
  mutable absl::Mutex mu_;
  std::map<char*, size_t> device_ ABSL_GUARDED_BY(mu_);
  std::vector<void*> host_ ABSL_GUARDED_BY(mu_);
  DeviceCounters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<std::unique_ptr<Device>> OpenCudaDevice(int index, const DeviceOptions& options) {
  return CudaDevice::Open(index, options);
}

std::vector<DeviceInfo> CudaDevices() {
  std::vector<DeviceInfo> out;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return out;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props;
    if (cudaGetDeviceProperties(&props, i) != cudaSuccess) continue;
    DeviceInfo info;
    info.name = absl::StrCat("cuda:", i);
    info.model = props.name;
    info.memory_bytes = static_cast<int64_t>(props.totalGlobalMem);
    info.compute_capability = props.major * 10 + props.minor;
    out.push_back(info);
  }
  return out;
}

bool BuiltWithCuda() { return true; }

}  // namespace heterps::gpu
