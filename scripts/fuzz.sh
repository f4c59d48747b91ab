#!/usr/bin/env bash
# Coverage-guided fuzzing of every target in fuzz/ with libFuzzer: installs clang if missing,
# builds the targets with -fsanitize=fuzzer,address,undefined in build-fuzz/, and runs each for
# SECONDS (default 60) from its seed corpus (fuzz/corpus/<target>/; new inputs found go to
# build-fuzz/corpus/<target>/, the repository's corpus is never written). A crash stops with the
# target's report and the input in build-fuzz/crash-<target>-*: add it to fuzz/corpus/<target>/,
# where the test suite replays it from then on.
#
#   scripts/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
scripts/deps.sh --fuzz
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DHETERPS_FUZZ=ON -DHETERPS_CUDA=OFF -DHETERPS_BUILD_TOOLS=OFF -DHETERPS_BUILD_BENCHMARKS=OFF \
  >/dev/null
targets=$(cd fuzz && ls fuzz_*.cc | sed 's/\.cc$//')
cmake --build build-fuzz -j "$(nproc)" --target $targets
for t in $targets; do
  name="${t#fuzz_}"
  mkdir -p "build-fuzz/corpus/$name"
  echo "fuzz: $t for ${seconds} s"
  build-fuzz/fuzz/"$t" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="build-fuzz/crash-$name-" "build-fuzz/corpus/$name" "fuzz/corpus/$name"
done
echo "fuzz: every target ran ${seconds} s without a crash"
