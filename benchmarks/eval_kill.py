#!/usr/bin/env python3
"""How long a distributed job takes to notice a parameter-server shard killed during its final
evaluation: trains dlrm-small on 1,000,000 synthetic rows with half held out (a long evaluation),
kills shard 0 with SIGKILL 0.2 s after status.json says "phase": "evaluating", and prints the time
until the job says it restarts, and its exit code.

    python3 benchmarks/eval_kill.py JOB_DIR build/tools/heterps
"""
import json, os, subprocess, sys, time, signal
d = sys.argv[1]; binary = sys.argv[2]
os.system(f"rm -rf {d}; mkdir -p {d}")
err = open(f"{d}/err", "w")
p = subprocess.Popen([binary, "train", "--rows", "1000000", "--eval-fraction", "0.5", "--job-dir", d,
                      "--checkpoint-every", "20"], stdout=subprocess.DEVNULL, stderr=err)
killed = None
while p.poll() is None:
    try:
        s = json.load(open(f"{d}/status.json")); pr = json.load(open(f"{d}/processes.json"))
    except Exception:
        time.sleep(0.01); continue
    if killed is None and s.get("phase") == "evaluating":
        time.sleep(0.2)
        os.kill(pr["ranks"]["1"], signal.SIGKILL); killed = time.time()
    if killed is not None and "restarting from step" in open(f"{d}/err").read():
        print("noticed after %.2f s" % (time.time() - killed)); break
    time.sleep(0.01)
p.wait(); print("exit", p.returncode, "killed", killed is not None)
