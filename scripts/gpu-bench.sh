#!/usr/bin/env bash
# Everything only a GPU can show about heterps, in one run of under 8 minutes, from a bundle
# (scripts/bundle.sh) on a GPU host, or from a build tree; --host-twin runs the same experiment at
# small sizes on the host twin of a GPU (CI does). docs/gpu.md; docs/benchmarks.md, "GPU".
#
#   scripts/gpu-bench.sh [--host-twin] [--build DIR] [--out DIR] [--quick]
#
# --quick leaves out what takes long and moves least between runs (memcheck of the dense test,
# ctr-dnn's jobs, the PyTorch variants but the fused one), for a GPU lent for minutes.
#
# 1. The GPU tests (and compute-sanitizer's memcheck on them, where it is installed).
# 2. gpu_bench: the fc layers' share of the device's FP32 GEMM rate, the GPU tier's hit rate
#    against its budget (Zipf and uniform keys) and its lookups against a raw gather.
# 3. Training jobs of dlrm-small and ctr-dnn, and of dlrm-small with a GPU tier far smaller than
#    its tables: all on the CPU, all on the GPU (with the tier), and as the planner mixes them:
#    samples/s, eval AUC, $ per epoch at the catalog's prices, predicted against measured (and
#    dlrm-small on the GPU again, planned with the profile its first run calibrated; and for two
#    epochs, the second with every row already in the tier). On a GPU, its utilisation sampled by
#    nvidia-smi every 100 ms while each job runs.
# Writes <out>/results.json and <out>/results.md, and prints the table. Every step has a time limit
# (a test 150 s, the micro-benchmarks 150 s, a job 120 s, each killed 10 s after its SIGTERM): one
# that hangs on a GPU is reported as timed out and the rest still run. Each run starts its jobs
# afresh in <out>.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
twin=0
quick=0
build=""
out="gpu-bench-out"
while (($#)); do
  case "$1" in
    --host-twin) twin=1 ;;
    --quick) quick=1 ;;
    --build) build="$2"; shift ;;
    --out) out="$2"; shift ;;
    *) echo "gpu-bench: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
cd "$root"
mkdir -p "$out/jobs"
out="$(cd "$out" && pwd)"
if [[ -n "$build" ]]; then
  bin=(); for b in tools/heterps benchmarks/gpu_bench heterps/dense/gpu/dense_cuda_test \
                   heterps/dense/gpu/dense_gpu_test heterps/ps/gpu/gpu_tier_test \
                   heterps/ps/gpu/gpu_tier_cuda_test heterps/gpu/gpu_device_test; do
    bin+=("$build/$b")
  done
  heterps="$build/tools/heterps"; gpu_bench="$build/benchmarks/gpu_bench"
elif [[ -x "$root/bin/heterps" ]]; then
  bin=("$root"/bin/*); heterps="$root/bin/heterps"; gpu_bench="$root/bin/gpu_bench"
else
  echo "gpu-bench: give --build DIR, or run from a bundle (scripts/bundle.sh)" >&2; exit 2
fi
# The host's CUDA libraries (cuBLASLt, the runtime), wherever its toolkit or PyTorch keeps them.
for d in /usr/local/cuda/lib64 $(python3 -c 'import glob,site;print(" ".join(glob.glob(site.getsitepackages()[0]+"/nvidia/*/lib")))' 2>/dev/null || true); do
  [[ -d "$d" ]] && export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$d"
done

if ((twin)); then
  device=twin:0; rows=20000; batch=512; micro=(--batch 512 --rows 100000 --seconds 0.3)
  cache_gib=0.002; small_cache_gib=0.0002
else
  device=cuda:0; rows=500000; batch=0; micro=(--batch 8192 --rows 10000000 --seconds 2)
  cache_gib=4; small_cache_gib=0.01
fi
echo "gpu-bench: $device, $(date -u +%FT%TZ)" >&2

# 1. The GPU tests.
tests_json="["
for t in "${bin[@]}"; do
  name="$(basename "$t")"
  case "$name" in *_test) ;; *) continue ;; esac
  if timeout -k 10 150 "$t" >"$out/$name.log" 2>&1; then
    # gtest's summary: a test whose every case was skipped (no GPU here) is skipped, not passed.
    ran="$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$out/$name.log" | tail -1)"
    skipped="$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$out/$name.log" | tail -1)"
    if [[ "${ran:-0}" == 0 && -n "$skipped" ]]; then result=skipped
    elif [[ -n "$skipped" ]]; then result="passed ($skipped cases skipped)"
    else result=passed; fi
  elif (($? == 124 || $? == 137)); then
    result="timed out"
  else
    result=failed
  fi
  sanitizer=""
  if ((!twin)) && command -v compute-sanitizer >/dev/null \
     && [[ ("$name" == dense_cuda_test && $quick == 0) || "$name" == gpu_tier_cuda_test ]]; then
    timeout -k 10 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$t" \
      >"$out/$name.memcheck.log" 2>&1 \
      && sanitizer=clean || sanitizer=errors
  fi
  tests_json+="{\"test\": \"$name\", \"result\": \"$result\", \"memcheck\": \"$sanitizer\"},"
  echo "gpu-bench: $name $result ${sanitizer:+(memcheck $sanitizer)}" >&2
