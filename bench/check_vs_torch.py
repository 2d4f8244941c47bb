"""pptl check + simulate against torch's _validate_schedule + _simulate_comms_compute.

For torch.distributed.pipelining's own schedules at pp 8..64 and 64..1024 micro-batches, torch
generates the schedule (CPU, no process group: mock stages), lowers it with its own
``_add_send_recv`` and the result is written once as a compute_comms CSV. Both tools then read
that same file:

- pptl: ``load_any`` (parse, infer placement and micro-batches, derive dependencies), every check
  rule (``run_checks``, NCCL P2P semantics) and the simulator.
- torch: ``_Action.from_str`` per cell, ``_validate_schedule`` and ``_simulate_comms_compute``
  (its simulator does not know OVERLAP_F_B, so DualPipeV's overlapped actions are split into
  their F and B for it; torch's FSDP actions are left out of the file, since its simulator
  rejects those too).

Then every invalid fixture that torch can read (CSV) goes through both, and the table says which
tool rejects it. Run: ``python bench/check_vs_torch.py`` (about 4 minutes on 2 cores: pp 8, 16,
32 with 64, 256, 512 micro-batches for each schedule, plus one pp=64 x 1024 corner), ``--quick``
(seconds) or ``--full`` (the whole pp x micro-batch grid); ``--repeat N`` times each file N times
(alternating the tools) and keeps the least; ``--markdown`` prints tables for docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import glob
import io
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: name -> (torch class name, stages per rank, V placement)
TORCH_SCHEDULES: dict[str, tuple[str, int, bool]] = {
    "GPipe": ("ScheduleGPipe", 1, False),
    "1F1B": ("Schedule1F1B", 1, False),
    "Interleaved1F1B": ("ScheduleInterleaved1F1B", 2, False),
    "InterleavedZeroBubble": ("ScheduleInterleavedZeroBubble", 2, False),
    "ZBVZeroBubble": ("ScheduleZBVZeroBubble", 2, True),
    "DualPipeV": ("ScheduleDualPipeV", 2, True),
    "LoopedBFS": ("ScheduleLoopedBFS", 2, False),
}
_FSDP = ("UNSHARD", "RESHARD", "REDUCE_GRAD")


class _MockStage:
    """What torch's schedule constructors read from a stage (no process group, no model run)."""

    def __init__(self, index: int, num_stages: int, pp: int, rank: int) -> None:
        import torch

        self.stage_index = index
        self.num_stages = num_stages
        self.group_size = pp
        self.group_rank = rank
        self.submod = torch.nn.Identity()
        self.is_first = index == 0
        self.is_last = index == num_stages - 1


def torch_schedule(name: str, pp: int, microbatches: int, stages_per_rank: int | None = None) -> Any:
    """Build torch's schedule object ``name`` on CPU (rank 0's view; every rank's order is in it)."""
    from torch.distributed.pipelining import schedules as S

    cls_name, spr, v = TORCH_SCHEDULES[name]
    spr = stages_per_rank or spr
    cls = getattr(S, cls_name)
    n = pp * spr
    if spr == 1 and cls_name in ("ScheduleGPipe", "Schedule1F1B"):
        return cls(_MockStage(0, n, pp, 0), microbatches)
    idx = [0, n - 1] if v else [k * pp for k in range(spr)]
    return cls([_MockStage(i, n, pp, 0) for i in idx], microbatches)


def compute_rows(sched: Any) -> list[list[str]]:
    """torch's compute order per rank, as CSV cells (idle steps and REDUCE_GRAD dropped)."""
    order = sched.pipeline_order
    return [[str(a) for a in order[r] if a is not None and a.computation_type.value not in _FSDP]
            for r in sorted(order)]


def comms_rows(sched: Any) -> list[list[str]]:
    """torch's lowered order with SEND/RECV (FSDP actions left out), as CSV cells."""
    order = sched.pipeline_order_with_comms
    return [[str(a) for a in order[r] if a is not None and a.computation_type.value not in _FSDP]
            for r in sorted(order)]


def write_rows(rows: list[list[str]], path: Path) -> None:
    from pptl.fileio import atomic_write
    from pptl.formats.torch_csv import dumps_rows

    atomic_write(path, dumps_rows(rows))


