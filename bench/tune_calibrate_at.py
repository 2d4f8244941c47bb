"""Which split should the calibrating run use? Re-ranks the stored cross-validation shapes that were
calibrated at the even split, once as stored and once as if calibrated from the 1F1B candidate at the
balanced split that ran in their candidates' launch, and prints the checks of both.

    python3 bench/tune_calibrate_at.py [DIR]     (default tests/data/tune_crossval)

The balanced run stands in for a calibrating run: its compute ops give the stages' F and B and the
ranks' duty, its B the I:W share the stored run measured inside its own B; the memory model stays
fitted to the stored run (its peaks are of the even split). It ran in the candidates' launch, which the
stored run did not: its op times are scaled by the stored run's launch-to-launch move (the calibrating
plan measured again in that launch), so it carries no launch the candidates share. Only shapes whose
1F1B balanced candidate kept its ops take part. An emulation of a run, not a run: the shapes calibrated
on `pptl tune --calibration-plan`'s plan (BALANCED_SHAPES) are the measurement.
"""
from __future__ import annotations

import json
import math
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import tune_crossval as tcv  # noqa: E402


def _balanced_row(saved: dict[str, Any]) -> dict[str, Any] | None:
    return next((x for x in saved["rows"] if x["family"] == "1f1b" and "balanced" in x["label"] and x.get("ops")),
                None)


def _as_calibrated_from(row: dict[str, Any], saved: dict[str, Any]) -> ExitStack:
    """Calibration's inputs taken from ``row`` (see the module's note), for as long as the stack lives."""
    import pptl.planning as planning
    import pptl.tune.calibrate as cal
    from pptl.tune.split import even_split

    move = saved["base_ms"] / saved["again_ms"]
    ops = [o for o in row["ops"] if o[1] in ("F", "B")]
    span = max(o[5] for o in row["ops"]) - min(o[4] for o in row["ops"])
    means: dict[int, dict[str, list[float]]] = {}
    for rank, kind, stage, _, start, end in ops:
        means.setdefault(stage, {}).setdefault(kind, []).append(move * (end - start))
    stages = {s: {k: sum(v) / len(v) for k, v in d.items()} for s, d in means.items()}
    duty = {r: sum(o[5] - o[4] for o in ops if o[0] == r) / span for r in (0, 1)}
    even = even_split(saved["shape"]["layers"], 2)
    costs, parts, rank_duty, fit_memory = (planning.costs_from_timeline, cal.b_parts, cal.rank_duty,
                                           cal._fit_memory)

    def costs_from(tl: Any) -> dict[str, Any]:
        return {**costs(tl), "stages": {s: dict(v) for s, v in stages.items()}}

    def b_parts(tl: Any) -> dict[int, dict[str, float]] | None:
        got = parts(tl)
        if got is None:
            return None
        return {s: {"I": stages[s]["B"] * p["I"] / (p["I"] + p["W"]),
                    "W": stages[s]["B"] * p["W"] / (p["I"] + p["W"])} for s, p in got.items()}

    stack = ExitStack()
    stack.enter_context(mock.patch.object(planning, "costs_from_timeline", costs_from))
    stack.enter_context(mock.patch.object(cal, "b_parts", b_parts))
    stack.enter_context(mock.patch.object(cal, "rank_duty", lambda tl: (duty, rank_duty(tl)[1])))
    stack.enter_context(mock.patch.object(cal, "_run_split", lambda tl, tc, n: tuple(row["stage_layers"])))
    stack.enter_context(mock.patch.object(cal, "_fit_memory", lambda tc, meta, split, memory:
                                          fit_memory(tc, meta, even, memory)))
    return stack


def _line(name: str, ev: dict[str, Any]) -> tuple[str, list[float]]:
    c = ev["checks"]
    errs = [(x["predicted_ms"] - x["measured_ms"]) / x["measured_ms"] for x in ev["rows"]]
    worst = max(c["family_err"].items(), key=lambda kv: abs(kv[1]))
    return (f"{name:24s} pick {'ok' if c['pick_ok'] else 'no'}  Spearman {c['spearman']:.2f}  families "
            f"{'ok' if c['families_ok'] else 'no'} (worst {worst[0]} {100 * worst[1]:+.1f}%)"), errs


def main() -> int:
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "data" / "tune_crossval"
    totals: dict[str, dict[str, Any]] = {"even (as stored)": {}, "balanced (emulated)": {}}
    for p in sorted(folder.glob("*.json")):
        saved = json.loads(p.read_text())
        row = _balanced_row(saved)
        if row is None or saved.get("calibrate", "even") != "even":
            continue
        for how, acc in totals.items():
            if how.startswith("balanced"):
                with _as_calibrated_from(row, saved):
                    ev = tcv._evaluate(saved)
            else:
                ev = tcv._evaluate(saved)
            text, errs = _line(p.stem, ev)
            print(f"{how:20s} {text}")
            c = ev["checks"]
            for key, ok in (("pick", c["pick_ok"]), ("spearman", c["spearman"] >= 0.9), ("families", c["families_ok"])):
                acc[key] = acc.get(key, 0) + int(ok)
            acc["n"] = acc.get("n", 0) + 1
            acc.setdefault("errs", []).extend(errs)
    for how, acc in totals.items():
        errs = acc.pop("errs", [])
        rms = math.sqrt(sum(e * e for e in errs) / len(errs)) if errs else float("nan")
        print(f"{how}: {acc} over {len(errs)} candidates, RMS error {100 * rms:.2f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
