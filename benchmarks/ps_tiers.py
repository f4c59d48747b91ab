#!/usr/bin/env python3
"""The parameter servers' memory/SSD trade-off in dollars (docs/benchmarks.md).

Plans dlrm-large (26 tables of 40M rows of 128 floats: 999.6 GiB with Adagrad's state) and
bst-attention (6.1 TiB of tables) with `heterps plan` on four variants of the cloud catalog: as
it is (i4i.8xlarge has a local NVMe SSD for the servers' SSD tier), without that SSD (every row in
memory), its CPU types only, and its CPU types only without the SSD. Prints a markdown table: the
plan's cost, the servers it rents, their SSD share and hit rate, the SSD tier's saving against the
all-in-memory plan, and what the plan would cost if the servers were left out of the model.

    python3 benchmarks/ps_tiers.py build/tools/heterps
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = [("dlrm-large", ["cloud", "cloud CPUs"], [20000, 100000, 1000000]),
          ("bst-attention", ["cloud"], [2000, 5000])]
CLOUD = os.path.join(ROOT, "examples/clusters/cloud.yaml")
SSD = "    ssd_gib: 6984\n    ssd_kiops: 800\n"


def catalogs(tmp):
    text = open(CLOUD).read()
    if SSD not in text:
        sys.exit("cloud.yaml: the i4i.8xlarge SSD lines this script removes are not there")
    head, types = text.split("types:\n", 1)
    # One block per type: its comment lines, then its fields.
    blocks = re.split(r"(?m)^(?=  # [^\n]*\n(?:  #[^\n]*\n)*  - name:)", types)
    cpu = head + "types:\n" + "".join(b for b in blocks if "kind: cpu" in b)
    out = {}
    for name, body in [("cloud", text), ("cloud, no SSD", text.replace(SSD, "")),
                       ("cloud CPUs", cpu), ("cloud CPUs, no SSD", cpu.replace(SSD, ""))]:
        path = os.path.join(tmp, re.sub(r"[^a-z]+", "-", name) + ".yaml")
        open(path, "w").write(body)
        out[name] = path
    return out


def plan(binary, model, cluster, limit, more=()):
    r = subprocess.run([binary, "plan", "--json", "--model",
                        os.path.join(ROOT, f"examples/models/{model}.yaml"), "--cluster", cluster,
                        "--throughput", str(limit), "--time-limit", "10", *more],
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):
        sys.exit(r.stderr)
    return json.loads(r.stdout)


def row(binary, model, paths, base, name, limit, rows):
    p = rows[name]
    if not p["feasible"]:
        why = p["infeasible"]["constraint"]
        return f"| {model} | {name} | {limit:,} | infeasible ({why}) | | | | | | |"
    ps = p["parameter_servers"]
    saving = bare = ""
    if name == base:
        other = rows[base + ", no SSD"]
        saving = (f"{100 * (1 - p['cost_usd'] / other['cost_usd']):.1f}%" if other["feasible"]
                  else "feasible only with it")
        # What the plan costs when the servers are left out of the model.
        stages = plan(binary, model, paths[name], limit, ["--stages-only"])
        bare = f"${stages['cost_usd']:.2f}" if stages["feasible"] else "infeasible"
    return (f"| {model} | {name} | {limit:,} | ${p['cost_usd']:.2f} | "
            f"{p['cost_per_hour_usd']:.2f} | {ps['shards']} x {ps['type']} | "
            f"{ps['ssd_gib_per_shard']:.0f} GiB | {100 * ps['hit_rate']:.1f}% | {saving} | {bare} |")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        paths = catalogs(tmp)
        print("| model | catalog | limit, samples/s | cost | $/hour | servers | SSD/shard "
              "| from memory | SSD tier saves | stages-only model says |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for model, bases, limits in MODELS:
            for base in bases:
                for limit in limits:
                    names = [base, base + ", no SSD"]
                    rows = {name: plan(binary, model, paths[name], limit) for name in names}
                    for name in names:
                        print(row(binary, model, paths, base, name, limit, rows))

if __name__ == "__main__":
    main()