def torch_check_file(path: str | Path, pp: int, num_stages: int, microbatches: int) -> str:
    """torch's reading of a CSV: parse, _validate_schedule, then _simulate_comms_compute (after
    _add_send_recv when the file has no communication). Returns "ok" or torch's first error line."""
    from torch.distributed.pipelining import schedules as S

    try:
        with open(path, newline="") as f:
            actions = {r: [S._Action.from_str(c) for c in row] for r, row in enumerate(csv.reader(f))}
        mapping = S._validate_schedule(actions, pp, num_stages, microbatches)
        comm = any(a is not None and a.computation_type.value.startswith(("SEND", "RECV"))
                   for row in actions.values() for a in row)
        if not comm:
            actions = S._add_send_recv({r: [a for a in v if a is not None] for r, v in actions.items()},
                                       lambda s: mapping[s], num_stages)
        flat = {r: [x for a in v if a is not None and a.computation_type.value not in _FSDP
                    for x in (a.sub_actions or (a,))] for r, v in actions.items()}
        with contextlib.redirect_stdout(io.StringIO()):
            S._simulate_comms_compute(flat, lambda s: mapping[s], num_stages)
    except Exception as e:  # torch raises AssertionError, ValueError, RuntimeError, KeyError
        text = str(e).strip().splitlines()
        return f"{type(e).__name__}: {text[0] if text else ''}"[:160]
    return "ok"


def pptl_check_file(path: str | Path, microbatches: int | None = None, p2p: str = "nccl") -> tuple[str, dict]:
    """pptl's reading: load_any, every rule (as ``pptl check``), then the simulator on the same
    DAG (as ``pptl plan`` does). Returns ("ok" or the first error, seconds per phase)."""
    from pptl.checks import Context, check_context
    from pptl.errors import PptlError
    from pptl.formats.loader import load_any

    times: dict[str, float] = {}
    t = time.perf_counter()
    try:
        loaded = load_any(path, microbatches=microbatches, report_problems=True)
        times["load"] = time.perf_counter() - t
        t = time.perf_counter()
        ctx = Context(loaded.schedule, p2p=p2p)
        violations = list(getattr(loaded, "problems", ())) + check_context(ctx)
        times["check"] = time.perf_counter() - t
        errors = [v for v in violations if v.severity == "error"]
        if errors:
            errors.sort(key=lambda v: v.code)
            return f"{errors[0].code}: {errors[0].message}"[:160], times
        t = time.perf_counter()
        ctx.simulation  # noqa: B018  (the simulator, on the DAG and order the checks built)
        times["simulate"] = time.perf_counter() - t
    except PptlError as e:
        return f"error: {e}"[:160], times
    return "ok", times


def time_grid(grid: list[tuple[str, int, int]], repeat: int = 1) -> list[dict]:
    from torch.distributed.pipelining import schedules as S  # noqa: F401  (import cost outside the timing)

    import pptl.checks  # noqa: F401  (pptl's imports outside the timing too, as torch's)
    import pptl.formats.torch_csv  # noqa: F401
    import pptl.simulate  # noqa: F401
    from pptl.schedules import FAMILIES  # noqa: F401  (reading it imports every family: PP022 asks one)

    pptl.checks.rule_table()  # imports the rule modules

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, pp, m in grid:
            sched = torch_schedule(name, pp, m)
            path = Path(tmp) / f"{name}_{pp}_{m}.csv"
            write_rows(comms_rows(sched), path)
            n = pp * TORCH_SCHEDULES[name][1]
            actions = sum(1 for row in csv.reader(open(path)) for c in row if c)
            del sched
            t_torch = t_pptl = float("inf")
            for _ in range(repeat):  # the least of `repeat` runs of each, alternating
                gc.collect()
                t = time.perf_counter()
                torch_result = torch_check_file(path, pp, n, m)
                t_torch = min(t_torch, time.perf_counter() - t)
                gc.collect()
                t = time.perf_counter()
                pptl_result, parts = pptl_check_file(path, microbatches=m)
                t_pptl = min(t_pptl, time.perf_counter() - t)
                gc.collect()
            row = {"schedule": name, "pp": pp, "microbatches": m, "actions": actions, "torch_s": t_torch,
                   "pptl_s": t_pptl, "ratio": t_pptl / t_torch if t_torch else float("nan"), "torch": torch_result,
                   "pptl": pptl_result, **{f"pptl_{k}_s": v for k, v in parts.items()}}
            rows.append(row)
            print(f"{name:16s} pp={pp:3d} m={m:5d} actions={actions:8d}  torch {t_torch:7.3f}s  pptl {t_pptl:7.3f}s "
                  f"(load {parts.get('load', 0):.2f} check {parts.get('check', 0):.2f} "
                  f"sim {parts.get('simulate', 0):.2f})  ratio {row['ratio']:.2f}  [{torch_result} | {pptl_result}]",
                  file=sys.stderr, flush=True)
    return rows


