#!/usr/bin/env bash
# A relocatable bundle of heterps for a GPU host that has the NVIDIA driver and a CUDA toolkit but
# none of our Debian packages and no package registry (docs/gpu.md):
#
#   scripts/bundle.sh [OUT_DIR]        # default: bundle/
#
# Builds for any x86-64 CPU with AVX2 (x86-64-v3) with the CUDA sources, then packs
#   bin/       heterps, gpu_bench and the GPU tests
#   lib/       the shared libraries they link that are not the C and C++ runtimes, the driver or
#              CUDA's (found with ldd); every binary's RPATH is $ORIGIN/../lib
#   examples/, tests/specs/, scripts/gpu-bench.sh: what the benchmark and the tests read
# Run on the GPU host from the bundle's directory: scripts/gpu-bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-bundle}"
scripts/deps.sh
if ! command -v nvcc >/dev/null && [[ ! -x /usr/local/cuda/bin/nvcc ]]; then
  echo "bundle: no CUDA toolkit (nvcc) here: a bundle for GPUs needs one" >&2
  exit 2
fi
export PATH="$PATH:/usr/local/cuda/bin"
# Only what the bundle packs (the whole tree's tests and benchmarks would double the build).
targets=()
for t in heterps gpu_bench dense_cuda_test dense_gpu_test gpu_tier_test gpu_tier_cuda_test \
         gpu_device_test; do
  targets+=(--target "$t")
done
scripts/build.sh build-bundle "${targets[@]}" -DHETERPS_NATIVE=OFF \
  -DCMAKE_CXX_FLAGS=-march=x86-64-v3 -DHETERPS_CUDA=ON -DHETERPS_WERROR=ON
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/scripts" "$out/tests"
for b in tools/heterps benchmarks/gpu_bench heterps/dense/gpu/dense_cuda_test \
         heterps/dense/gpu/dense_gpu_test heterps/ps/gpu/gpu_tier_test \
         heterps/ps/gpu/gpu_tier_cuda_test heterps/gpu/gpu_device_test; do
  cp "build-bundle/$b" "$out/bin/"
done
# The shared libraries the binaries need, but the C and C++ runtimes, the driver and CUDA's,
# which the host provides.
for b in "$out"/bin/*; do ldd "$b"; done | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libpthread*|libdl.so*|librt.so*|libstdc++*|libgcc_s*) ;;
    libcuda.so*|libcudart*|libcublas*|libnvidia*|libnccl*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
chmod u+w "$out"/lib/*
for f in "$out"/bin/* "$out"/lib/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
cp -r examples "$out/"
cp -r tests/specs "$out/tests/"
cp scripts/gpu-bench.sh scripts/gpu-jobs.sh "$out/scripts/"
mkdir -p "$out/benchmarks"
cp benchmarks/torch_dlrm.py "$out/benchmarks/"
echo "bundle: $(du -sh "$out" | cut -f1) in $out ($(ls "$out/lib" | wc -l) libraries)"
