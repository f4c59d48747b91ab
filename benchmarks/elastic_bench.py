#!/usr/bin/env python3
"""Elastic jobs on this host, in one run (docs/elastic.md).

    python3 benchmarks/elastic_bench.py [--rows N] [--big-rows N] [--hour SECONDS]
                                        [--markdown docs/benchmarks.md]

1. Time from a trigger to training again: a synchronous job of dlrm-small switches from the
   two-stage plan (2 + 1 replicas, 2 shards) to another cut (1 + 1 replicas, 3 shards) by
   `heterps ctl --plan`, once on --rows rows of the default data and once on --big-rows rows of
   ids spread over 10 million per slot (about 10M embedding rows on the parameter servers when the
   switch comes). Reported: the switch's seconds (decision to the first step of the new plan:
   checkpoint, stop, new processes, tables, load, the first step), its parts, the checkpoint's
   bytes, and the time to read them at this disk's speed (measured with O_DIRECT reads).

2. A simulated day of spot prices: a cluster of an on-demand CPU type ($0.10/hour) and a spot
   one whose price and availability follow a 24-hour trace replayed into a cluster state file,
   one hour every --hour seconds. Compared, on the same data:
   - the elastic job: starts on the cheapest plan (spot), re-plans on every change (preempted:
     onto on-demand; back and cheaper: onto spot when it pays);
   - the best fixed plan chosen up front (spot): the elastic job's own measured rate and prices,
     waiting out every preemption and restarting from its last checkpoint (simulated from the
     measured rate, start-up and checkpoint interval: a fixed plan cannot run without its units);
   - the fixed plan that survives every preemption (on-demand), run for real.
   Costs integrate each plan's price over the seconds it runs; they compare as ratios.

Writes its section of the markdown file (between <!-- elastic-bench:begin/end -->).
"""

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench_markdown import replace_section, write_atomically

HETERPS = os.path.join("build", "tools", "heterps")
# One type of this host's CPU, as the cluster spec writes it.
HOST_TYPE = """  - name: %s
    kind: cpu
    tflops: 0.1
    mem_gbs: 10
    lookup_mrows: 20
    memory_gib: 8
    network_gbps: 40
    overhead_us: 1
    latency_us: 10
    price_per_hour: 0.10
    units: 2
    dp_loss: 0.05
    local_device: cpu
"""
SPOT_CLUSTER = """# A day of spot prices (benchmarks/elastic_bench.py): one on-demand type and one spot type of
# this host's CPU, the spot type's units and price replayed from a trace.
name: spot-day
types:
""" + HOST_TYPE % "on-demand" + HOST_TYPE % "spot"
# (hour, spot units, spot price per hour): the spot market of a day.
TRACE = [(0, 2, 0.035), (3, 2, 0.030), (6, 0, 0.030), (8, 2, 0.045), (11, 2, 0.070),
         (13, 2, 0.098), (15, 0, 0.098), (17, 2, 0.040), (20, 2, 0.032)]


def cpu():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def gen_data(path, rows, extra=()):
    if not os.path.exists(path + ".teacher.json"):
        subprocess.run([HETERPS, "gen-data", "--rows", str(rows), "--out", path] + list(extra),
                       check=True, capture_output=True)


def plan_file(work, source, batch, name, cluster=None):
    with open(source) as f:
        plan = json.load(f)
    plan["batch_size"] = batch
    if cluster:
        plan["cluster"] = cluster
    path = os.path.join(work, name)
    with open(path, "w") as f:
        json.dump(plan, f)
    return path


def start(args, job_dir):
    shutil.rmtree(job_dir, ignore_errors=True)
    os.makedirs(job_dir)
    out = open(os.path.join(job_dir, "bench.out"), "w")
    err = open(os.path.join(job_dir, "bench.err"), "w")
    return subprocess.Popen([HETERPS] + args + ["--job-dir", job_dir, "--metrics-out",
                                                os.path.join(job_dir, "metrics.json")],
                            stdout=out, stderr=err)


def finish(job, job_dir):
    if job.wait() != 0:
        with open(os.path.join(job_dir, "bench.err")) as f:
            sys.exit("elastic_bench: the job in %s failed: %s" % (job_dir, f.read()[-2000:]))
    return read_json(os.path.join(job_dir, "metrics.json"))


