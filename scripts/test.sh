#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors (the CUDA sources
# too, where the CUDA toolkit is found), runs every test (those that need a GPU report themselves
# skipped where there is none), then builds the libraries and their unit tests once more with
# AddressSanitizer and UndefinedBehaviorSanitizer (host code: the host twin of the GPU code) and
# runs them, but for the long computations that the first run covers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The tests' own sources at -O1: a quarter less compile time than the build's -O3, and their run
# time is in the code they test.
scripts/build.sh build -DHETERPS_WERROR=ON -DHETERPS_TEST_COMPILE_OPTIONS=-O1
# g++ reads absl's lock annotations (ABSL_GUARDED_BY, ...) as nothing: clang checks them.
scripts/thread_safety.py build
(cd build && ctest --output-on-failure -j "$(nproc)")
# -O1 with line tables: a third of -O2 -g's compile time, and the sanitizers' reports keep their
# file:line. The tests' own sources at -O0: instrumented at -O1 they took 2.6x as long to compile
# (the gtest macros), and their run time is in the code they test.
scripts/build.sh build-asan -DHETERPS_WERROR=ON -DHETERPS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DHETERPS_TEST_COMPILE_OPTIONS=-O0 \
  -DHETERPS_BUILD_BENCHMARKS=OFF -DHETERPS_BUILD_TOOLS=OFF -DHETERPS_CUDA=OFF \
  -DHETERPS_UNIT_TESTS_ONLY=ON
# Leaks of third-party code that cannot be fixed here: scripts/lsan.supp says which and why.
suppressions="$PWD/scripts/lsan.supp"
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS="suppressions=$suppressions" \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --output-on-failure -j "$(nproc)" -L unit -LE heavy)
