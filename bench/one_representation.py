"""The speed lines of the op-table core, each command a child process (interpreter start and imports
included) as a user and CI run it, several checkouts taking turns so a busy minute hits each alike:

1. ``pptl plan --output json`` of interleaved 1F1B, pp 64, V 2, 512 micro-batches (391,168 ops);
2. the CI path at pp 32, 256 micro-batches: ``pptl plan -o p.json`` then ``pptl check p.json`` (user CPU of both);
3. ``pptl check`` of a 4-op plan (start-up);
4. ``pptl render`` of the 391k-op plan to PNG.

Per tree and line: the least user CPU of ``--repeat`` runs (the start-up line: the median user + system,
as bench/cli_startup.py), and the ratio to the first tree. Absolute seconds move with the machine (this
container measured the same checkout 1.5-2x apart on two days); the ratios compare trees in the same minutes.

    python bench/one_representation.py [--trees /tmp/ref,.] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ci_path import timed  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default=str(ROOT), help="checkouts to time, comma-separated (the first is the reference)")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    trees = [Path(t).resolve() for t in a.trees.split(",")]
    py = sys.executable
    big = ["--schedule", "interleaved-1f1b", "--pp", "64", "--vpp", "2", "-m", "512"]
    results: dict[str, dict[Path, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for tree in trees:  # each tree draws the plan file it writes itself (its own format)
            timed([py, "-m", "pptl", "plan", *big, "-o", str(t / f"{tree.name}-p64.json")], tree)
            timed([py, "-m", "pptl", "plan", "-s", "1f1b", "--pp", "1", "-m", "2", "-o", str(t / f"{tree.name}-tiny.json")],
                  tree)
        lines = {
            "`plan --output json` pp 64 V 2 512 mb": lambda tr: [[py, "-m", "pptl", "plan", *big, "--output", "json"]],
            "CI path pp 32 256 mb (plan -o + check)": lambda tr: [
                [py, "-m", "pptl", "plan", "--schedule", "interleaved-1f1b", "--pp", "32", "--vpp", "2", "-m", "256",
                 "-o", str(t / f"{tr.name}-p32.json")], [py, "-m", "pptl", "check", str(t / f"{tr.name}-p32.json")]],
            "`check` of a 4-op plan (median user+sys)": lambda tr: [[py, "-m", "pptl", "check",
                                                                    str(t / f"{tr.name}-tiny.json")]],
            "`render` the 391k-op plan to PNG": lambda tr: [[py, "-m", "pptl", "render", str(t / f"{tr.name}-p64.json"),
                                                             "-o", str(t / f"{tr.name}-p64.png")]],
        }
        for name, commands in lines.items():
            startup = name.startswith("`check` of a 4-op")
            repeat = max(a.repeat, 9) if startup else a.repeat
            runs: dict[Path, list[float]] = {tree: [] for tree in trees}
            for _ in range(repeat):
                for tree in trees:
                    total = 0.0
                    for cmd in commands(tree):
                        user, system, _, _ = timed(cmd, tree)
                        total += user + system if startup else user
                    runs[tree].append(total)
            results[name] = {tree: statistics.median(r) if startup else min(r) for tree, r in runs.items()}
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} · Python {sys.version.split()[0]} · {os.cpu_count()} cores · "
          f"load {os.getloadavg()[0]:.1f} · least user CPU of {a.repeat} (start-up: median of {max(a.repeat, 9)})")
    print()
    print("| line | " + " | ".join(tree.name for tree in trees) + " | " +
          " | ".join(f"{tree.name} / {trees[0].name}" for tree in trees[1:]) + " |")
    print("|---|" + "---:|" * (2 * len(trees) - 1))
    for name, by_tree in results.items():
        ref = by_tree[trees[0]]
        print(f"| {name} | " + " | ".join(f"{by_tree[tree]:.3f} s" for tree in trees) + " | " +
              " | ".join(f"{by_tree[tree] / ref:.2f}" for tree in trees[1:]) + " |")


if __name__ == "__main__":
    main()
