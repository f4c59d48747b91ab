#!/usr/bin/env python3
"""The distributed runtime against the single-process engine, on this host, in one run.

    python3 benchmarks/runtime_bench.py [--rows N] [--markdown docs/benchmarks.md]

Trains dlrm-small on the same synthetic data (one epoch, batch 2048) six ways and reports
samples/s, the scaling efficiency of each distributed run against the single-process run in the
same mode, where each stage's time goes (busy, waiting for the parameter servers, sending to other
stages, idle; the step's time outside the busiest stage), and the plan's predicted time per step
against the measured one, before and after calibration:

  1. single process, 1 thread (synchronous)
  2. single process, 2 threads (asynchronous)
  3. distributed, the default: this host profiled, planned by rl, run as processes (sync)
  4. the same, planned again with the calibrated profile run 3 wrote (sync)
  5. a two-stage pipeline (stage 0 input..emb on 2 replicas, stage 1 the rest on 1), 2 shards
  6. distributed, the default plan, asynchronous

Writes its section of the markdown file (between <!-- runtime-bench:begin/end -->).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

from bench_markdown import replace_section

HETERPS = os.path.join("build", "tools", "heterps")


def run(args, job_dir=None):
    metrics = os.path.join(tempfile.gettempdir(), "heterps-runtime-bench-metrics.json")
    command = [HETERPS] + args + ["--metrics-out", metrics]
    if job_dir:
        command += ["--job-dir", job_dir]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("runtime_bench: %s failed: %s" % (" ".join(command), result.stderr.strip()))
    with open(metrics) as f:
        return json.load(f)


def cpu():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def ms(seconds):
    return "%.1f" % (1e3 * seconds)


def sweep(flags, work, common, distributed):
    lines = ["```", "python3 benchmarks/runtime_bench.py --rows %d --sweep %s" % (
                 flags.rows, flags.sweep), "```", "",
             "On %s (%d hardware threads): dlrm-small, one epoch of %d synthetic rows "
             "(90%% trained); the default distributed job (this host profiled and planned at each "
             "batch size) against the single process at the same batch size." % (
                 cpu(), os.cpu_count(), flags.rows), "",
             "| batch | single process, 1 thread | 2 threads (async) | distributed sync | "
             "against 1 thread | distributed async | against 2 threads | sync: plan | "
             "sync: predicted samples/s | sync: measured / predicted | "
             "async: measured / predicted |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|"]
    for batch in [int(b) for b in flags.sweep.split(",")]:
        b = ["--batch", str(batch)]
        one = run(common + b + ["--single-process"])
        two = run(common + b + ["--single-process", "--threads", "2"])
        sync = run(distributed + b, os.path.join(work, "sweep-sync-%d" % batch))
        asynchronous = run(distributed + b + ["--mode", "async"],
                           os.path.join(work, "sweep-async-%d" % batch))
        plan = ", ".join("%s x%d" % (s["layers"], s["units"]) for s in sync.get("stages", []))
        predicted = sync.get("predicted_samples_per_second") or 0
        predicted_async = asynchronous.get("predicted_samples_per_second") or 0
        lines.append("| %d | %.0f | %.0f | %.0f | %.2f | %.0f | %.2f | %s | %s | %s | %s |" % (
            batch, one["samples_per_second"], two["samples_per_second"],
            sync["samples_per_second"], sync["samples_per_second"] / one["samples_per_second"],
            asynchronous["samples_per_second"],
            asynchronous["samples_per_second"] / two["samples_per_second"], plan,
            "%.0f" % predicted if predicted else "-",
            "%.2f" % (sync["samples_per_second"] / predicted) if predicted else "-",
            "%.2f" % (asynchronous["samples_per_second"] / predicted_async)
            if predicted_async else "-"))
        print(lines[-1], file=sys.stderr)
    section = "\n".join(lines) + "\n"
    print(section)
    if flags.markdown:
        replace_section(flags.markdown, "runtime-sweep", section)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=400000)
    parser.add_argument("--markdown", default="docs/benchmarks.md")
    parser.add_argument("--sweep", default="",
                        help="comma-separated batch sizes: instead of the six runs, the single "
                        "process (1 and 2 threads) against the default distributed job (sync "
                        "and async) at each batch size (the runtime-sweep section)")
    flags = parser.parse_args()

    work = os.path.join(tempfile.gettempdir(), "heterps-runtime-bench")
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "train-%d.tsv" % flags.rows)
    if not os.path.exists(data + ".teacher.json"):
        subprocess.run([HETERPS, "gen-data", "--rows", str(flags.rows), "--out", data],
                       check=True, capture_output=True)
    two_stage_plan = os.path.join(work, "two-stages.json")
    with open("tests/specs/runtime/two-stages.json") as f:
        plan = json.load(f)
    plan["batch_size"] = 2048
    with open(two_stage_plan, "w") as f:
        json.dump(plan, f)

    common = ["train", "--data", data]
    distributed = common + ["--checkpoint-every", "0"]
    if flags.sweep:
        sweep(flags, work, common, distributed)
        return
    runs = []

    def record(name, metrics, mode, reference=None):
        runs.append((name, metrics, mode, reference))
        print("%-40s %8.0f samples/s" % (name, metrics["samples_per_second"]), file=sys.stderr)

    single = run(common + ["--single-process"])
    record("single process, 1 thread", single, "sync")
    single2 = run(common + ["--single-process", "--threads", "2"])
    record("single process, 2 threads", single2, "async")
    job = os.path.join(work, "default")
    default = run(distributed, job)
    record("distributed, planned on this host", default, "sync", single)
    calibrated = run(distributed + ["--profile", os.path.join(job, "calibrated_profile.json")],
                     os.path.join(work, "calibrated"))
    record("distributed, planned with the calibration", calibrated, "sync", single)
    pipeline = run(distributed + ["--cluster", "tests/specs/runtime/local-two.yaml", "--plan",
                             two_stage_plan, "--ps-shards", "2"], os.path.join(work, "pipeline"))
    record("two-stage pipeline, 2 + 1 replicas, 2 shards", pipeline, "sync", single)
    asynchronous = run(distributed + ["--mode", "async"], os.path.join(work, "async"))
    record("distributed, planned on this host, async", asynchronous, "async", single2)

    lines = ["```", "python3 benchmarks/runtime_bench.py --rows %d" % flags.rows, "```", "",
             "On %s (%d hardware threads): dlrm-small, one epoch of %d synthetic rows "
             "(90%% trained), batch 2048." % (cpu(), os.cpu_count(), flags.rows), "",
             "| run | mode | samples/s | against single process | predicted samples/s | "
             "measured / predicted | eval AUC |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for name, m, mode, reference in runs:
        predicted = m.get("predicted_samples_per_second") or 0
        lines.append("| %s | %s | %.0f | %s | %s | %s | %.4f |" % (
            name, mode, m["samples_per_second"],
            "%.2f" % (m["samples_per_second"] / reference["samples_per_second"])
            if reference else "",
            "%.0f" % predicted if predicted else "",
            "%.2f" % (m["samples_per_second"] / predicted) if predicted else "",
            m["eval_auc"]))
    lines += ["", "Where each distributed run's time goes, per step (ms): the busiest replica of "
              "each stage, and the step's time outside the busiest stage.", "",
              "| run | stage | units | predicted | busy | of which parameter servers | send | "
              "idle | step | outside the busiest stage |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, m, mode, reference in runs:
        if "stages" not in m:
            continue
        busiest = max(s["measured_seconds_per_batch"] for s in m["stages"])
        for i, s in enumerate(m["stages"]):
            lines.append("| %s | %s | %d | %s | %s | %s | %s | %.0f%% | %s | %s |" % (
                name if i == 0 else "", s["layers"], s["units"],
                ms(s["predicted_seconds_per_batch"]) if s["predicted_seconds_per_batch"] else "-",
                ms(s["measured_seconds_per_batch"]), ms(s["ps_seconds_per_batch"]),
                ms(s["send_seconds_per_batch"]), 100 * s["idle_fraction"],
                ms(m["step_seconds"]) if i == 0 else "",
                ms(max(0.0, m["step_seconds"] - busiest)) if i == 0 else ""))
    section = "\n".join(lines) + "\n"
    print(section)
    if flags.markdown:
        replace_section(flags.markdown, "runtime-bench", section)


if __name__ == "__main__":
    main()
