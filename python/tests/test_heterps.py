"""The Python package against the command line it shares its C++ with (run by ctest, from the
source directory, with PYTHONPATH=build/python)."""

import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import heterps

MODEL = "examples/models/dlrm-small.yaml"
LOCAL = "examples/clusters/local.yaml"


def cli(*args):
    done = subprocess.run([heterps.CLI, *args], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


class SpecsTest(unittest.TestCase):
    def test_loads_files_and_dicts(self):
        model = heterps.load_model(MODEL)
        self.assertEqual(model.name, "dlrm-small")
        self.assertEqual(model.batch_size, 2048)
        self.assertIn("emb", model.layers)
        cluster = heterps.load_cluster(LOCAL)
        self.assertEqual(cluster.name, "local")
        self.assertEqual(heterps.load_cluster(None).name, "cloud")
        small = {"name": "tiny", "batch_size": 64, "layers": [
            {"name": "input", "kind": "input", "dense": 2, "sparse": 1},
            {"name": "emb", "kind": "embedding", "rows": 100, "dim": 4},
            {"name": "cat", "kind": "interaction", "op": "concat"},
            {"name": "top", "kind": "fc", "in": 6, "out": 1},
            {"name": "loss", "kind": "logloss"}]}
        self.assertEqual(heterps.load_model(small).layers, ["input", "emb", "cat", "top", "loss"])

    def test_errors_carry_the_librarys_message(self):
        with self.assertRaisesRegex(FileNotFoundError, "nope.yaml: cannot open"):
            heterps.load_model("nope.yaml")
        with self.assertRaisesRegex(ValueError, r"<model dict>:1: batch_size: must be > 0, got -1"):
            heterps.load_model({"name": "x", "batch_size": -1, "layers": []})
        with self.assertRaises(TypeError):
            heterps.load_model(42)
        model, cluster = heterps.load_model(MODEL), heterps.load_cluster(None)
        with self.assertRaisesRegex(ValueError, "unknown scheduler 'magic'"):
            heterps.plan(model, cluster, throughput=1e6, scheduler="magic")
        with self.assertRaisesRegex(ValueError, "throughput"):
            heterps.plan(model, cluster, throughput=-5)


class PlanTest(unittest.TestCase):
    def test_the_same_plan_as_the_command_line(self):
        model, cluster = heterps.load_model(MODEL), heterps.load_cluster(None)
        # At limits each scheduler meets (greedy's per-layer choices cannot reach 1e6 here).
        for scheduler, limit in (("exact", "1e6"), ("greedy", "2e5")):
            plan = heterps.plan(model, cluster, throughput=float(limit), scheduler=scheduler,
                                time_limit=20)
            with tempfile.TemporaryDirectory() as d:
                out = os.path.join(d, "plan.json")
                code, _, err = cli("plan", "--model", MODEL, "--throughput", limit,
                                   "--scheduler", scheduler, "--time-limit", "20", "--out", out)
                self.assertEqual(code, 0, err)
                with open(out) as f:
                    want = json.load(f)
            self.assertTrue(plan.feasible)
            self.assertEqual(plan.scheduler, scheduler)
            self.assertAlmostEqual(plan.cost_usd, want["cost_usd"], places=9)
            self.assertEqual([s["type"] for s in plan.stages], [s["type"] for s in want["stages"]])
            self.assertEqual([s["units"] for s in plan.stages], [s["units"] for s in want["stages"]])
        self.assertTrue(heterps.plan(model, cluster, throughput=1e6,
                                     scheduler="exact").certified_optimal)

    def test_a_data_region_keeps_the_plan_in_it_as_the_command_line_does(self):
        model = heterps.load_model(MODEL)
        cluster = heterps.load_cluster("examples/clusters/fleet-64.yaml")
        plan = heterps.plan(model, cluster, throughput=2e6, scheduler="exact",
                            data_region="ap-northeast-1")
        code, out, err = cli("plan", "--cluster", "examples/clusters/fleet-64.yaml",
                             "--throughput", "2000000", "--scheduler", "exact", "--json",
                             "--data-region", "ap-northeast-1")
        self.assertEqual(code, 0, err)
        want = json.loads(out)
        self.assertTrue(plan.feasible)
        self.assertEqual(plan.data["data_region"], "ap-northeast-1")
        self.assertEqual({s["region"] for s in plan.stages}, {"ap-northeast-1"})
        self.assertAlmostEqual(plan.cost_usd, want["cost_usd"], places=9)
        with self.assertRaisesRegex(ValueError, "region 'mars-1'"):
            heterps.plan(model, cluster, throughput=2e6, data_region="mars-1")
        crossing = heterps.plan(model, cluster, throughput=2e6, scheduler="exact",
                                data_region="ap-northeast-1", activations_may_cross=True)
        self.assertTrue(crossing.data["activations_may_cross"])
        self.assertFalse(plan.data["activations_may_cross"])
        self.assertLessEqual(crossing.cost_usd, plan.cost_usd * (1 + 1e-9))
        with self.assertRaisesRegex(ValueError, "activations_may_cross: needs data_region"):
            heterps.plan(model, cluster, throughput=2e6, activations_may_cross=True)

    def test_an_infeasible_limit_says_why(self):
        plan = heterps.plan(heterps.load_model(MODEL), heterps.load_cluster(LOCAL),
                            throughput=1e12, scheduler="exact", time_limit=5)
        self.assertFalse(plan.feasible)
        self.assertIn("even the fastest plan fails", plan.data["infeasible"]["reason"])
        self.assertEqual(repr(plan), "<heterps.Plan exact: infeasible: " +
                         plan.data["infeasible"]["reason"] + ">")

    def test_a_feasible_plan_prints_its_cost_and_speed(self):
        plan = heterps.plan(heterps.load_model(MODEL), heterps.load_cluster(None),
                            throughput=1e6, scheduler="exact", time_limit=10)
        self.assertRegex(repr(plan), r"^<heterps\.Plan exact: \$[0-9.,]+ for the job, "
                         r"\$[0-9.,]+/hour, [0-9]+ stages?, [0-9,]+ samples/s>$")

    def test_the_frontier_costs_more_for_more_throughput(self):
        model, cluster = heterps.load_model(MODEL), heterps.load_cluster(None)
        frontier = heterps.pareto(model, cluster, throughput=2e6, points=4, scheduler="exact",
                                  time_limit=10)
        self.assertEqual(len(frontier), 4)
        costs = [p.cost_usd for p in frontier]
        self.assertTrue(all(p.feasible and p.certified_optimal for p in frontier))
        self.assertEqual(costs, sorted(costs))
        with self.assertRaises(ValueError):
            heterps.pareto(model, cluster, throughput=1e6, points=1)

    def test_the_frontier_under_a_data_region_is_the_command_lines(self):
        model = heterps.load_model(MODEL)
        cluster = heterps.load_cluster("examples/clusters/fleet-64.yaml")
        for crossing in (False, True):
            frontier = heterps.pareto(model, cluster, throughput=3e6, points=3,
                                      scheduler="exact", data_region="ap-northeast-1",
                                      activations_may_cross=crossing)
            args = ["plan", "--pareto", "--pareto-points", "3", "--throughput", "3000000",
                    "--cluster", "examples/clusters/fleet-64.yaml", "--scheduler", "exact",
                    "--json", "--data-region", "ap-northeast-1"]
            code, out, err = cli(*(args + (["--activations-may-cross"] if crossing else [])))
            self.assertEqual(code, 0, err)
            want = json.loads(out)
            self.assertEqual(len(frontier), 3)
            for got, plan in zip(frontier, want["frontier"]):
                self.assertEqual(got.data["activations_may_cross"], crossing)
                self.assertEqual(got.feasible, plan["feasible"])
                if got.feasible:
                    self.assertAlmostEqual(got.cost_usd, plan["cost_usd"], places=9)
        with self.assertRaisesRegex(ValueError, "activations_may_cross: needs data_region"):
            heterps.pareto(model, cluster, throughput=1e6, activations_may_cross=True)


class TrainTest(unittest.TestCase):
    def test_a_plan_made_in_python_trains_and_reports(self):
        model = heterps.load_model(MODEL, batch_size=256)
        cluster = heterps.load_cluster(LOCAL)
        plan = heterps.plan(model, cluster, throughput=1000, scheduler="exact", time_limit=10)
        self.assertEqual(plan.data["batch_size"], 256)
        self.assertTrue(plan.feasible)
        with tempfile.TemporaryDirectory() as d:
            result = heterps.train(plan, model=model, cluster=cluster, job_dir=d, rows=40000,
                                   batch=256)
            self.assertEqual(result["train_samples"], 36000)
            self.assertGreater(result["eval_auc"], 0.65)  # chance is 0.5
            self.assertEqual(heterps.status(d)["state"], "done")
            self.assertEqual(heterps.metrics(d)["eval_auc"], result["eval_auc"])
            with self.assertRaisesRegex(RuntimeError, "nonexistent.tsv"):
                heterps.train(job_dir=d, data="/nonexistent.tsv", single_process=True)
        with self.assertRaises(FileNotFoundError):
            heterps.status("/nonexistent-job")


class WheelTest(unittest.TestCase):
    """The wheel the build writes, installed by pip into a fresh virtual environment and used from
    a directory far from the build: nothing in it points back into the build tree."""

    def test_the_wheel_installs_and_trains_anywhere(self):
        dist = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(heterps.__file__))),
                            "dist")
        wheels = glob.glob(os.path.join(dist, "heterps-*.whl"))
        self.assertEqual(len(wheels), 1, f"one wheel in {dist}")
        with tempfile.TemporaryDirectory() as d:
            env = os.path.join(d, "env")
            made = subprocess.run([sys.executable, "-m", "venv", env], capture_output=True,
                                  text=True)
            if made.returncode != 0 and "ensurepip" in made.stdout + made.stderr:
                self.skipTest("no venv with pip here (scripts/deps.sh installs python3-venv)")
            self.assertEqual(made.returncode, 0, made.stderr)
            python = os.path.join(env, "bin", "python")
            clean = {k: v for k, v in os.environ.items()
                     if k not in ("PYTHONPATH", "HETERPS_CLI")}
            clean["PATH"] = "/usr/bin:/bin"
            pip = subprocess.run([python, "-m", "pip", "install", "--no-index", "--no-deps",
                                  "--disable-pip-version-check", "-q", wheels[0]],
                                 capture_output=True, text=True, env=clean)
            self.assertEqual(pip.returncode, 0, pip.stderr)
            script = (
                "import heterps, json, os, sys\n"
                "plan = heterps.plan(heterps.load_model('dlrm-small.yaml', batch_size=256),\n"
                "                    heterps.load_cluster(None), throughput=1e12,\n"
                "                    scheduler='greedy', time_limit=5)\n"
                "m = heterps.train(job_dir='job', single_process=True, rows=3000, batch=256)\n"
                "print(json.dumps({'file': heterps.__file__, 'cli': heterps.CLI,\n"
                "                  'version': heterps.__version__, 'repr': repr(plan),\n"
                "                  'auc': m['eval_auc']}))\n")
            work = os.path.join(d, "work")
            os.makedirs(work)
            shutil.copy(MODEL, os.path.join(work, "dlrm-small.yaml"))
            done = subprocess.run([python, "-c", script], capture_output=True, text=True,
                                  cwd=work, env=clean)
            self.assertEqual(done.returncode, 0, done.stderr)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            self.assertTrue(got["file"].startswith(env), got["file"])
            self.assertTrue(got["cli"].startswith(env), got["cli"])
            self.assertEqual(got["version"], heterps.__version__)
            self.assertNotIn("@", got["version"])
            self.assertIn(": infeasible: ", got["repr"])
            self.assertGreater(got["auc"], 0.5)


class ExampleTest(unittest.TestCase):
    def test_the_notebook_style_example_runs(self):
        done = subprocess.run(["python3", "examples/python/plan_and_train.py"],
                              capture_output=True, text=True, env=dict(os.environ))
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertIn("status: done", done.stdout)


if __name__ == "__main__":
    unittest.main()
