#!/usr/bin/env python3
"""Three regions as jobs of their own on this host, joined by shaped links: what GEO costs.

    python3 benchmarks/region_bench.py [--rows N] [--sync-steps 10,100] [--thresholds 0,0.01]
        [--markdown docs/benchmarks.md]

Needs root and iproute2 (network namespaces, veth pairs, tbf). Splits one synthetic dlrm-small
file by the shares 50% us-east-1, 30% eu-west-1, 20% ap-northeast-1, and for each K and
threshold runs the three regions' jobs (`heterps train --region ...`, each a one-stage plan with
its share of every step's 2048 samples, mutual TLS between the gateways, --tls inside) each in a
network namespace of its own, the pairs joined by veth pairs whose ends are shaped by tbf to
examples/clusters/fleet-64.yaml's bandwidth of each direction (no latency: tbf only). It reports
the run's samples/s (every region's samples over the slowest region's wall time), the bytes each
direction carried (the veth counters: TCP/IP and TLS included), their egress at fleet-64's price
per GB, the windows, each region's eval AUC, and what `heterps plan --data-shares` predicts for
the same K (bytes and egress between regions), on the same samples.

Writes its section of the markdown file (between <!-- region-bench:begin/end -->).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from bench_markdown import replace_section

HETERPS = os.path.abspath(os.path.join("build", "tools", "heterps"))
REGIONS = ["us-east-1", "eu-west-1", "ap-northeast-1"]
SHARES = [0.5, 0.3, 0.2]
BATCH = 2048
FLEET = "examples/clusters/fleet-64.yaml"
# fleet-64's links (Gbit/s, $ per GB), from -> to.
LINKS = {
    ("us-east-1", "eu-west-1"): (1.0, 0.02), ("eu-west-1", "us-east-1"): (1.0, 0.02),
    ("us-east-1", "ap-northeast-1"): (0.6, 0.02), ("ap-northeast-1", "us-east-1"): (0.6, 0.09),
    ("eu-west-1", "ap-northeast-1"): (0.4, 0.02), ("ap-northeast-1", "eu-west-1"): (0.4, 0.09),
}
PORT = 7100


def sh(*argv):
    result = subprocess.run(list(argv), capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("region_bench: %s failed: %s" % (" ".join(argv), result.stderr.strip()))
    return result.stdout


class Net:
    """A namespace per region and a shaped veth pair per pair of regions."""

    def __init__(self):
        self.ns = ["hpsb%d-%d" % (os.getpid() % 10000, i) for i in range(len(REGIONS))]
        self.dev = {}   # (i, j) -> the device in i's namespace on the pair with j
        self.addr = {}  # (i, j) -> i's address on that pair
        for ns in self.ns:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for i in range(len(REGIONS)):
            for j in range(i + 1, len(REGIONS)):
                di, dj = "rb%dv%d" % (os.getpid() % 10000, j), "rb%dv%d" % (os.getpid() % 10000, i)
                sh("ip", "link", "add", di, "netns", self.ns[i], "type", "veth", "peer", "name", dj,
                   "netns", self.ns[j])
                for (a, b, d, host) in ((i, j, di, 1), (j, i, dj, 2)):
                    self.dev[(a, b)] = d
                    self.addr[(a, b)] = "10.210.%d.%d" % (i * 10 + j, host)
                    sh("ip", "-n", self.ns[a], "addr", "add", self.addr[(a, b)] + "/24", "dev", d)
                    sh("ip", "-n", self.ns[a], "link", "set", d, "up")
                    gbps = LINKS[(REGIONS[a], REGIONS[b])][0]
                    rate = int(gbps * 1e9 * 1514 / 1448)  # tbf counts whole frames
                    burst = max(rate // 8 // 100, 32 * 1024)
                    sh("ip", "netns", "exec", self.ns[a], "tc", "qdisc", "add", "dev", d, "root",
                       "tbf", "rate", "%dbit" % rate, "burst", str(burst), "latency", "200ms")

    def tx_bytes(self):
        out = {}
        for (a, b), d in self.dev.items():
            stats = json.loads(sh("ip", "-n", self.ns[a], "-s", "-j", "link", "show", "dev", d))
            out[(a, b)] = stats[0]["stats64"]["tx"]["bytes"]
        return out

    def close(self):
        for ns in self.ns:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def run_regions(net, files, plans, certs, k, threshold, hub, work):
    procs, dirs = [], []
    for i, region in enumerate(REGIONS):
        gateways = []
        for j, other in enumerate(REGIONS):
            where = "0.0.0.0" if j == i else net.addr[(j, i)]
            gateways.append("%s=%s:%d" % (other, where, PORT))
        job = os.path.join(work, "k%d-t%g-%s-%s" % (k, threshold, hub or "p2p", region))
        os.makedirs(job, exist_ok=True)
        dirs.append(job)
        argv = ["ip", "netns", "exec", net.ns[i], HETERPS, "train", "--data", files[i],
                "--batch", str(round(SHARES[i] * BATCH)), "--cluster",
                "tests/specs/runtime/local-two.yaml", "--plan", plans[i], "--job-dir", job,
                "--metrics-out", os.path.join(job, "metrics.json"), "--region", region,
                "--region-gateways", ",".join(gateways), "--sync-steps", str(k),
                "--sync-threshold", str(threshold), "--region-ca", certs + "/ca.pem",
                "--region-cert", "%s/%s.pem" % (certs, region), "--region-key",
                "%s/%s-key.pem" % (certs, region), "--tls"] + (["--sync-hub", hub] if hub else [])
        procs.append(subprocess.Popen(argv, stdout=open(job + "/out", "w"),
                                      stderr=open(job + "/err", "w")))
    for p, job in zip(procs, dirs):
        if p.wait() != 0:
            sys.exit("region_bench: a region's job failed: " + open(job + "/err").read().strip())
    return [json.load(open(os.path.join(job, "metrics.json"))) for job in dirs]


def predicted(k, samples, throughput):
    out = subprocess.run(
        [HETERPS, "plan", "--cluster", FLEET, "--scheduler", "exact", "--data-shares",
         ",".join("%s=%g" % (r, s) for r, s in zip(REGIONS, SHARES)), "--sync-steps", str(k),
         "--samples", str(samples), "--throughput", str(max(throughput, 1)), "--json"],
        capture_output=True, text=True)
    if not out.stdout.strip():
        return None
    return json.loads(out.stdout)["sync"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=300000)
    parser.add_argument("--sync-steps", default="10,100")
    parser.add_argument("--thresholds", default="0,0.01")
    parser.add_argument("--hubs", default=",us-east-1",
                        help="comma-separated: empty for peer to peer, or a hub region")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="heterps-region-bench-")
    data = os.path.join(work, "all.tsv")
    sh(HETERPS, "gen-data", "--rows", str(args.rows), "--seed", "11", "--out", data)
    lines = open(data).read().splitlines(keepends=True)
    files, plans, at = [], [], 0
    for i, region in enumerate(REGIONS):
        n = round(SHARES[i] * len(lines)) if i + 1 < len(REGIONS) else len(lines) - at
        files.append(os.path.join(work, region + ".tsv"))
        with open(files[-1], "w") as f:
            f.writelines(lines[at:at + n])
        at += n
        plan = json.load(open("tests/specs/runtime/one-stage.json"))
        plan["batch_size"] = round(SHARES[i] * BATCH)
        plan["cluster"] = "local-two"
        plans.append(os.path.join(work, region + "-plan.json"))
        json.dump(plan, open(plans[-1], "w"))
    certs = os.path.join(work, "certs")
    sh(HETERPS, "certs", "--regions", ",".join(REGIONS), "--out", certs)
    try:
        net = Net()
    except SystemExit as e:
        sys.exit("region_bench: no namespaces here (root and iproute2 are needed): %s" % e)
    rows = []
    try:
        configs = [(int(k), float(t), h) for k in args.sync_steps.split(",")
                   for t in args.thresholds.split(",") for h in args.hubs.split(",")]
        for k, threshold, hub in configs:
            before = net.tx_bytes()
            start = time.time()
            m = run_regions(net, files, plans, certs, k, threshold, hub, work)
            wall = time.time() - start
            after = net.tx_bytes()
            moved = {key: after[key] - before[key] for key in after}
            wan = sum(moved.values())
            egress = sum(moved[(a, b)] / 1e9 * LINKS[(REGIONS[a], REGIONS[b])][1]
                         for (a, b) in moved)
            samples = sum(x["samples_per_second"] * x["seconds"] for x in m)
            slowest = max(x["wall_seconds"] for x in m)
            rate = samples / slowest
            plan = predicted(k, int(samples), rate)
            rows.append({"k": k, "threshold": threshold, "hub": hub, "samples": samples,
                         "rate": rate,
                         "wall": wall, "wan": wan, "egress": egress,
                         "windows": m[0]["regions"]["windows"],
                         "auc": [x.get("eval_auc") for x in m],
                         "plan_bytes": plan["bytes"] if plan else None,
                         "plan_egress": plan["egress_usd"] if plan else None,
                         "plan_sync": (("hub " + plan["hub"]) if plan and plan["topology"] == "hub"
                                       else "peer to peer") if plan else "-"})
            print("K %d threshold %g %s: %.0f samples/s, %.2f MB between regions, $%.6f egress, "
                  "%d windows, AUC %s; the planner: %s" % (
                      k, threshold, ("hub " + hub) if hub else "peer to peer", rate, wan / 1e6,
                      egress, rows[-1]["windows"],
                      ", ".join("%.4f" % a for a in rows[-1]["auc"] if a is not None),
                      "%.2f MB, $%.6f (%s)" % (plan["bytes"] / 1e6, plan["egress_usd"],
                                               rows[-1]["plan_sync"]) if plan else "-"),
                  flush=True)
    finally:
        net.close()
    table = ["| K | threshold | sync | samples/s | between regions | egress | windows | eval AUC "
             "(us, eu, ap) | the planner's bytes | its egress | its sync |",
             "|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---|"]
    for r in rows:
        table.append("| %d | %g | %s | %s | %.1f MB | $%.5f | %d | %s | %s | %s | %s |" % (
            r["k"], r["threshold"], ("hub " + r["hub"]) if r["hub"] else "peer to peer",
            "{:,.0f}".format(r["rate"]), r["wan"] / 1e6, r["egress"],
            r["windows"], ", ".join("%.4f" % a for a in r["auc"] if a is not None),
            "%.1f MB" % (r["plan_bytes"] / 1e6) if r["plan_bytes"] else "-",
            "$%.5f" % r["plan_egress"] if r["plan_egress"] is not None else "-", r["plan_sync"]))
    print("\n".join(table))
    if args.markdown:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                       "unknown CPU")
        body = ("%s, %d hardware threads, %s; `python3 benchmarks/region_bench.py --rows %d "
                "--sync-steps %s --thresholds %s --hubs %s`\n\n" % (
                    cpu, os.cpu_count(), time.strftime("%Y-%m-%d"), args.rows, args.sync_steps,
                    args.thresholds, args.hubs)) + "\n".join(table) + "\n"
        replace_section(args.markdown, "region-bench", body)


if __name__ == "__main__":
    main()