done
tests_json="${tests_json%,}]"

# 2. The micro-benchmarks.
rm -f "$out/micro.json"
timeout -k 10 150 "$gpu_bench" --device "$device" "${micro[@]}" --out "$out/micro.json" \
  >"$out/micro.md" 2>"$out/micro.err" || echo "gpu-bench: gpu_bench failed: $(tail -1 "$out/micro.err")" >&2

# 3. The jobs: three catalogs (the CPU, the GPU, both) and three models.
python3 - "$out" "$device" <<'PY'
import re, sys
out, device = sys.argv[1], sys.argv[2]
cpu = open("examples/clusters/local.yaml").read()
cpu_type = cpu[cpu.index("  - name: host-cpu"):]
if device.startswith("twin"):
    gpu_type = cpu_type.replace("host-cpu", "gpu").replace("kind: cpu", "kind: gpu") \
                       .replace("local_device: cpu", "local_device: " + device) \
                       .replace("units: 2", "units: 1")
else:
    # Priced as a buyer pays for one GPU (AWS on-demand, us-east-1, AWS Price List API
    # 2026-01-19, as launcher/local_gpus.cc and examples/clusters/cloud.yaml cite): an H200 is one
    # GPU of a p5en.48xlarge, $63.296/h / 8; an H100 a p5.4xlarge, $6.88/h. FP32 67 TFLOP/s
    # either way; HBM 4.8 TB/s and 141 GB, or 3.35 TB/s and 80 GB.
    import subprocess
    name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader", "-i",
                           device.split(":")[1]], capture_output=True, text=True).stdout
    mem_gbs, memory_gib, price = (4800, 139, "7.912") if "H200" in name else (3350, 78, "6.88")
    gpu_type = ("  - name: gpu\n    kind: gpu\n    tflops: 67\n    mem_gbs: %d\n"
                "    lookup_mrows: 5000\n    memory_gib: %d\n    network_gbps: 400\n"
                "    overhead_us: 5\n    latency_us: 10\n    price_per_hour: %s\n"
                "    units: 1\n    dp_loss: 0.05\n    local_device: %s\n") % (
        mem_gbs, memory_gib, price, device)
head = "name: %s\ntypes:\n"
open(out + "/cpu.yaml", "w").write(head % "bench-cpu" + cpu_type)
open(out + "/gpu.yaml", "w").write(head % "bench-gpu" + gpu_type)
open(out + "/both.yaml", "w").write(head % "bench-both" + cpu_type + gpu_type)
PY
data="$out/data.tsv"
"$heterps" gen-data --rows "$rows" --seed 1 --out "$data" >/dev/null
run_job() {  # name model catalog [extra flags...]
  local name="$1" model="$2" catalog="$3"; shift 3
  local dir="$out/jobs/$name"
  rm -rf "$dir"
  local flags=(train --model "examples/models/$model.yaml" --cluster "$out/$catalog.yaml"
               --data "$data" --job-dir "$dir" --metrics-out "$dir/metrics.json"
               --checkpoint-every 0 "$@")
  if ((batch > 0)) && [[ " $* " != *" --batch "* ]]; then flags+=(--batch "$batch"); fi
  mkdir -p "$dir"
  local sampler=""
  if ((!twin)) && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 100 \
      >"$dir/gpu_util" 2>/dev/null &
    sampler=$!
  fi
  if timeout -k 10 120 "$heterps" "${flags[@]}" >"$dir/out" 2>"$dir/err"; then
    echo "gpu-bench: job $name done" >&2
  elif (($? == 124 || $? == 137)); then
    echo "timed out after 120 s" >>"$dir/err"
    echo "gpu-bench: job $name timed out" >&2
  else
    echo "gpu-bench: job $name failed: $(tail -1 "$dir/err")" >&2
  fi
  if [[ -n "$sampler" ]]; then kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true; fi
}
models=(dlrm-small ctr-dnn)
((quick)) && models=(dlrm-small)
for model in "${models[@]}"; do
  run_job "$model-cpu" "$model" cpu
  run_job "$model-gpu" "$model" gpu --gpu-cache-gib "$cache_gib"
  run_job "$model-mixed" "$model" both
