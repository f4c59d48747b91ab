#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds with warnings as errors, runs every test,
# then builds once more with AddressSanitizer and UndefinedBehaviorSanitizer and runs the unit tests.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build -DHETERPS_WERROR=ON
(cd build && ctest --output-on-failure -j "$(nproc)")
scripts/build.sh build-asan -DHETERPS_WERROR=ON -DHETERPS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DHETERPS_BUILD_BENCHMARKS=OFF
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --output-on-failure -j "$(nproc)" -L unit)
