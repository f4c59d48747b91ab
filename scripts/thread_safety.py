#!/usr/bin/env python3
"""Clang's thread-safety analysis over the sources that use absl's annotations.

g++ reads ABSL_GUARDED_BY, ABSL_EXCLUSIVE_LOCKS_REQUIRED and the rest as nothing; clang checks
them. This runs `clang++ -fsyntax-only -Wthread-safety` (warnings as errors) over every
translation unit of a configured and built tree (its compile_commands.json, with the headers it
generates) that includes, directly or not, a project header or source with an annotation (found
from the repository root): the other units cannot break a lock's contract. Only C++ sources are
checked (the CUDA compiler's .cu units are nvcc's), and the flags only g++ knows are left out.

Usage: scripts/thread_safety.py BUILD_DIR   (exit 1 with clang's diagnostics when one fails)
"""

import concurrent.futures
import functools
import json
import os
import re
import shlex
import subprocess
import sys

ANNOTATION = re.compile(
    r"ABSL_(GUARDED_BY|PT_GUARDED_BY|EXCLUSIVE_LOCKS_REQUIRED|SHARED_LOCKS_REQUIRED|"
    r"LOCKS_EXCLUDED|ACQUIRED_AFTER|ACQUIRED_BEFORE|EXCLUSIVE_LOCK_FUNCTION|UNLOCK_FUNCTION|"
    r"ASSERT_EXCLUSIVE_LOCK|SCOPED_LOCKABLE|LOCKABLE)\b")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# g++'s options that clang does not take, and the ones replaced here.
DROPPED = {"-Werror", "-Wall", "-Wextra", "-Wno-maybe-uninitialized", "-c"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    build = os.path.abspath(sys.argv[1])
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(build, "compile_commands.json")) as f:
        commands = json.load(f)

    @functools.lru_cache(maxsize=None)
    def annotated(path):
        full = os.path.join(root, path)
        if not os.path.exists(full):
            return False  # a system header, or one the build generates
        with open(full, errors="replace") as f:
            text = f.read()
        return bool(ANNOTATION.search(text)) or any(annotated(i) for i in INCLUDE.findall(text))

    units = []
    for entry in commands:
        source = os.path.relpath(entry["file"], root)
        if not source.endswith(".cc") or source.startswith(".."):
            continue
        args = shlex.split(entry["command"])
        if not annotated(source):
            continue
        out = ["clang++"]
        skip = False
        for a in args[1:]:
            if skip:
                skip = False
                continue
            if a == "-o":
                skip = True
                continue
            if a in DROPPED or a == entry["file"]:
                continue
            out.append(a)
        out += ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety",
                entry["file"]]
        units.append((source, out, entry["directory"]))

    def check(unit):
        source, args, directory = unit
        done = subprocess.run(args, cwd=directory, capture_output=True, text=True)
        return source, done.returncode, done.stderr

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for source, code, stderr in pool.map(check, units):
            if code != 0 or stderr.strip():
                failed += 1
                sys.stderr.write(stderr)
    print(f"thread safety: {len(units)} translation units checked, {failed} failed",
          file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