def disk_read_rate(work):
    """Bytes/s of O_DIRECT sequential reads of a 1 GiB file in `work` (the page cache bypassed)."""
    path = os.path.join(work, "disk-probe")
    subprocess.run(["dd", "if=/dev/urandom", "of=" + path, "bs=1M", "count=1024", "oflag=direct"],
                   check=True, capture_output=True)
    began = time.monotonic()
    subprocess.run(["dd", "if=" + path, "of=/dev/null", "bs=4M", "iflag=direct"], check=True,
                   capture_output=True)
    seconds = time.monotonic() - began
    os.remove(path)
    return (1 << 30) / seconds


def dir_bytes(path):
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            total += os.path.getsize(os.path.join(root, name))
    return total


def switch_case(name, data, batch, plan_a, plan_b, at_fraction, work):
    """Runs plan A (no periodic checkpoints: the switch writes the only one), switches to plan B
    by heterps ctl once the job passes `at_fraction` of its steps; the switch's figures."""
    job_dir = os.path.join(work, "switch-" + name)
    args = ["train", "--data", data, "--batch", str(batch), "--cluster",
            "tests/specs/runtime/local-two.yaml", "--plan", plan_a, "--ps-shards", "2",
            "--checkpoint-every", "0"]
    job = start(args, job_dir)
    rows = 0
    while job.poll() is None:
        status = read_json(os.path.join(job_dir, "status.json"))
        if status and status.get("total_steps") and \
                status.get("step", 0) >= at_fraction * status["total_steps"]:
            rows = sum(t["memory_rows"] + t["cold_rows"] for ps in status["parameter_servers"]
                       for t in ps["tables"])
            subprocess.run([HETERPS, "ctl", job_dir, "--plan", plan_b, "--ps-shards", "3"],
                           check=True, capture_output=True)
            break
        time.sleep(0.05)
    metrics = finish(job, job_dir)
    if len(metrics["segments"]) != 2:
        sys.exit("elastic_bench: %s did not switch: %s" % (name, json.dumps(metrics["segments"])))
    after = metrics["segments"][1]
    step = after["first_step"]
    checkpoint_bytes = sum(dir_bytes(path) for path in glob.glob(
        os.path.join(job_dir, "ps-[01]", "checkpoints", "*", "ckpt-%d" % step)))
    print("%-12s switch %.2f s (checkpoint %.2f s, load %.2f s), %d rows, %.1f MB" % (
        name, after["switch_seconds"], after["checkpoint_seconds"], after["load_seconds"], rows,
        checkpoint_bytes / 1e6), file=sys.stderr)
    return {"name": name, "rows": rows, "step": step, "steps": metrics["steps"],
            "switch": after["switch_seconds"], "checkpoint": after["checkpoint_seconds"],
            "load": after["load_seconds"], "bytes": checkpoint_bytes}


def replay(trace, hour, state_path, stop, applied):
    """Writes the trace's states into `state_path`, one hour every `hour` seconds."""
    began = time.monotonic()
    for h, units, price in trace:
        while time.monotonic() - began < h * hour:
            if stop.is_set():
                return
            time.sleep(0.02)
        write_atomically(state_path, json.dumps(
            {"types": [{"name": "spot", "units": units, "price_per_hour": price}]}))
        applied.append((h, time.monotonic() - began))


def price_at(seconds, hour):
    """The spot (units, price) at `seconds` into the day."""
    units, price = TRACE[0][1], TRACE[0][2]
    for h, u, p in TRACE:
        if h * hour <= seconds:
            units, price = u, p
    return units, price


def simulate_fixed_spot(samples, rate, startup, checkpoint_seconds_lost, hour):
    """The spot plan fixed up front: trains at `rate` while spot has units, pays its price while
    it runs; a preemption loses the work since the last checkpoint and costs a start-up when
    spot comes back. Returns (cost, seconds)."""
    t, done, cost, dt = 0.0, 0.0, 0.0, 0.01
    running, warm = False, 0.0
    while done < samples:
        units, price = price_at(t, hour)
        if units > 0:
            if not running:
                running, warm = True, startup
            cost += price * dt / 3600
            if warm > 0:
                warm -= dt
            else:
                done += rate * dt
        elif running:
            running = False
            done = max(0.0, done - rate * checkpoint_seconds_lost)
        t += dt
        if t > 1e6:
            break
    return cost, t