def fixture_table() -> list[dict]:
    """Every invalid fixture: which tool rejects it. torch reads CSVs as they are; other fixtures
    (pptl plans, configs) are written as torch CSV by pptl first (compute_comms when they list
    their P2P and can be simulated, else compute_only, which torch lowers itself)."""
    from pptl.errors import PptlError
    from pptl.formats.loader import load_any
    from pptl.formats.torch_csv import export_csv
    from pptl.planning import check_file

    out = []
    files = sorted(glob.glob(str(ROOT / "fixtures/invalid/*")) + glob.glob(str(ROOT / "fixtures/csv/invalid/*.csv")))
    with tempfile.TemporaryDirectory() as tmp:
        for f in files:
            rel = os.path.relpath(f, ROOT)
            row: dict[str, Any] = {"fixture": rel}
            for mode in ("nonblocking", "nccl", "blocking"):
                try:
                    report = check_file(f, p2p=mode)
                    row[mode] = sorted({v.code for v in report.violations if v.severity == "error"})
                except PptlError as e:
                    row[mode] = [f"input error: {e}"[:80]]
            try:
                s = load_any(f, report_problems=True).schedule
                path = f
                if not f.endswith(".csv"):
                    path = os.path.join(tmp, os.path.basename(f) + ".csv")
                    try:
                        text, _ = export_csv(s, comms=any(op.kind in ("SEND", "RECV") for op in s.ops))
                    except PptlError:
                        text, _ = export_csv(s, comms=False)
                    Path(path).write_text(text)
                row["torch"] = torch_check_file(path, s.pp, s.num_stages, s.microbatches)
            except PptlError as e:
                row["torch"] = f"n/a: {str(e)[:70]}"
            out.append(row)
    return out


def _markdown(rows: list[dict], fixtures: list[dict]) -> str:
    lines = ["| schedule | pp | micro-batches | actions | torch (s) | pptl (s) | pptl / torch |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['schedule']} | {r['pp']} | {r['microbatches']} | {r['actions']} | {r['torch_s']:.3f} | "
                     f"{r['pptl_s']:.3f} | {r['ratio']:.2f} |")
    lines += ["", "| fixture | torch (_validate_schedule + _simulate_comms_compute) | pptl nonblocking | pptl nccl "
              "| pptl blocking |", "|---|---|---|---|---|"]
    for f in fixtures:
        torch_cell = "accepts" if f["torch"] == "ok" else (
            f["torch"] if f["torch"].startswith("n/a") else "rejects (" + f["torch"].replace("|", "/")[:70] + ")")
        modes = [", ".join(f[m]) if f[m] else "accepts" for m in ("nonblocking", "nccl", "blocking")]
        lines.append(f"| {f['fixture']} | {torch_cell} | " + " | ".join(modes) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small grid (seconds)")
    ap.add_argument("--full", action="store_true", help="pp 8..64 x 64..1024 micro-batches (an hour or more)")
    ap.add_argument("--markdown", action="store_true", help="print tables for docs/benchmarks.md")
    ap.add_argument("--repeat", type=int, default=1, help="time each file this many times, keep the least (default 1)")
    ap.add_argument("--schedules", default="Interleaved1F1B,ZBVZeroBubble,DualPipeV",
                    help="comma-separated torch schedule names")
    args = ap.parse_args(argv)
    gc.set_threshold(200_000, 20, 100)  # as the pptl CLI does; applies to both tools
    names = [s.strip() for s in args.schedules.split(",") if s.strip()]
    for s in names:
        if s not in TORCH_SCHEDULES:
            ap.error(f"--schedules: unknown '{s}'; known: {', '.join(TORCH_SCHEDULES)}")
    if args.quick:
        grid = [(s, pp, m) for s in names for pp, m in ((8, 64), (16, 128))]
    elif args.full:
        grid = [(s, pp, m) for s in names for pp in (8, 16, 32, 64) for m in (64, 256, 1024)]
    else:
        # torch itself needs ~70 s to generate one pp=64, m=1024 schedule: one such corner by default.
        grid = [(s, pp, m) for s in names for pp, m in ((8, 64), (16, 256), (32, 512))]
        grid.append((names[min(1, len(names) - 1)], 64, 1024))
    rows = time_grid(grid, max(1, args.repeat))
    fixtures = fixture_table()
    if args.markdown:
        print(_markdown(rows, fixtures))
    else:
        for f in fixtures:
            print(f"{f['fixture']}: torch {f['torch']} | pptl nonblocking {f['nonblocking']} nccl {f['nccl']} "
                  f"blocking {f['blocking']}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