done
run_job "dlrm-small-bigtables-gpu" dlrm-small gpu --gpu-cache-gib "$small_cache_gib"
# The prediction after calibration: dlrm-small on the GPU again, planned with the profile the first
# run measured.
if [[ -f "$out/jobs/dlrm-small-gpu/calibrated_profile.json" ]]; then
  run_job "dlrm-small-gpu-calibrated" dlrm-small gpu --gpu-cache-gib "$cache_gib" \
    --profile "$out/jobs/dlrm-small-gpu/calibrated_profile.json"
fi
# On a GPU: the tier loading each step's missing rows when the step starts, rather than fetched
# while the step before runs (GpuTier::Anticipate): the same run, the servers' round trip waited.
if ((!twin)); then
  run_job "dlrm-small-gpu-no-lookahead" dlrm-small gpu --gpu-cache-gib "$cache_gib" \
    --no-gpu-cache-lookahead
fi
# Two epochs: the second finds every row in the tier (4 GB holds dlrm-small's tables whole).
run_job "dlrm-small-gpu-2epochs" dlrm-small gpu --gpu-cache-gib "$cache_gib" --epochs 2
# The GPU job asynchronous, and at 4 times the batch.
run_job "dlrm-small-gpu-async" dlrm-small gpu --gpu-cache-gib "$cache_gib" --mode async
base=$((batch > 0 ? batch : 2048))  # dlrm-small's own batch where none is given
run_job "dlrm-small-gpu-batch4x" dlrm-small gpu --gpu-cache-gib "$cache_gib" --batch $((4 * base))
run_job "dlrm-small-gpu-async-batch4x" dlrm-small gpu --gpu-cache-gib "$cache_gib" --mode async \
  --batch $((4 * base))
# A plain PyTorch DLRM on the same GPU and data, where PyTorch sees the GPU: as its experts write
# it (one fused EmbeddingBag call a step), the same with torch.compile on the dense part, and the
# naive program (26 EmbeddingBag calls).
if ((!twin)) && python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  variants=(fused compile per-table)
  ((quick)) && variants=(fused)
  for variant in "${variants[@]}"; do
    rm -f "$out/torch-$variant.json"
    case "$variant" in fused) extra=() ;; compile) extra=(--compile) ;; *) extra=(--per-table) ;; esac
    timeout -k 10 150 python3 "$root/benchmarks/torch_dlrm.py" --data "$data" "${extra[@]}" \
      --out "$out/torch-$variant.json" >/dev/null 2>"$out/torch-$variant.err" \
      || echo "gpu-bench: the PyTorch DLRM ($variant) failed: $(tail -1 "$out/torch-$variant.err")" >&2
  done
fi

