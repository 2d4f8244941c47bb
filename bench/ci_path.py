"""The CI path, timed as CI runs it: ``pptl plan ... -o plan.json`` then ``pptl check plan.json``,
two processes, the file written and read (interpreter start and imports included).

Each command runs ``--repeat`` times as a child process; the table keeps the least user CPU time
(user + system beside it), the wall time of that run and the largest max RSS. ``--trees`` runs
other checkouts of pptl in the same minutes (each from its own folder: ``python -m pptl`` puts
the folder first on ``sys.path``), for before/after tables measured side by side.

    python bench/ci_path.py [--cases 32x256,64x512] [--repeat 3] [--trees /tmp/before,.]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(cmd: list[str], cwd: Path) -> tuple[float, float, float, float]:
    """(user s, system s, wall s, max RSS MB) of one child process."""
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {code}: {err.strip().splitlines()[-1] if err.strip() else ''}")
    return usage.ru_utime, usage.ru_stime, wall, usage.ru_maxrss / 1024


def best(runs: list[tuple[float, float, float, float]]) -> tuple[float, float, float, float]:
    u, s, w, _ = min(runs, key=lambda r: r[0])
    return u, s, w, max(r[3] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="32x256,64x512", help="pp x micro-batches, comma-separated (V 2)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--trees", default=str(ROOT), help="checkouts to time, comma-separated")
    ap.add_argument("--schedule", default="interleaved-1f1b")
    a = ap.parse_args()
    trees = [Path(t).resolve() for t in a.trees.split(",")]
    print(f"# {time.strftime('%Y-%m-%d %H:%M')} · Python {sys.version.split()[0]} · {os.cpu_count()} cores · "
          f"load {os.getloadavg()[0]:.1f} · least user CPU of {a.repeat}")
    print()
    print("| tree | case | ops | file | `plan -o` user (+sys, wall) | `check` user (+sys, wall) | both user | "
          "max RSS MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for case in a.cases.split(","):
            pp, mb = map(int, case.split("x"))
            for tree in trees:
                path = Path(tmp) / f"{tree.name}-{pp}x{mb}.json"
                plan_cmd = [sys.executable, "-m", "pptl", "plan", "--schedule", a.schedule, "--pp", str(pp), "--vpp",
                            "2", "-m", str(mb), "-o", str(path)]
                check_cmd = [sys.executable, "-m", "pptl", "check", str(path)]
                plans, checks = [], []
                for _ in range(a.repeat):  # alternate, as CI would run them
                    plans.append(timed(plan_cmd, tree))
                    checks.append(timed(check_cmd, tree))
                p, c = best(plans), best(checks)
                import json

                ops = json.loads(path.read_text())["metrics"]["ops"]
                size = path.stat().st_size
                print(f"| {tree.name} | pp {pp}, {mb} mb | {ops:,} | {size / 1e6:.1f} MB ({size / ops:.0f} B/op) "
                      f"| {p[0]:.2f} s (+{p[1]:.2f}, {p[2]:.2f}) | {c[0]:.2f} s (+{c[1]:.2f}, {c[2]:.2f}) "
                      f"| **{p[0] + c[0]:.2f} s** | {max(p[3], c[3]):.0f} |", flush=True)


if __name__ == "__main__":
    main()
