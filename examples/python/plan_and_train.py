"""Plan a model on a mixed fleet, look at the frontier, then train on this host: heterps from
Python, cell by cell (run it whole, or paste the cells into a notebook).

    PYTHONPATH=build/python python3 examples/python/plan_and_train.py
"""
# %% Specs: files, or dicts of the same fields.
import tempfile

import heterps

model = heterps.load_model("examples/models/dlrm-small.yaml")
fleet = heterps.load_cluster("examples/clusters/cloud.yaml")
print(model, fleet)
print("schedulers:", ", ".join(name for name, _ in heterps.schedulers()))

# %% The cheapest plan for a million samples/s, and how far from the optimum it may be.
plan = heterps.plan(model, fleet, throughput=1e6, scheduler="auto", time_limit=10)
print(f"{plan.scheduler}: ${plan.cost_usd:.2f} for the job (${plan.cost_per_hour_usd:.2f}/hour), "
      f"{plan.throughput:,.0f} samples/s, gap {plan.optimality_gap}")
for stage in plan.stages:
    print(f"  stage {stage['index']}: {stage['layers'][0]}..{stage['layers'][-1]} on "
          f"{stage['units']} x {stage['type']}")

# %% What more throughput costs: the frontier.
for point in heterps.pareto(model, fleet, throughput=4e6, points=5, time_limit=5):
    print(f"  {point.data['throughput_limit']:>12,.0f} samples/s needed: ${point.cost_usd:.2f}")

# %% Train on this host: the local catalog, a plan for it, a short job on synthetic data.
small = heterps.load_model("examples/models/dlrm-small.yaml", batch_size=256)
local = heterps.load_cluster("examples/clusters/local.yaml")
here = heterps.plan(small, local, throughput=1000, scheduler="exact", time_limit=10)
job_dir = tempfile.mkdtemp(prefix="heterps-python-")
result = heterps.train(here, model=small, cluster=local, job_dir=job_dir, rows=40000, batch=256)
print(f"eval AUC {result['eval_auc']:.4f}, {result['samples_per_second']:,.0f} samples/s "
      f"(predicted {result['predicted_samples_per_second']:,.0f}); "
      f"status: {heterps.status(job_dir)['state']}")
