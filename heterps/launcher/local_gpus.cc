#include "heterps/launcher/local_gpus.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/gpu/cuda/cuda_device.h"
#include "heterps/gpu/device.h"

namespace heterps::launcher {
namespace {

// Published figures of the GPUs a catalog is most likely to meet, and the on-demand price of one
// GPU of the nearest cloud instance (the instance's price over its GPUs; us-east-1, 2025):
//   H100 80GB   AWS p5.48xlarge   $98.32/h / 8   dense FP32 67 TFLOP/s, HBM3 3.35 TB/s
//   A100 80GB   AWS p4de.24xlarge $40.97/h / 8   FP32 19.5 TFLOP/s,  HBM2e 2.04 TB/s
//   A100 40GB   AWS p4d.24xlarge  $32.77/h / 8   FP32 19.5 TFLOP/s,  HBM2 1.56 TB/s
//   L4          AWS g6.xlarge     $0.805/h       FP32 30 TFLOP/s,    GDDR6 0.30 TB/s
//   T4          AWS g4dn.xlarge   $0.526/h       FP32 8.1 TFLOP/s,   GDDR6 0.32 TB/s
struct Known {
  const char* model;  // a substring of the device's name
  double tflops, tbs, price;
};
constexpr Known kKnown[] = {
    {"H100", 67, 3.35, 12.29},  {"H200", 67, 4.8, 12.29}, {"A100-SXM4-80GB", 19.5, 2.04, 5.12},
    {"A100", 19.5, 1.56, 4.10}, {"L4", 30, 0.30, 0.805},  {"T4", 8.1, 0.32, 0.526},
};

const config::ResourceType* HostCpu(const config::ClusterSpec& cluster) {
  for (const config::ResourceType& t : cluster.types) {
    if (t.local_device == "cpu") return &t;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> AddLocalGpus(config::ClusterSpec* cluster, int emulate) {
  std::vector<std::string> added;
  const config::ResourceType* cpu = HostCpu(*cluster);
  const config::ResourceType host = cpu != nullptr ? *cpu : config::ResourceType();
  // Real GPUs, one type per model.
  for (const gpu::DeviceInfo& info : gpu::CudaDevices()) {
    const std::string name = absl::StrCat("gpu-", info.compute_capability);
    if (cluster->FindType(name) >= 0) {
      ++cluster->types[cluster->FindType(name)].units;
      continue;
    }
    config::ResourceType t = host;
    t.name = name;
    t.kind = config::DeviceKind::kGpu;
    t.local_device = info.name;
    t.units = 1;
    t.memory = static_cast<double>(info.memory_bytes);
    t.flops = 10e12;
    t.mem_bandwidth = 1e12;
    t.price_per_hour = 2.0;
    for (const Known& k : kKnown) {
      if (absl::StrContains(info.model, k.model)) {
        t.flops = k.tflops * 1e12;
        t.mem_bandwidth = k.tbs * 1e12;
        t.price_per_hour = k.price;
        break;
      }
    }
    t.lookup_rate = t.mem_bandwidth / 64;  // a random row costs a 64-byte sector or more
    t.dp_loss = 0.05;
    cluster->types.push_back(t);
    added.push_back(absl::StrFormat("%s: %s, %.0f GiB, as type %s ($%.2f/h)", info.name, info.model,
                                    info.memory_bytes / double(1 << 30), name, t.price_per_hour));
  }
  if (emulate > 0) {
    config::ResourceType t = host;
    t.name = "gpu-twin";
    t.kind = config::DeviceKind::kGpu;
    t.local_device = "twin:0";
    t.units = emulate;
    cluster->types.push_back(t);
    added.push_back(absl::StrCat("twin:0..", emulate - 1,
                                 ": the host twin of a GPU (emulated on "
                                 "this host's cores, for testing), as type gpu-twin"));
  }
  return added;
}

}  // namespace heterps::launcher
