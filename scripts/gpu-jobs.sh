#!/usr/bin/env bash
# The dlrm-small GPU jobs alone, for a GPU lent for minutes, from a bundle (scripts/bundle.sh):
# the plan's default block size against blocks of 64, without the tier's look-ahead, two epochs,
# asynchronous, each with where its step goes (the passes, the coordinator's waits, the tier's
# write-back), and PyTorch's fused
# DLRM on the same data; then the default job again on the same lines in the binary form
# (`heterps convert`), which parses nothing: where it is faster, text input held the GPU back.
# scripts/gpu-bench.sh is the whole experiment; this is its jobs' part.
#
#   scripts/gpu-jobs.sh OUT      # prints the figures; each job's output and metrics in OUT
out="$1"
if [[ -z "$out" ]]; then
  echo "usage: scripts/gpu-jobs.sh OUT" >&2
  exit 2
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.."
if [[ ! -x bin/heterps ]]; then
  echo "gpu-jobs: run it from a bundle (scripts/bundle.sh): no bin/heterps here" >&2
  exit 2
fi
for d in /usr/local/cuda/lib64 $(python3 -c 'import glob,site;print(" ".join(glob.glob(site.getsitepackages()[0]+"/nvidia/*/lib")))' 2>/dev/null); do
  [[ -d "$d" ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/device.txt"
bin/heterps gen-data --rows 500000 --seed 1 --out /tmp/d.tsv >/dev/null
# One GPU as a buyer pays for it (AWS on demand, us-east-1, 2026-01-19: scripts/gpu-bench.sh).
read -r mem_gbs memory_gib price < <(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 |
  awk '/H200/ {print "4800 139 7.912"; next} {print "3350 78 6.88"}')
printf 'name: g\ntypes:\n  - name: gpu\n    kind: gpu\n    tflops: 67\n    mem_gbs: %s\n    lookup_mrows: 5000\n    memory_gib: %s\n    network_gbps: 400\n    overhead_us: 5\n    latency_us: 10\n    price_per_hour: %s\n    units: 1\n    dp_loss: 0.05\n    local_device: cuda:0\n' "$mem_gbs" "$memory_gib" "$price" > /tmp/gpu.yaml
job() {  # name flags...
  local name="$1"; shift

  timeout -k 5 75 bin/heterps train --model examples/models/dlrm-small.yaml --cluster /tmp/gpu.yaml \
    --data "${DATA:-/tmp/d.tsv}" --job-dir /tmp/j-$name --checkpoint-every 0 --gpu-cache-gib 4 \
    --metrics-out "$out/$name.json" "$@" > "$out/$name.out" 2> "$out/$name.err"
  local rc=$?
  echo "== $name rc=$rc"
  grep -E "blocks of|samples/s |eval AUC" "$out/$name.out" | tr -s ' '
  python3 - "$out/$name.json" <<'PY' 2>/dev/null
import json, sys
m = json.load(open(sys.argv[1]))
print("  samples/s %.0f, step %.2f ms: run_step %.2f, commit %.2f" % (m["samples_per_second"], 1e3 * m["step_seconds"], 1e3 * m.get("run_step_seconds", 0), 1e3 * m.get("commit_seconds", 0)))
t = [s.get("gpu_tier") for s in m["stages"] if s.get("gpu_tier")]
if t: print("  tier", t[0])
for s in m["stages"]:
    print(" ", s["layers"], {k[:-18]: round(1e3 * v, 2) for k, v in s.items() if k.endswith("_seconds_per_batch")})
PY
}
job default
job no-lookahead --no-gpu-cache-lookahead
job block64 --block-size 64
job epochs2 --epochs 2
job async --mode async
timeout -k 5 100 python3 benchmarks/torch_dlrm.py --data /tmp/d.tsv --out "$out/torch.json" > /dev/null 2> "$out/torch.err"
echo "== torch rc=$?"; python3 -c "import json;m=json.load(open('$out/torch.json'));print(m['samples_per_second'], m['eval_auc'])"
bin/heterps convert --data /tmp/d.tsv --out /tmp/d.hpx > "$out/convert.out" 2>&1
echo "== convert rc=$?"; cat "$out/convert.out"
DATA=/tmp/d.hpx job binary
