#!/usr/bin/env bash
# The main job on embedded defaults: installs what is missing, builds, and plans the example
# DLRM on the example cloud catalog. Extra arguments go to `heterps plan`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
exec build/tools/heterps plan "$@"