def spot_day(data, batch, hour, work):
    cluster = os.path.join(work, "spot-day.yaml")
    with open(cluster, "w") as f:
        f.write(SPOT_CLUSTER)
    spot_plan = plan_file(work, "tests/specs/runtime/one-stage.json", batch, "spot-day-spot.json",
                          "spot-day")
    with open(spot_plan) as f:
        plan = json.load(f)
    plan["stages"][0]["type"] = "spot"
    write_atomically(spot_plan, json.dumps(plan))
    od_plan = os.path.join(work, "spot-day-od.json")
    plan["stages"][0]["type"] = "on-demand"
    write_atomically(od_plan, json.dumps(plan))
    common = ["train", "--data", data, "--batch", str(batch), "--cluster", cluster,
              "--ps-shards", "1", "--checkpoint-every", "10", "--scheduler", "exact",
              "--throughput", "100"]

    # The elastic job, the day replayed into its cluster state.
    job_dir = os.path.join(work, "day-elastic")
    state = os.path.join(work, "spot-day-state.json")
    write_atomically(state, json.dumps(
        {"types": [{"name": "spot", "units": TRACE[0][1], "price_per_hour": TRACE[0][2]}]}))
    job = start(common + ["--plan", spot_plan, "--cluster-state", state], job_dir)
    stop, applied = threading.Event(), []
    replayer = threading.Thread(target=replay, args=(TRACE[1:], hour, state, stop, applied))
    replayer.start()
    elastic = finish(job, job_dir)
    stop.set()
    replayer.join()

    # The on-demand plan, fixed: it never needs to move.
    survivor = finish(start(common + ["--plan", od_plan, "--replan-threshold", "1"],
                            os.path.join(work, "day-on-demand")),
                      os.path.join(work, "day-on-demand"))

    first = elastic["segments"][0]
    spot_rate = max(s["samples_per_second"] for s in elastic["segments"]
                    if "spot" in s["plan"]) if any("spot" in s["plan"]
                                                   for s in elastic["segments"]) else 0
    samples = elastic["train_samples"]
    fixed_cost, fixed_seconds = simulate_fixed_spot(
        samples, spot_rate, first["switch_seconds"],
        10 * batch / max(spot_rate, 1) / 2, hour)
    survivor_seconds = sum(s["seconds"] for s in survivor["segments"])
    elastic_seconds = sum(s["seconds"] for s in elastic["segments"])
    print("day: elastic $%.6f in %.1f s over %d plans; spot fixed $%.6f in %.1f s; on-demand "
          "$%.6f in %.1f s" % (elastic["cost_usd"], elastic_seconds, len(elastic["segments"]),
                               fixed_cost, fixed_seconds, survivor["cost_usd"], survivor_seconds),
          file=sys.stderr)
    return {"elastic": elastic, "survivor": survivor, "fixed_cost": fixed_cost,
            "fixed_seconds": fixed_seconds, "elastic_seconds": elastic_seconds,
            "survivor_seconds": survivor_seconds, "applied": applied, "spot_rate": spot_rate}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=400000)
    parser.add_argument("--big-rows", type=int, default=400000)
    parser.add_argument("--hour", type=float, default=1.0, help="seconds per simulated hour")
    parser.add_argument("--markdown", default="docs/benchmarks.md")
    flags = parser.parse_args()

    work = os.path.join(tempfile.gettempdir(), "heterps-elastic-bench")
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "train-%d.tsv" % flags.rows)
    gen_data(data, flags.rows)
    big = os.path.join(work, "big-%d.tsv" % flags.big_rows)
    gen_data(big, flags.big_rows, ["--vocab", "10000000", "--zipf", "0.5", "--seed", "3"])
    disk = disk_read_rate(work)
    print("disk: %.0f MB/s (O_DIRECT reads)" % (disk / 1e6), file=sys.stderr)

    cases = []
    for name, path, batch, fraction in [("dlrm-small", data, 2048, 0.4),
                                        ("10M rows", big, 4096, 0.9)]:
        a = plan_file(work, "tests/specs/runtime/two-stages.json", batch, "a-%d.json" % batch)
        b = plan_file(work, "tests/specs/runtime/elastic-b.json", batch, "b-%d.json" % batch)
        cases.append(switch_case(name, path, batch, a, b, fraction, work))

    day = spot_day(data, 2048, flags.hour, work)

    lines = ["```", "python3 benchmarks/elastic_bench.py --rows %d --big-rows %d --hour %g" % (
        flags.rows, flags.big_rows, flags.hour), "```", "",
        "On %s (%d hardware threads), this disk reading %.0f MB/s with O_DIRECT." % (
            cpu(), os.cpu_count(), disk / 1e6), "",
        "Time from the trigger (`heterps ctl --plan`, read at the next step) to training again: "
        "two-stage plan (2 + 1 replicas, 2 shards) to another cut (1 + 1 replicas, 3 shards), "
        "synchronous, the checkpoint re-sharded 2 -> 3 by key.", "",
        "| job | rows on the parameter servers | switch at step | switch | of which checkpoint "
        "written | of which checkpoint loaded | checkpoint | read at disk speed | switch - read "
        "| target |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for c in cases:
        read = c["bytes"] / disk
        lines.append("| %s | %s | %d of %d | %.2f s | %.2f s | %.2f s | %.1f MB | %.2f s | "
                     "%.2f s | <= 5 s + read: %s |" % (
                         c["name"], "{:,}".format(c["rows"]), c["step"], c["steps"], c["switch"],
                         c["checkpoint"], c["load"], c["bytes"] / 1e6, read,
                         c["switch"] - read, "met" if c["switch"] <= 5 + read else "not met"))
    e, s = day["elastic"], day["survivor"]
    lines += ["", "A simulated day of spot prices (one hour every %g s; the trace: hour, spot "
              "units, spot $/hour: %s), dlrm-small, %s samples, one unit of either type "
              "($0.10/hour on demand):" % (flags.hour, ", ".join(
                  "%d: %d, %.3f" % t for t in TRACE), "{:,}".format(e["train_samples"])), "",
              "| run | plans | seconds | cost | elastic / this |",
              "|---|---|---:|---:|---:|",
              "| elastic | %s | %.1f | $%.6f | 1.00 |" % (
                  " -> ".join("%s (%s)" % (seg["plan"].split(" ")[1], seg["reason"][:40])
                              for seg in e["segments"]), day["elastic_seconds"], e["cost_usd"]),
              "| best fixed plan chosen up front (spot; waits out preemptions, simulated at the "
              "elastic job's measured %.0f samples/s) | spot | %.1f | $%.6f | %.2f |" % (
                  day["spot_rate"], day["fixed_seconds"], day["fixed_cost"],
                  e["cost_usd"] / day["fixed_cost"] if day["fixed_cost"] else 0),
              "| fixed plan that survives every preemption (on demand), run | on-demand | %.1f | "
              "$%.6f | %.2f |" % (day["survivor_seconds"], s["cost_usd"],
                                   e["cost_usd"] / s["cost_usd"]),
              "", "The elastic job's switches cost $%.6f (%.1f%% of its cost); the trace's "
              "changes it saw: %d of %d." % (e["switch_cost_usd"],
                                            100 * e["switch_cost_usd"] / e["cost_usd"],
                                            len(day["applied"]), len(TRACE) - 1),
              "", "The day is compressed: an hour lasts %g s, a switch lasts about as long, so each "
              "switch's time and cost weigh about 3600 / %g times more than in a real day, and "
              "a preemption of two hours is waited out in %g s. The ratio against the on-demand "
              "plan is the one that carries over; against waiting (the simulated fixed spot "
              "plan), a real day's preemptions last hours, which a job with a deadline cannot "
              "wait out." % (flags.hour, flags.hour, 2 * flags.hour)]
    section = "\n".join(lines) + "\n"
    print(section)
    if flags.markdown:
        replace_section(flags.markdown, "elastic-bench", section, heading="Elastic jobs")


if __name__ == "__main__":
    main()
