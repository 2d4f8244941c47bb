"""Are measured timelines causal across ranks? Count SEND/RECV order violations over many runs.

    PYTHONPATH=. python3 bench/clock_truth.py --device cuda --out OUT [--runs 20] [--cli 3] [--offsets 6]

Runs ``--runs`` measured plans of three families (1F1B, ZB-V, interleaved 1F1B; pp 2, a small
model, 3 timed steps each) in one ``pptl run`` launch (one clock sync per plan: each is a run of
its own), ``--offsets`` more with ``PPTL_RUN_CLOCK=offsets`` (measured offsets applied though the
ranks share a host: the path a multi-node run takes), and ``--cli`` more as separate
``python -m pptl run`` commands. For every timeline it counts violations of the rule on measured
timelines (:mod:`pptl.checks.measured`, PP090/PP091 within the timeline's stated tolerance) on the
time base, and on the per-rank zeros it replaced (each rank's events moved back by its anchor's
skew, at the old default tolerance of 0.01 ms). Also reported: the smallest slack of a RECV's end
after its SEND's start, and the largest anchor skew between ranks.

Writes OUT/clock_truth.json and OUT/clock_truth.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pptl.checks.measured import DEFAULT_TOLERANCE_MS, measured_violations  # noqa: E402
from pptl.config import config_from_mapping  # noqa: E402
from pptl.formats.loader import load_any  # noqa: E402
from pptl.formats.plan import dumps, plan_to_dict  # noqa: E402
from pptl.schedules import build_schedule  # noqa: E402
from pptl.timeline import Timeline, TimelineMeta  # noqa: E402

FAMILIES = {"1f1b": {}, "zbv": {}, "interleaved-1f1b": {"vpp": 2}}


def _plans(device: str, microbatches: int) -> dict[str, Any]:
    wl = ({"hidden": 512, "tokens": 256, "layers_per_stage": 1, "dtype": "bfloat16"} if device == "cuda"
          else {"hidden": 64, "tokens": 32, "layers_per_stage": 1, "dtype": "float32"})
    return {f: build_schedule(config_from_mapping({"schedule": f, "pp": 2, "microbatches": microbatches,
                                                   "workload": wl, **extra}))
            for f, extra in FAMILIES.items()}


def _per_rank_zeros(tl: Timeline) -> Timeline:
    """The timeline as the per-rank zeros had it: each rank's events moved back by its anchor's skew."""
    skew = {int(r): float(v["anchor_skew_ms"]) for r, v in tl.meta.extra["clock"]["ranks"].items()}
    events = [replace(e, start=e.start - skew.get(e.rank, 0.0), end=e.end - skew.get(e.rank, 0.0)) for e in tl.events]
    extra = {k: v for k, v in tl.meta.extra.items() if k != "clock"}
    return Timeline(events, TimelineMeta(source="measured", units=tl.meta.units, extra=extra))


def _slack(tl: Timeline) -> float | None:
    """Smallest (RECV end - SEND start) over the messages, on the timeline's base."""
    by = {e.op: e for e in tl.events}
    out = [e.end - by[w].start for e in tl.events if e.kind == "RECV" for w in e.waits_on
           if w in by and by[w].kind == "SEND"]
    return min(out) if out else None