# Results.
python3 - "$out" "$device" "$tests_json" <<'PY'
import json, os, sys
out, device, tests = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
micro = json.load(open(out + "/micro.json")) if os.path.exists(out + "/micro.json") else None
jobs = []
for name in sorted(os.listdir(out + "/jobs")):
    path = "%s/jobs/%s/metrics.json" % (out, name)
    if not os.path.exists(path):
        jobs.append({"job": name, "failed": open("%s/jobs/%s/err" % (out, name)).read()[-300:]})
        continue
    m = json.load(open(path))
    epoch_hours = m["train_samples"] / max(m["samples_per_second"], 1e-9) / 3600
    tier = [s.get("gpu_tier") for s in m["stages"] if s.get("gpu_tier")]
    util_path = "%s/jobs/%s/gpu_util" % (out, name)
    util = [float(x) for x in open(util_path).read().split() if x.replace(".", "").isdigit()] \
        if os.path.exists(util_path) else []
    # The step's parts per batch, ms, from the summary's per-stage figures.
    parts = {k: 1e3 * s.get(k + "_seconds_per_batch", 0) for s in m["stages"][:1]
             for k in ("measured", "ps", "prefetch", "step_end", "send", "lookup", "dense", "rows",
                       "gradients")}
    jobs.append({"job": name, "samples_per_second": m["samples_per_second"],
                 "predicted_samples_per_second": m["predicted_samples_per_second"],
                 "measured_over_predicted": m["samples_per_second"] / m["predicted_samples_per_second"]
                 if m["predicted_samples_per_second"] else None,
                 "eval_auc": m["eval_auc"], "usd_per_epoch": m["plan_cost_per_hour_usd"] * epoch_hours,
                 "plan": [(s["layers"], s["device"] + (", dense held" if s.get("dense_held") else ""),
                           s["units"]) for s in m["stages"]],
                 "tier_hit_rate": tier[0]["hit_rate"] if tier else None,
                 "tier_feeds_stage": tier[0].get("feeds_stage", False) if tier else False,
                 "gpu_utilisation_mean": sum(util) / len(util) if util else None,
                 "stage0_ms_per_batch": parts,
                 "tier_loaded_rows_per_batch": tier[0]["loaded_rows_per_batch"] if tier else None,
                 "tier_ahead_rows_per_batch": tier[0].get("ahead_rows_per_batch") if tier else None})
torch = [json.load(open("%s/torch-%s.json" % (out, v))) for v in ("fused", "compile", "per-table")
         if os.path.exists("%s/torch-%s.json" % (out, v))]
results = {"device": device, "micro": micro, "tests": tests, "jobs": jobs, "pytorch_dlrm": torch}
json.dump(results, open(out + "/results.json", "w"), indent=1)
if micro:
    lines = ["On %s (%s)%s:" % (micro["device"], micro["model"],
             ", the host twin: figures of the host's cores, not of a GPU" if micro["emulated"] else "")]
else:
    lines = ["On %s (the micro-benchmarks failed: micro.err):" % device]
lines += ["", "| test | result |", "|---|---|"]
lines += ["| %s | %s%s |" % (t["test"], t["result"], ", memcheck " + t["memcheck"] if t["memcheck"] else "")
          for t in tests]
lines += ["", open(out + "/micro.md").read().strip() if micro else "", "",
          "| job | plan (layers: device x units) | samples/s | measured/predicted | eval AUC | $/epoch | tier hit rate | stage 0 ms/step: busy, ps wait, prefetch, step end | of busy: lookup, dense, rows, gradients | GPU util |",
          "|---|---|---:|---:|---:|---:|---:|---|---|---:|"]
for j in jobs:
    if "failed" in j:
        lines.append("| %s | failed: %s |  |  |  |  |  |  |  |  |" % (j["job"], (j["failed"].strip().splitlines() or ["no message"])[-1]))
        continue
    plan = "; ".join("%s: %s x %d" % p for p in j["plan"])
    p = j["stage0_ms_per_batch"]
    lines.append("| %s | %s | %.0f | %s | %.4f | %.3g | %s | %.2f, %.2f, %.2f, %.2f | %.2f, %.2f, %.2f, %.2f | %s |" % (
        j["job"], plan, j["samples_per_second"],
        "%.2f" % j["measured_over_predicted"] if j["measured_over_predicted"] else "-",
        j["eval_auc"], j["usd_per_epoch"],
        ("%.2f" % j["tier_hit_rate"] + (", on the device" if j["tier_feeds_stage"] else "")
         + (", %.0f%% of loads ahead" % (100 * j["tier_ahead_rows_per_batch"] / j["tier_loaded_rows_per_batch"])
            if j["tier_ahead_rows_per_batch"] is not None and j["tier_loaded_rows_per_batch"] else ""))
        if j["tier_hit_rate"] is not None else "-",
        p["measured"], p["ps"], p["prefetch"], p["step_end"],
        p["lookup"], p["dense"], p["rows"], p["gradients"],
        "%.0f%%" % j["gpu_utilisation_mean"] if j["gpu_utilisation_mean"] is not None else "-"))
for t in torch:
    lines.append("| PyTorch DLRM (%s, %s) | dlrm-small on %s | %.0f | - | %.4f | - | - | - | - | - |" % (
        t["framework"], t["program"], t["device"], t["samples_per_second"], t["eval_auc"]))
open(out + "/results.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
