#!/usr/bin/env bash
# Configures and builds one build tree.
# Usage: scripts/build.sh DIR [--target NAME]... [extra cmake args...]
# With --target (anywhere after DIR), only those targets and what they need are built; without,
# everything. The other arguments go to the configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$1"; shift
targets=()
configure=()
while [[ $# -gt 0 ]]; do
  if [[ "$1" == "--target" ]]; then
    [[ $# -ge 2 ]] || { echo "scripts/build.sh: --target needs a name" >&2; exit 2; }
    targets+=(--target "$2"); shift 2
  else
    configure+=("$1"); shift
  fi
done
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release ${configure[@]+"${configure[@]}"} >/dev/null
cmake --build "$dir" -j "$(nproc)" ${targets[@]+"${targets[@]}"}