def _row(family: str, how: str, path: Path) -> dict[str, Any]:
    tl = load_any(path).timeline
    assert tl is not None
    clock = tl.meta.extra.get("clock") or {}
    new = measured_violations(tl)
    old = measured_violations(_per_rank_zeros(tl), DEFAULT_TOLERANCE_MS) if clock else []
    skews = [abs(float(v["anchor_skew_ms"])) for v in clock.get("ranks", {}).values()]
    return {"family": family, "how": how, "file": path.name, "events": len(tl.events),
            "violations": len(new), "codes": sorted({v.code for v in new}),
            "first": new[0].message if new else None,
            "violations_per_rank_zero": len(old), "tolerance_ms": clock.get("tolerance_ms"),
            "offsets_applied": clock.get("offsets_applied"),
            "measured_offset_ms": {r: v["measured_offset_ms"] for r, v in clock.get("ranks", {}).items()},
            "max_anchor_skew_ms": max(skews) if skews else None, "min_slack_ms": _slack(tl),
            "step_ms": tl.meta.extra.get("median_step_ms")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--runs", type=int, default=20, help="plans measured in one launch (families in turn)")
    ap.add_argument("--offsets", type=int, default=6, help="more, with PPTL_RUN_CLOCK=offsets")
    ap.add_argument("--cli", type=int, default=3, help="more, each its own `python -m pptl run`")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60)
    args = ap.parse_args()
    out = Path(args.out)
    work = out / "clock_work"
    work.mkdir(parents=True, exist_ok=True)
    plans = _plans(args.device, args.microbatches)
    names = list(plans)
    for f, s in plans.items():
        (work / f"{f}.json").write_text(dumps(plan_to_dict(s)))
    from pptl.run import run_plans

    rows: list[dict[str, Any]] = []
    t0 = time.time()
    for how, n in (("launch", args.runs), ("launch, offsets applied", args.offsets)):
        if n <= 0:
            continue
        if "offsets" in how:
            os.environ["PPTL_RUN_CLOCK"] = "offsets"
        tag = "off" if "offsets" in how else "run"
        batch = [(plans[names[k % len(names)]], work / f"{tag}{k:02d}-{names[k % len(names)]}.measured.json")
                 for k in range(n)]
        run_plans(batch, gpus=2, device=args.device, steps=args.steps, warmup=1, timeout=args.timeout)
        os.environ.pop("PPTL_RUN_CLOCK", None)
        rows += [_row(s.family, how, p) for s, p in batch]
        (out / "clock_truth.json").write_text(json.dumps({"runs": rows}, indent=1))  # kept if a later stage fails
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for k in range(args.cli):
        f = names[k % len(names)]
        dst = work / f"cli{k:02d}-{f}.measured.json"
        r = subprocess.run([sys.executable, "-m", "pptl", "run", str(work / f"{f}.json"), "--device", args.device,
                            "--steps", str(args.steps), "--timeout", str(args.timeout), "-o", str(dst)],
                           env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(r.stderr, file=sys.stderr)
            return 1
        rows.append(_row(f, "pptl run (CLI)", dst))
    took = time.time() - t0
    import torch

    machine = {"device": (torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"),
               "torch": torch.__version__, "python": platform.python_version(),
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "seconds": round(took, 1)}
    (out / "clock_truth.json").write_text(json.dumps({"machine": machine, "runs": rows}, indent=1))
    lines = [f"# Clock truth: {len(rows)} measured runs on {machine['device']} x2 ({args.device}), "
             f"torch {machine['torch']}, {machine['date']}", "",
             "| family | how | runs | violations (time base) | violations (per-rank zeros) | tolerance ms | "
             "min RECV end - SEND start, ms | max anchor skew, ms | median step, ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["family"], r["how"]), []).append(r)
    for (f, how), rs in groups.items():
        tol = [r["tolerance_ms"] for r in rs if r["tolerance_ms"] is not None]
        slack = [r["min_slack_ms"] for r in rs if r["min_slack_ms"] is not None]
        skew = [r["max_anchor_skew_ms"] for r in rs if r["max_anchor_skew_ms"] is not None]
        step = [r["step_ms"] for r in rs if r["step_ms"] is not None]
        lines.append(f"| {f} | {how} | {len(rs)} | {sum(r['violations'] for r in rs)} | "
                     f"{sum(r['violations_per_rank_zero'] for r in rs)} ({sum(1 for r in rs if r['violations_per_rank_zero'])} runs) | "
                     f"{max(tol):.4f} | {min(slack):.4f} | {max(skew):.4f} | "
                     f"{statistics.median(step):.3f} |" if tol and slack and skew and step else f"| {f} | {how} | {len(rs)} | ? |")
    total = sum(r["violations"] for r in rows)
    lines += ["", f"Total: {total} violations on the time base in {len(rows)} runs; "
              f"{sum(r['violations_per_rank_zero'] for r in rows)} with per-rank zeros."]
    (out / "clock_truth.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
