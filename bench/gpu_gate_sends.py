"""Beside SENDs gated or not (``PPTL_RUN_GATE_SENDS``): stored cross-validation candidates run again both ways.

For each saved shape (``tests/data/tune_crossval/NAME.json``) the chosen candidates (``--families``, default
the interleaved 1F1B one and 1F1B) are rebuilt from the saved calibrating run exactly as they were ranked,
then run in one launch with the send gates off and in one with them on (``--rounds`` alternations). Per
candidate: the predicted step, the measured median step each way, how many SENDs ran beside compute and
the longest of them. ``--verify`` checks the gradients of every run against a reference step.

    python3 bench/gpu_gate_sends.py --out OUT [--shapes h2688-t1536-l6-m25,...] [--steps 20] [--rounds 2]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "tune_crossval"


def _plans(name: str, families: list[str]) -> list[tuple[str, float, Any]]:
    import tune_crossval as tcv
    from _tune_common import retime

    from pptl.tune.rank import best_schedule

    saved = json.loads((DATA / f"{name}.json").read_text())
    tc = tcv._calibrated(saved)
    out = []
    for row in saved["rows"]:
        if row["family"] not in families:
            continue
        r = retime(tc, row["label"], row["stage_layers"])
        if r is None or r.step is None:
            continue
        out.append((f"{name} {row['label']}", float(r.step), best_schedule(tc, r)))
    return out


def _beside(schedule: Any, tl: Any) -> tuple[int, float]:
    """(SENDs ``sync-send`` runs beside compute, the longest of them in the measured step, ms)."""
    from pptl.run.program import as_run

    run = as_run(schedule, "sync-send")
    ids = {schedule.ops[i].id for i in (run.unheld if run is not None else ())}
    times = [e.end - e.start for e in tl.events if e.op in ids]
    return len(ids), max(times, default=0.0)


def main(argv: list[str] | None = None) -> int:
    from pptl.run import run_plans

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default=None)
    ap.add_argument("--shapes", default="h2688-t1536-l6-m25,h2944-t1792-l10-m21")
    ap.add_argument("--families", default="interleaved-1f1b,1f1b")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--verify", action="store_true")
    ap.add_argument("--messages", default=None, help="pptl run's message mode (default: its own, sync-send)")
    a = ap.parse_args(argv)
    plans = [p for n in a.shapes.split(",") for p in _plans(n, a.families.split(","))]
    work = Path(a.work or tempfile.mkdtemp(prefix="pptl_gate_sends_"))
    work.mkdir(parents=True, exist_ok=True)
    rows: dict[str, dict[str, Any]] = {label: {"predicted_ms": step, "off": [], "on": []} for label, step, _ in plans}
    for rnd in range(a.rounds):
        for setting in ("off", "on"):
            os.environ["PPTL_RUN_GATE_SENDS"] = "0" if setting == "off" else "1"
            outs = [(s, work / f"r{rnd}-{setting}-{k}.measured.json") for k, (_, _, s) in enumerate(plans)]
            tls = run_plans(outs, gpus=2, device="cuda", steps=a.steps, warmup=a.warmup, verify=a.verify,
                            messages=a.messages, sources=[label for label, _, _ in plans])
            for (label, _, schedule), tl in zip(plans, tls):
                steps = [float(x) for x in tl.meta.extra.get("step_ms", [])]
                n, longest = _beside(schedule, tl)
                rows[label][setting].append({"median_ms": statistics.median(steps), "beside": n,
                                             "longest_beside_ms": longest})
                print(f"round {rnd} gates {setting:3s} {label:60s} median {statistics.median(steps):8.2f} ms  "
                      f"beside {n:3d} (longest {longest:.2f} ms)", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "gate_sends.json").write_text(json.dumps(rows, indent=1))
    print("\n| candidate | predicted | gates off | gates on | on / off |\n|---|---:|---:|---:|---:|")
    for label, r in rows.items():
        off = statistics.median(x["median_ms"] for x in r["off"])
        on = statistics.median(x["median_ms"] for x in r["on"])
        print(f"| {label} | {r['predicted_ms']:.2f} | {off:.2f} | {on:.2f} | {on / off - 1:+.1%} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
