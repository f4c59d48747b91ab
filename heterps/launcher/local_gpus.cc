#include "heterps/launcher/local_gpus.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "heterps/gpu/cuda/cuda_device.h"
#include "heterps/gpu/device.h"

namespace heterps::launcher {
namespace {

// Published figures of the GPUs a catalog is most likely to meet (NVIDIA datasheets: FP32 without
// tensor cores, memory bandwidth), and the on-demand price of one GPU of the nearest cloud
// instance, the instance's price over its GPUs: AWS EC2 On-Demand, us-east-1, Linux, as the AWS
// Price List API gave it on 2026-01-19 (the capture examples/clusters/cloud.yaml cites:
// aws/karpenter-provider-aws pkg/providers/pricing/zz_generated.pricing_aws.go). PRICES CHANGE.
//   H200 141GB  AWS p5en.48xlarge $63.296/h / 8 = $7.912   FP32 67 TFLOP/s, HBM3e 4.8 TB/s
//   H100 80GB   AWS p5.4xlarge    $6.88/h (1 GPU; p5.48xlarge $55.04 / 8 the same)
//                                                         FP32 67 TFLOP/s, HBM3 3.35 TB/s
//   A100 80GB   AWS p4de.24xlarge $27.44705/h / 8 = $3.431 FP32 19.5 TFLOP/s, HBM2e 2.04 TB/s
//   A100 40GB   AWS p4d.24xlarge  $21.957642/h / 8 = $2.745 FP32 19.5 TFLOP/s, HBM2 1.56 TB/s
//   L4          AWS g6.xlarge     $0.8048/h               FP32 30 TFLOP/s, GDDR6 0.30 TB/s
//   T4          AWS g4dn.xlarge   $0.526/h                FP32 8.1 TFLOP/s, GDDR6 0.32 TB/s
// The H200 comes first: its device name holds no "H100", but a list read in order must not
// take an H100 entry for it.
struct Known {
  const char* model;  // a substring of the device's name
  double tflops, tbs, price;
};
constexpr Known kKnown[] = {
    {"H200", 67, 4.8, 7.912},      {"H100", 67, 3.35, 6.88}, {"A100-SXM4-80GB", 19.5, 2.04, 3.431},
    {"A100", 19.5, 1.56, 2.745}, {"L4", 30, 0.30, 0.8048},  {"T4", 8.1, 0.32, 0.526},
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
