"""Start-up of the command line: ``pptl --help`` and ``pptl check`` of a 4-op plan, each a fresh
process (interpreter start and imports included), as a user and CI pay it.

Each command runs ``--repeat`` times per checkout; the table gives the median user + system CPU
seconds and the median wall time. ``--trees`` times other checkouts side by side (each runs from its
own folder: ``python -m pptl`` puts that folder first on ``sys.path``), for before/after tables.

    python bench/cli_startup.py [--repeat 15] [--trees /tmp/before,.]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(user + system s, wall s) of one child process; a failure stops the bench."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(cwd)})
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} in {cwd} failed: {err.strip()[-300:]}")
    return usage.ru_utime + usage.ru_stime, wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--trees", default=str(ROOT), help="checkouts to time, comma-separated")
    a = ap.parse_args()
    trees = [Path(t).resolve() for t in a.trees.split(",")]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} · Python {sys.version.split()[0]} · {os.cpu_count()} cores · "
          f"load {os.getloadavg()[0]:.1f} · median of {a.repeat}")
    print()
    print("| tree | command | user+sys s | wall s |")
    print("|---|---|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        plan = Path(tmp) / "tiny.json"  # 1f1b, 1 rank, 2 micro-batches: F and B of each
        _timed([sys.executable, "-m", "pptl", "plan", "-s", "1f1b", "--pp", "1", "-m", "2", "-o", str(plan)], trees[0])
        cases = {"--help": ["--help"], "check (4 ops)": ["check", str(plan)]}
        for name, args in cases.items():
            runs: dict[Path, list[tuple[float, float]]] = {tree: [] for tree in trees}
            for _ in range(a.repeat):  # the trees take turns, so a busy minute hits each alike
                for tree in trees:
                    runs[tree].append(_timed([sys.executable, "-m", "pptl", *args], tree))
            for tree in trees:
                cpu = statistics.median(r[0] for r in runs[tree])
                wall = statistics.median(r[1] for r in runs[tree])
                print(f"| {tree.name} | `pptl {' '.join(args) if name == '--help' else 'check tiny.json'}` | "
                      f"{cpu:.3f} | {wall:.3f} |", flush=True)


if __name__ == "__main__":
    main()
