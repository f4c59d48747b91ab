#!/usr/bin/env bash
# The main job on embedded defaults: installs what is missing, builds, and trains the example
# DLRM on synthetic data as a distributed job on this host: it profiles the host, plans with the
# auto scheduler, starts the parameter servers and stage workers as processes, trains and reports.
# Extra arguments go to `heterps train`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The command line alone (what the job runs: every role is this binary); scripts/test.sh builds
# the tests, benchmarks and the Python package too.
scripts/build.sh build --target heterps
exec build/tools/heterps train "$@"
