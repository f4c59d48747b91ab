#!/usr/bin/env python3
"""The distributed runtime against the single-process engine, on this host, in one run.

    python3 benchmarks/runtime_bench.py [--rows N] [--markdown docs/benchmarks.md]

Trains dlrm-small on the same synthetic data (one epoch, batch 2048) seven ways and reports
samples/s, the scaling efficiency of each distributed run against the single-process run in the
same mode on the same cores (synchronous: 2 threads sharing each step; asynchronous: 2 threads),
where each stage's time goes (busy, waiting for the parameter servers, sending to other stages,
idle; the step's time outside the busiest stage), and the plan's predicted time per step against
the measured one, before and after calibration:

  1. single process, 1 thread (synchronous)
  2. single process, 2 threads sharing each step (synchronous: the same run as 1, to the bit)
  3. single process, 2 threads (asynchronous)
  4. distributed, the default: this host profiled, planned by rl, run as processes (sync)
  5. the same, planned again with the calibrated profile run 4 wrote (sync)
  6. a two-stage pipeline (stage 0 input..emb on 2 replicas, stage 1 the rest on 1), 2 shards
  7. distributed, the default plan, asynchronous

Writes its section of the markdown file (between <!-- runtime-bench:begin/end -->).

With --sweep, the default distributed job against the single process at several batch sizes
instead (the runtime-sweep section). With --tier, the default distributed job with the embedding
table above the parameter server's memory budget: all in memory first, then with each server's
memory for the table (--ps-memory-mib) at the given fractions of what the table took in memory,
the rest in the SSD tier (RocksDB under the job directory), on the same plan (the runtime-tier
section).
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


def table_stats(job_dir):
    """Sums of the parameter servers' table statistics at the end of the job (status.json)."""
    with open(os.path.join(job_dir, "status.json")) as f:
        status = json.load(f)
    total = {"memory_rows": 0, "memory_bytes": 0, "cold_rows": 0, "hits": 0, "misses": 0}
    for shard in status["parameter_servers"]:
        for t in shard["tables"]:
            for key in total:
                total[key] += t[key]
    return total


def one_stage_plan(job_dir, path):
    """The plan job_dir ran, if one stage of every layer, as a plan file (else None). The layers'
    names are those `heterps plan` gives the job's model."""
    with open(os.path.join(job_dir, "job.json")) as f:
        job = json.load(f)
    stages = job["plan"]["stages"]
    if len(stages) != 1:
        return None
    model = path + ".model.yaml"
    with open(model, "w") as f:
        f.write(job["model_yaml"])
    named = subprocess.run([HETERPS, "plan", "--model", model, "--scheduler", "homogeneous",
                            "--throughput", "1", "--json"], capture_output=True, text=True)
    if named.returncode != 0:
        sys.exit("runtime_bench: heterps plan failed: %s" % named.stderr.strip())
    names = [name for stage in json.loads(named.stdout)["stages"] for name in stage["layers"]]
    plan = {"format": "heterps-plan-v1", "model": job["plan"]["model"],
            "cluster": job["plan"]["cluster"], "batch_size": job["plan"]["batch_size"],
            "scheduler": "manual", "feasible": True,
            "stages": [{"index": 0, "layers": names, "type": stages[0]["type"],
                        "units": stages[0]["units"]}]}
    with open(path, "w") as f:
        json.dump(plan, f)
    return path


