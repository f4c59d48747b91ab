#!/usr/bin/env python3
# Plans every example model on the example clusters with each scheduler and prints a markdown
# table: the exact plan, its job cost, and each baseline's cost relative to it.
# Run from the repository root after building: python3 benchmarks/example_plans.py
import json, subprocess
rows = []
for model, tps in [("dlrm-small", [200000, 1000000, 3000000]), ("ctr-dnn", [200000, 3000000]),
                   ("wide-deep", [200000, 3000000]), ("dlrm-large", [100000, 3000000]),
                   ("bst-attention", [5000, 20000])]:
    for cluster in ["cloud", "fleet-64"]:
        for tp in tps:
            res = {}
            for s in ["exact", "homogeneous", "manual", "greedy"]:
                p = subprocess.run(["build/tools/heterps", "plan", "--json", "--scheduler", s, "--model",
                                    f"examples/models/{model}.yaml", "--cluster", f"examples/clusters/{cluster}.yaml",
                                    "--throughput", str(tp)], capture_output=True, text=True)
                res[s] = json.loads(p.stdout)
            e = res["exact"]
            if not e["feasible"]:
                plan = "infeasible: " + e["infeasible"]["constraint"]
            else:
                plan = " + ".join(f'{st["units"]}x {st["type"]} ({st["layers"][0]}..{st["layers"][-1]})' if len(st["layers"])>1 else f'{st["units"]}x {st["type"]} ({st["layers"][0]})' for st in e["stages"])
            def ratio(s):
                r = res[s]
                if not r["feasible"]: return "inf"
                if not e["feasible"]: return "?"
                return "%.2f" % (r["cost_usd"] / e["cost_usd"])
            cost = ("$%.2f" % e["cost_usd"]) if e["feasible"] else "-"
            rows.append(f'| {model} | {cluster} | {tp:,} | {plan} | {cost} | {ratio("homogeneous")} | {ratio("manual")} | {ratio("greedy")} | {e["search_seconds"]:.3f} |')
print("| model | cluster | samples/s | exact plan | job cost | homogeneous | manual | greedy | exact s |")
print("|---|---|---:|---|---:|---:|---:|---:|---:|")
print("\n".join(rows))
