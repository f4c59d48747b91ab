#!/usr/bin/env bash
# The one list of what heterps needs from Debian 12. Installs only what is missing, so a machine
# that already has everything needs no network. `--fuzz` adds clang's libFuzzer runtime, for
# scripts/fuzz.sh only (the build and the tests do not need it).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libabsl-dev           # Status, StatusOr, flat_hash_map, Mutex, time
  libyaml-cpp-dev       # model and cluster specs
  nlohmann-json3-dev    # plan and profile JSON
  libcli11-dev          # command line
  libeigen3-dev         # dense math
  libthrust-dev libcub-dev   # the host twin of the GPU code, where no CUDA toolkit brings its own
  librocksdb-dev        # the parameter server's SSD tier
  libxxhash-dev         # checkpoint checksums (XXH3)
  zlib1g-dev libzstd-dev   # gzip and zstd compressed data files
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc   # RPC between processes
  libgtest-dev libgmock-dev   # tests
  libcpp-httplib-dev    # the Prometheus /metrics endpoint
  libssl-dev            # each job's own TLS certificate (OpenSSL)
  python3-dev pybind11-dev   # the Python package (python/)
  libjs-chart.js        # Chart.js, inlined into every job report (report.html)
  chromium              # tests: the job report opened in a headless browser
  openssl               # tests: a self-signed certificate for the TLS test
  iproute2              # tests: regions as network namespaces (ip netns, veth, tc's tbf)
  libbenchmark-dev      # micro-benchmarks
  libzmq3-dev           # ps_bench: plain ZeroMQ beside gRPC, the reference for the transport
  openmpi-bin           # tests: a job started by mpirun (launch only; heterps does not link MPI)
  prometheus            # tests: promtool lints the /metrics exposition (its server is kept off)
  python3-venv          # tests: the Python wheel installed into a fresh virtual environment
  patchelf              # scripts/bundle.sh: a relocatable bundle for GPU hosts
  clang libomp-14-dev   # tests: the thread-safety analysis of absl's lock annotations (omp.h:
                        # the sources built with OpenMP include it)
)
if [[ "${1:-}" == "--fuzz" ]]; then
  PACKAGES+=(libclang-rt-14-dev)   # libFuzzer (-fsanitize=fuzzer)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "heterps: installing ${missing[*]}" >&2
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  # Only promtool is wanted of the prometheus package: where systemd started the server that it
  # installed just now, stop it and keep it from starting at boot.
  if [[ " ${missing[*]} " == *" prometheus "* ]] && [[ -d /run/systemd/system ]]; then
    $SUDO systemctl disable --now prometheus >&2 2>/dev/null || true
  fi
fi
