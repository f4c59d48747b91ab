// What a GPU source built for two targets sees of the one it is built for (docs/gpu.md, "Same
// source, two targets"). A shared source (*.inl) is included by a g++ translation unit, which
// builds it for the host twin with Thrust's OpenMP backend, and by an nvcc one (*.cu), which builds
// it for CUDA GPUs:
//
//   HETERPS_HD           marks the functors both compilers build for their device
//   HETERPS_GPU_TARGET   the namespace the target's code lives in (twin, cuda), so that both
//                        builds link into one program
//   Policy(stream)       Thrust's execution policy on the device's stream, which does not wait
//                        for the stream after each call (a GPU's par_nosync): the stream orders
//                        the work, and the host waits with Device::Synchronize before it reads
//                        what the device wrote
//   Policy(stream, scratch)  the same, with temporary storage from a gpu::Scratch (scratch.h)
//                        for the algorithms that need it, allocated once instead of per call
//
// Nothing else in heterps tests for CUDA with the preprocessor.
#pragma once

#include <thrust/execution_policy.h>

#include "heterps/gpu/device.h"
#include "heterps/gpu/scratch.h"

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
  return thrust::cuda::par_nosync.on(static_cast<cudaStream_t>(stream));
}
inline auto Policy(Stream stream, Scratch& scratch) {
  return thrust::cuda::par_nosync(scratch).on(static_cast<cudaStream_t>(stream));
}
#else
inline auto Policy(Stream) { return thrust::omp::par; }
inline auto Policy(Stream, Scratch& scratch) { return thrust::omp::par(scratch); }
#endif

}  // namespace heterps::gpu::HETERPS_GPU_TARGET
