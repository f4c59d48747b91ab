// What a GPU source built for two targets sees of the one it is built for (docs/gpu.md, "Same
// source, two targets"). A shared source (*.inl) is included by a g++ translation unit, which
// builds it for the host twin with Thrust's OpenMP backend, and by an nvcc one (*.cu), which builds
// it for CUDA GPUs:
//
//   HETERPS_HD           marks the functors both compilers build for their device
//   HETERPS_GPU_TARGET   the namespace the target's code lives in (twin, cuda), so that both
//                        builds link into one program
//   Policy(stream)       Thrust's execution policy on the device's stream
//
// Nothing else in heterps tests for CUDA with the preprocessor.
#pragma once

#include <thrust/execution_policy.h>

#include "heterps/gpu/device.h"

#if defined(__CUDACC__)
#include <cuda_runtime_api.h>
#include <thrust/system/cuda/execution_policy.h>
#define HETERPS_HD __host__ __device__
#define HETERPS_GPU_TARGET cuda
#else
#include <thrust/system/omp/execution_policy.h>
#define HETERPS_HD
#define HETERPS_GPU_TARGET twin
#endif

namespace heterps::gpu::HETERPS_GPU_TARGET {

#if defined(__CUDACC__)
inline auto Policy(Stream stream) {
  return thrust::cuda::par.on(static_cast<cudaStream_t>(stream));
}
#else
inline auto Policy(Stream) { return thrust::omp::par; }
#endif

}  // namespace heterps::gpu::HETERPS_GPU_TARGET
