"""heterps from Python: load specs, plan with any scheduler, the Pareto frontier, run a job and
read its status and metrics.

    import heterps
    model = heterps.load_model("examples/models/dlrm-small.yaml")     # or a dict
    cluster = heterps.load_cluster("examples/clusters/local.yaml")    # None: the cloud catalog
    plan = heterps.plan(model, cluster, throughput=20000, scheduler="rl", time_limit=5)
    print(plan.cost_usd, plan.optimality_gap, [s["type"] for s in plan.stages])
    result = heterps.train(plan, model=model, cluster=cluster, rows=50000, batch=256,
                           job_dir="/tmp/job")
    print(result["eval_auc"], heterps.status("/tmp/job")["state"])

Planning runs in this process (the same C++ as `heterps plan`); `train` runs the `heterps train`
command as a child process, as a job is run from the shell: the one the `HETERPS_CLI`
environment variable names, else the one installed with the package (`heterps/bin/heterps`,
inside the wheel the build writes), else the first `heterps` on PATH. Errors are exceptions with the library's message:
ValueError for bad input, FileNotFoundError for a missing file, RuntimeError otherwise (for
`train`: the command's one-line error).
"""

import json
import os
import shutil
import subprocess

from ._core import Cluster, Model, Plan, load_cluster, load_model, pareto, plan, schedulers

__all__ = ["Cluster", "Model", "Plan", "load_cluster", "load_model", "pareto", "plan",
           "schedulers", "status", "metrics", "train", "CLI"]

__version__ = "@PROJECT_VERSION@"


def _find_cli():
    """The `heterps` command `train` runs: see the module's docstring. None where there is none."""
    inside = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "heterps")
    for candidate in (os.environ.get("HETERPS_CLI"), inside, shutil.which("heterps")):
        if candidate and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


CLI = _find_cli()  # the command line `train` runs


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not JSON: {e}") from None


def status(job_dir):
    """The job's status.json (docs/runtime.md) as a dict: state, step, samples/s, replicas,
    parameter servers. FileNotFoundError when the job has written none."""
    return _read_json(os.path.join(job_dir, "status.json"))


def metrics(job_dir):
    """The metrics a finished job wrote (<job_dir>/metrics.json): eval AUC, losses, samples/s
    against the plan's prediction, each stage's time, the cost."""
    return _read_json(os.path.join(job_dir, "metrics.json"))


def _spec_file(spec, job_dir, name):
    """A path for the command line: a spec's own file, or its text written into the job dir."""
    if spec is None:
        return None
    if isinstance(spec, (str, os.PathLike)):
        return os.fspath(spec)
    if os.path.isfile(spec.source):
        return spec.source
    path = os.path.join(job_dir, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(spec.text)
    return path


def train(plan=None, *, model=None, cluster=None, data=None, job_dir, single_process=False,
          timeout=None, **options):
    """Runs `heterps train` on `plan` (a Plan, or a plan.json path; None: planned on this host;
    `single_process=True`: in one process, docs/training.md) and returns its metrics (a dict). `data`: a path, a glob or a list of them (None: synthetic
    rows). Other keyword arguments are the command's flags: `batch=256` is `--batch 256`,
    `skip_bad_lines=True` is `--skip-bad-lines`. RuntimeError with the command's error when it
    fails."""
    if CLI is None:
        raise RuntimeError("no heterps command: install the wheel the build writes "
                           "(build/python/dist/), set HETERPS_CLI, or put heterps on PATH")
    os.makedirs(job_dir, exist_ok=True)
    args = [CLI, "train", "--metrics-out", os.path.join(job_dir, "metrics.json")]
    # One process has no job directory of its own: its metrics go to job_dir all the same.
    args += ["--single-process"] if single_process else ["--job-dir", job_dir]
    if isinstance(plan, Plan):
        path = os.path.join(job_dir, "plan.json")
        plan.save(path)
        args += ["--plan", path]
        # A plan made for data kept in a region runs, and is re-planned, under the same rule.
        if plan.data.get("data_region") and "data_region" not in options:
            options["data_region"] = plan.data["data_region"]
            if plan.data.get("activations_may_cross"):
                options.setdefault("activations_may_cross", True)
    elif plan is not None:
        args += ["--plan", os.fspath(plan)]
    for flag, spec, name in (("--model", model, "model.yaml"), ("--cluster", cluster, "cluster.yaml")):
        path = _spec_file(spec, job_dir, name)
        if path is not None:
            args += [flag, path]
    if data is not None:
        args += ["--data"] + ([os.fspath(data)] if isinstance(data, (str, os.PathLike))
                              else [os.fspath(d) for d in data])
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif value is not False and value is not None:
            args += [flag, str(value)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        lines = [l for l in done.stderr.splitlines() if l.strip()]
        raise RuntimeError(lines[-1] if lines else f"heterps train exited {done.returncode}")
    return metrics(job_dir)
