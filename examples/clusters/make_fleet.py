#!/usr/bin/env python3
"""Generates examples/clusters/fleet-64.yaml, a synthetic 64-type fleet, from cloud.yaml.

Usage (from the repository root):
    python3 examples/clusters/make_fleet.py > examples/clusters/fleet-64.yaml

Every type in cloud.yaml becomes several variants: purchase option (on-demand "od" or spot)
x region. Hardware figures (tflops, mem_gbs, ...) are copied unchanged; only price, units
and dp_loss vary:
  * region: price x REGIONS multiplier, units x region share, `region` its AWS name;
  * spot:   price x 0.30..0.40 (fixed per base type), units halved, dp_loss + 0.02
            (preemptions and restarts cost some data-parallel efficiency).
The result is plausible, not real: spot prices and regional markups are modelled, not quoted.

Standard library only; the output depends on cloud.yaml alone (no randomness, no clock).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "cloud.yaml")

FIELDS = ["name", "kind", "tflops", "mem_gbs", "lookup_mrows", "memory_gib", "network_gbps",
          "overhead_us", "latency_us", "price_per_hour", "units", "dp_loss"]

# region suffix -> its AWS region (the types' `region`, which a job's --data-region names)
REGION_NAMES = {"use1": "us-east-1", "euw1": "eu-west-1", "apne1": "ap-northeast-1"}

# region suffix -> (price multiplier, share of the us-east-1 quota)
REGIONS = {
    "use1": (1.00, 1.00),
    "euw1": (1.08, 0.75),
    "apne1": (1.15, 0.50),
}

# The links between the regions, one per ordered pair: (from, to) -> (bandwidth_gbps, latency_ms,
# egress_per_gb). Latency: half the average round trip published for these AWS pairs (80.5,
# 145.3 and 212.4 ms; "Latency Between AWS Global Regions", 2017, as tabled at
# acomputerscientistlearnsaws.blogspot.com/2017/04/aws-regions.html). Egress: AWS charges the
# sending region per GB (AWS Global Network FAQs): $0.02 from us-east-1 and eu-west-1, $0.09 from
# ap-northeast-1 (Asia-Pacific sources cost up to about $0.09), as published in 2026. Bandwidth:
# modelled, not measured: one TCP flow between AWS regions reaches roughly 0.3-1.2 Gbit/s, less
# the longer the round trip; measure your own links and put their figures here.
LINKS = {
    ("us-east-1", "eu-west-1"): (1.0, 40, 0.02),
    ("eu-west-1", "us-east-1"): (1.0, 40, 0.02),
    ("us-east-1", "ap-northeast-1"): (0.6, 73, 0.02),
    ("ap-northeast-1", "us-east-1"): (0.6, 73, 0.09),
    ("eu-west-1", "ap-northeast-1"): (0.4, 106, 0.02),
    ("ap-northeast-1", "eu-west-1"): (0.4, 106, 0.09),
}

# Which (option, region) variants each base type gets. 8 CPU bases x 4 = 32 CPU types;
# 7 GPU bases: 4 x 5 + 3 x 4 = 32 GPU types. Total 64.
CPU_VARIANTS = [("od", "use1"), ("spot", "use1"), ("od", "euw1")]
CPU_EXTRA = [("spot", "euw1"), ("od", "apne1")]  # alternated over the CPU bases
GPU_VARIANTS = [("od", "use1"), ("spot", "use1"), ("od", "euw1"), ("spot", "euw1")]
GPU_WITH_APNE1 = {"g4dn.xlarge", "g5.xlarge", "g6.xlarge", "p5.4xlarge"}  # + ("od", "apne1")


def parse_scalar(text):
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            pass
    return text


def read_catalog(path):
    """Reads the flat subset of YAML that cluster files use: name, and a list of flat maps."""
    types = []
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.split("#", 1)[0].rstrip()
            if not line.strip():
                continue
            stripped = line.strip()
            if stripped.startswith("- "):
                types.append({})
                stripped = stripped[2:]
            elif not line.startswith(" "):
                continue  # top-level keys: name, types
            key, _, value = stripped.partition(":")
            types[-1][key.strip()] = parse_scalar(value.strip())
    for t in types:
        missing = [k for k in FIELDS if k not in t]
        if missing:
            sys.exit(f"{path}: type {t.get('name')!r} lacks {missing}")
    return types


def spot_factor(name):
    """A fixed spot discount in [0.30, 0.40] per base type (stable: no hash randomization)."""
    return 0.30 + 0.01 * (sum(map(ord, name)) % 11)


def fmt(value):
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def variant(base, option, region):
    price_mult, unit_share = REGIONS[region]
    t = dict(base)
    t["name"] = f"{base['name']}-{option}-{region}"
    price = base["price_per_hour"] * price_mult
    units = base["units"] * unit_share
    dp_loss = base["dp_loss"]
    note = f"{base['name']} x{price_mult:.2f} ({region})"
    if option == "spot":
        factor = spot_factor(base["name"])
        price *= factor
        units /= 2
        dp_loss += 0.02
        note += f", spot x{factor:.2f}"
    t["price_per_hour"] = round(price, 4)
    t["units"] = max(1, int(units))
    t["dp_loss"] = round(dp_loss, 3)
    t["region"] = REGION_NAMES[region]
    return t, note


def main():
    catalog = read_catalog(SOURCE)
    # The storage type (its SSD tier's fields are not carried here) stays out: 8 CPU bases.
    cpus = [t for t in catalog if t["kind"] == "cpu" and "ssd_gib" not in t]
    gpus = [t for t in catalog if t["kind"] == "gpu"]
    out = []
    for i, base in enumerate(cpus):
        for option, region in CPU_VARIANTS + [CPU_EXTRA[i % 2]]:
            out.append(variant(base, option, region))
    for base in gpus:
        extra = [("od", "apne1")] if base["name"] in GPU_WITH_APNE1 else []
        for option, region in GPU_VARIANTS + extra:
            out.append(variant(base, option, region))

    names = [t["name"] for t, _ in out]
    assert len(set(names)) == len(names), "duplicate names"

    print("# GENERATED by examples/clusters/make_fleet.py from the figures in cloud.yaml;")
    print("# do not edit by hand. Regenerate with:")
    print("#   python3 examples/clusters/make_fleet.py > examples/clusters/fleet-64.yaml")
    print("# A synthetic but plausible fleet of %d types (%d cpu, %d gpu): each real AWS type"
          % (len(out), sum(t["kind"] == "cpu" for t, _ in out),
             sum(t["kind"] == "gpu" for t, _ in out)))
    print("# in on-demand (od) and spot variants across regions use1 (x1.00), euw1 (x1.08) and")
    print("# apne1 (x1.15), each type's `region` the AWS region of its suffix (us-east-1,")
    print("# eu-west-1, ap-northeast-1). Spot prices (30-40% of on-demand), regional markups and quotas are")
    print("# modelled, not quoted; hardware figures are cloud.yaml's.")
    print("name: fleet-64")
    print("types:")
    for t, note in out:
        print(f"  # {note}")
        print(f"  - name: {t['name']}")
        for key in FIELDS[1:] + ["region"]:
            print(f"    {key}: {fmt(t[key])}")
    print("# Between the regions: latency half the published round trips, egress the sending")
    print("# region's published price per GB, bandwidth modelled (make_fleet.py says where from).")
    print("links:")
    for (source, dest), (gbps, ms, per_gb) in LINKS.items():
        print(f"  - {{from: {source}, to: {dest}, bandwidth_gbps: {fmt(gbps)}, latency_ms: {ms}, "
              f"egress_per_gb: {fmt(per_gb)}}}")


if __name__ == "__main__":
    main()
