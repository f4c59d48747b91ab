#!/usr/bin/env python3
"""Keeps docs/architecture.md true to the build graph.

Reads every library of heterps/ and tools/ from their CMake files (heterps_cc_library and
heterps_proto_library: name, folder, the heterps libraries it depends on; the tests' and the
benchmarks' helper libraries are not in the table) and checks the document's library table
against it: one row per library, in its folder, whose "depends on" cell names exactly the
heterps libraries the CMake file does (without the heterps_ prefix). Then checks that every
source of heterps/ and tools/ over 500 lines is named under "Files over 500 lines".

Usage: scripts/check_architecture.py [REPO_ROOT]   (exit 1 naming each difference)
"""

import os
import re
import sys

LIBRARY = re.compile(r"heterps_(?:cc|proto)_library\(\s*NAME\s+(\S+)(.*?)\)\s*$", re.S | re.M)
ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|\s*`([^`]+)`\s*\|([^|]*)\|", re.M)
LONG = 500


def libraries(root):
    """{library: (folder, {heterps libraries it depends on})} from the CMake files."""
    out = {}
    for base in ("heterps", "tools"):
        for folder, _, files in os.walk(os.path.join(root, base)):
            if "CMakeLists.txt" not in files:
                continue
            with open(os.path.join(folder, "CMakeLists.txt")) as f:
                text = re.sub(r"#.*", "", f.read())
            for m in LIBRARY.finditer(text):
                deps = re.search(r"\bDEPS\b(.*)", m.group(2), re.S)
                names = deps.group(1).split() if deps else []
                out[m.group(1)] = (os.path.relpath(folder, root),
                                   {n for n in names if n.startswith("heterps_")})
    return out


def short(name):
    return name[len("heterps_"):] if name.startswith("heterps_") else name


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    doc_path = os.path.join(root, "docs", "architecture.md")
    with open(doc_path) as f:
        doc = f.read()
    problems = []
    rows = {}
    for m in ROW.finditer(doc):
        folder, library = m.group(1), m.group(2)
        cell = m.group(3).strip()
        deps = {d.strip().strip("`") for d in cell.split(",") if d.strip() not in ("", "-")}
        rows[library] = (folder, deps)
    built = libraries(root)
    for library, (folder, deps) in sorted(built.items()):
        if library not in rows:
            problems.append(f"no row for {library} ({folder})")
            continue
        doc_folder, doc_deps = rows[library]
        if doc_folder != folder:
            problems.append(f"{library}: the table says folder {doc_folder}, CMake {folder}")
        want = {short(d) for d in deps}
        if doc_deps != want:
            problems.append(f"{library}: the table says it depends on "
                            f"{', '.join(sorted(doc_deps)) or '-'}; CMake says "
                            f"{', '.join(sorted(want)) or '-'}")
    for library in sorted(set(rows) - set(built)):
        problems.append(f"{library}: in the table, not in any CMakeLists.txt")
    section = doc.split("## Files over 500 lines", 1)
    long_part = section[1] if len(section) == 2 else ""
    for base in ("heterps", "tools"):
        for folder, _, files in os.walk(os.path.join(root, base)):
            for name in files:
                if not name.endswith((".cc", ".h", ".cu", ".inl")):
                    continue
                path = os.path.join(folder, name)
                with open(path, errors="replace") as f:
                    lines = sum(1 for _ in f)
                rel = os.path.relpath(path, root)
                if lines > LONG and f"`{rel}`" not in long_part:
                    problems.append(f"{rel}: {lines} lines, not named under 'Files over 500 lines'")
    for p in problems:
        print(f"{os.path.relpath(doc_path, root)}: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