def tier(flags, work, distributed):
    fractions = flags.tier
    memory_dir = os.path.join(work, "tier-memory")
    memory = run(distributed, memory_dir)
    stats = table_stats(memory_dir)
    plan = one_stage_plan(memory_dir, os.path.join(work, "tier-plan.json"))
    same_plan = ["--plan", plan] if plan else []
    lines = ["```", "python3 benchmarks/runtime_bench.py --rows %d --tier %s" % (
                 flags.rows, flags.tier_text), "```", "",
             "On %s (%d hardware threads): dlrm-small, one epoch of %d synthetic rows "
             "(90%% trained), batch 2048, the default distributed job (synchronous), its "
             "embedding table (%.1f MB, %d rows, in memory) kept within a memory budget per "
             "server, the rest in the SSD tier (RocksDB in the job directory, on this host's "
             "disk), on the plan of the all-in-memory run." % (
                 cpu(), os.cpu_count(), flags.rows, stats["memory_bytes"] / 1e6,
                 stats["memory_rows"]), "",
             "| memory budget (`--ps-memory-mib`) | rows in memory | rows on SSD | accesses "
             "served from memory | samples/s | against all in memory | eval AUC |",
             "|---|---:|---:|---:|---:|---:|---:|"]

    def row(label, m, s):
        accesses = s["hits"] + s["misses"]
        lines.append("| %s | %d | %d | %s | %.0f | %.2f | %.4f |" % (
            label, s["memory_rows"], s["cold_rows"],
            "%.1f%%" % (100.0 * s["hits"] / accesses) if accesses else "-",
            m["samples_per_second"], m["samples_per_second"] / memory["samples_per_second"],
            m["eval_auc"]))
        print(lines[-1], file=sys.stderr)

    row("none (all in memory)", memory, stats)
    for fraction in fractions:
        mib = max(1, int(round(fraction * stats["memory_bytes"] / 2 ** 20)))
        job_dir = os.path.join(work, "tier-%g" % fraction)
        m = run(distributed + same_plan + ["--ps-memory-mib", str(mib)], job_dir)
        row("%d MiB (%.0f%% of the table)" % (mib, 100 * fraction), m, table_stats(job_dir))
    section = "\n".join(lines) + "\n"
    print(section)
    if flags.markdown:
        replace_section(flags.markdown, "runtime-tier", section)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=400000)
    parser.add_argument("--markdown", default="docs/benchmarks.md")
    parser.add_argument("--sweep", default="",
                        help="comma-separated batch sizes: instead of the seven runs, the single "
                        "process (1 and 2 threads) against the default distributed job (sync "
                        "and async) at each batch size (the runtime-sweep section)")
    parser.add_argument("--tier", default="",
                        help="comma-separated fractions of the embedding table kept in memory: "
                        "instead of the seven runs, the default job with the rest of the table "
                        "in the SSD tier against all in memory (the runtime-tier section)")
    flags = parser.parse_args()
    if flags.tier:
        try:
            fractions = [float(x) for x in flags.tier.split(",")]
        except ValueError:
            fractions = []
        if not fractions or any(not 0 < f < 1 for f in fractions):
            parser.error("--tier %s: fractions between 0 and 1, comma-separated" % flags.tier)
        flags.tier_text, flags.tier = flags.tier, fractions

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
    if flags.tier:
        tier(flags, work, distributed)
        return
    runs = []

    def record(name, metrics, mode, reference=None):
        runs.append((name, metrics, mode, reference))
        print("%-40s %8.0f samples/s" % (name, metrics["samples_per_second"]), file=sys.stderr)

    single = run(common + ["--single-process"])
    record("single process, 1 thread", single, "sync")
    shared = run(common + ["--single-process", "--threads", "2", "--sync-threads"])
    if shared["parameter_digest"] != single["parameter_digest"]:
        sys.exit("runtime_bench: 2 synchronous threads did not train as 1 thread does")
    record("single process, 2 threads sharing each step", shared, "sync", single)
    single2 = run(common + ["--single-process", "--threads", "2"])
    record("single process, 2 threads", single2, "async")
    job = os.path.join(work, "default")
    default = run(distributed, job)
    record("distributed, planned on this host", default, "sync", shared)
    calibrated = run(distributed + ["--profile", os.path.join(job, "calibrated_profile.json")],
                     os.path.join(work, "calibrated"))
    record("distributed, planned with the calibration", calibrated, "sync", shared)
    pipeline = run(distributed + ["--cluster", "tests/specs/runtime/local-two.yaml", "--plan",
                             two_stage_plan, "--ps-shards", "2"], os.path.join(work, "pipeline"))
    record("two-stage pipeline, 2 + 1 replicas, 2 shards", pipeline, "sync", shared)
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
