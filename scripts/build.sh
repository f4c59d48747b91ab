#!/usr/bin/env bash
# Configures and builds one build tree.
# Usage: scripts/build.sh DIR [--target NAME]... [extra cmake args...]
# With --target, only those targets (and what they need) are built; without, everything.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$1"; shift
targets=()
while [[ $# -gt 1 && "$1" == "--target" ]]; do
  targets+=(--target "$2"); shift 2
done
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
