"""Inject faults into `pptl run` and measure how it shuts down (docs/reliability.md), on CPU or GPUs.

    PYTHONPATH=. python3 bench/run_faults.py --device cuda --gpus 2 --out OUT
    PYTHONPATH=. python3 bench/run_faults.py --device cpu --gpus 4 --out OUT

For each fault (``PPTL_RUN_FAULT=KIND:RANK:OP``, the run's test hook): a rank that raises, one killed
with SIGKILL, one that hangs in compute, and one that stops before posting a receive, it runs the real
command line in a subprocess and records: the exit code, the one error line, the seconds from the fault
to the last rank's exit, the whole command's seconds, the processes left behind (found through /proc by
an environment marker every rank inherits), and whether the partial timeline renders. Prints a
Markdown table; writes OUT/faults.json.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pptl.config import config_from_mapping  # noqa: E402
from pptl.formats.plan import dumps, plan_to_dict  # noqa: E402
from pptl.run.progress import Board  # noqa: E402
from pptl.schedules import build_schedule  # noqa: E402

#: (name, fault): rank 1 holds stage 1 in every 1F1B plan of 2 or more ranks.
FAULTS = [
    ("raises", "raise:1:r1/compute/F s1 mb2"),
    ("SIGKILL", "kill:1:r1/compute/B s1 mb1"),
    ("hangs in compute", "hang:1:r1/compute/B s1 mb1"),
    ("never posts its receive", "hang:1:r1/recv/RECV_F s1 mb2 <-r0"),
]


def marked(mark: str) -> list[int]:
    """Live (or zombie) processes whose environment holds ``mark``."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            if mark.encode() in (d / "environ").read_bytes().split(b"\0"):
                found.append(int(d.name))
        except OSError:
            continue
    return found


def shutdown_seconds(rundir: Path, fault: str) -> float | None:
    """Seconds from the fault to the last rank's exit, from the run folder the launcher keeps on failure
    (None if no rank's exit was recorded).

    The fault's time: the failing rank's own record (raise), its exit (kill), or the moment it posted
    the op it stopped at (hang). Exits: when the spawner reaped each rank (its exit file).
    """
    kind, rank = fault.split(":")[0], int(fault.split(":")[1])
    exits = list(rundir.glob("exit.rank*"))
    if not exits:
        return None
    last = max(p.stat().st_mtime for p in exits)
    if kind == "raise":
        t0 = json.loads((rundir / f"failure.rank{rank}.json").read_text())["time"]
    elif kind == "kill":
        t0 = (rundir / f"exit.rank{rank}").stat().st_mtime
    else:
        board = Board(rundir / "progress.bin", len(exits))
        t0 = board.read(rank).time
        board.close()
    return last - t0


def main() -> int:
    a = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    a.add_argument("--device", default="cpu")
    a.add_argument("--gpus", type=int, default=2)
    a.add_argument("--timeout", type=float, default=5.0)
    a.add_argument("--out", type=Path, required=True)
    args = a.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    workload = {"hidden": 256, "tokens": 64, "layers_per_stage": 1, "dtype": "float32"}
    s = build_schedule(config_from_mapping({"schedule": "1f1b", "pp": args.gpus, "microbatches": 2 * args.gpus,
                                            "workload": workload}))
    plan = args.out / "plan.json"
    plan.write_text(dumps(plan_to_dict(s)))
    rows = []
    for name, fault in FAULTS:
        mark = uuid.uuid4().hex
        tmp = args.out / f"tmp-{mark[:8]}"
        tmp.mkdir()
        out = args.out / f"measured-{fault.split(':')[0]}-{len(rows)}.json"
        env = dict(os.environ, PPTL_RUN_FAULT=fault, PPTL_FAULT_MARK=mark, TMPDIR=str(tmp),
                   PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pptl", "run", str(plan), "--device", args.device,
                               "--gpus", str(args.gpus), "--steps", "2", "--warmup", "1", "--timeout",
                               str(args.timeout), "-o", str(out)], env=env, capture_output=True, text=True,
                              timeout=600)
        took = time.monotonic() - t0
        left = marked(f"PPTL_FAULT_MARK={mark}")
        errors = [line for line in proc.stderr.splitlines() if line.strip()]
        m = re.search(r"\(logs in (\S+)\)", proc.stderr)
        shut = shutdown_seconds(Path(m.group(1)), fault) if m else None
        drawn = subprocess.run([sys.executable, "-m", "pptl", "render", str(out), "--width", "100"], env=env,
                               capture_output=True, text=True, timeout=120) if out.exists() else None
        rows.append({"fault": name, "hook": fault, "exit_code": proc.returncode, "error_lines": len(errors),
                     "error": errors[-1] if errors else "", "shutdown_s": shut, "command_s": took,
                     "left_behind": left, "partial_timeline_renders": bool(drawn and drawn.returncode == 0)})
    (args.out / "faults.json").write_text(json.dumps({"device": args.device, "gpus": args.gpus,
                                                      "timeout": args.timeout, "cases": rows}, indent=1))
    print(f"{args.gpus} ranks on {args.device}, --timeout {args.timeout:g}\n")
    print("| fault | exit | error lines | fault -> last rank exit (s) | command (s) | left behind | timeline renders |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        shut = "?" if r["shutdown_s"] is None else f"{r['shutdown_s']:.2f}"
        print(f"| {r['fault']} | {r['exit_code']} | {r['error_lines']} | {shut} | {r['command_s']:.1f} | "
              f"{len(r['left_behind'])} | {'yes' if r['partial_timeline_renders'] else 'no'} |")
    for r in rows:
        print(f"\n{r['fault']}: {r['error']}")
    ok = all(r["exit_code"] == 1 and r["error_lines"] == 1 and not r["left_behind"] and r["partial_timeline_renders"]
             for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
