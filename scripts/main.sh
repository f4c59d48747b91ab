#!/usr/bin/env bash
# The main job on embedded defaults: installs what is missing, builds, and trains the example
# DLRM on synthetic data as a distributed job on this host: it profiles the host, plans with the
# rl scheduler, starts the parameter servers and stage workers as processes, trains and reports.
# Extra arguments go to `heterps train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh build
exec build/tools/heterps train "$@"
