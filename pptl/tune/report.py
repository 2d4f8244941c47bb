"""The ranked table (text) and the JSON of a tune result; no printing here."""
from __future__ import annotations

from typing import Any

from pptl.formats._quote import counted
from pptl.tune.rank import Result, TuneResult

__all__ = ["table_rows", "to_dict", "summary_lines"]

COLUMNS = ("#", "candidate", "step", "spread p05-p95", "per mb", "bubble", "peak memory per rank", "verdict")


def _num(x: float) -> str:
    return f"{x:.4g}"


def table_rows(res: TuneResult, top: int) -> list[tuple[str, ...]]:
    rows = []
    shown = res.results[:top]
    for k, r in enumerate(shown, 1):
        if r.step is None:
            why = f"skipped: {r.skipped}" if r.skipped is not None else f"rejected: {r.rejected}"
            rows.append((str(k), r.label, "-", "-", "-", "-", "-", why))
            continue
        verdict = "fits" if r.fits else f"over: {r.rejected}"
        spread = "-" if r.spread is None else f"{_num(r.spread.p05)}-{_num(r.spread.p95)}"
        rows.append((str(k), r.label, _num(r.step), spread, _num(r.step / r.structure.microbatches),
                     f"{100 * r.bubble:.1f}%",
                     " ".join(_num(p) for p in r.peak), verdict))
    return rows


def summary_lines(res: TuneResult, units: str) -> list[str]:
    n_fit = sum(r.fits for r in res.results)
    n_over = sum(r.step is not None and not r.fits for r in res.results)
    n_skip = sum(r.step is None and r.skipped is not None for r in res.results)
    n_rej = sum(r.step is None and r.skipped is None for r in res.results)
    out = [f"{counted(len(res.results), 'candidate')}: {n_fit} fit, {n_over} over the memory limit, {n_rej} rejected"
           + (f", {n_skip} skipped" if n_skip else "") + f" (times in {units})"]
    b = res.best
    if b is not None:
        spread = "" if b.spread is None else f" (p05 {_num(b.spread.p05)}, p95 {_num(b.spread.p95)})"
        out.append(f"best: {b.label}: step {_num(b.step)}{spread}, bubble {100 * b.bubble:.1f}%, "
                   f"peak {_num(b.max_peak)}; stage layers {list(b.split.layers)}; "
                   f"Megatron --pipeline-model-parallel-layout \"{b.layout}\"")
    if any(r.step is not None for r in res.results) and all(r.spread is None for r in res.results):
        out.append("note: no spread: the per-op variation is unknown; --costs-from a run measures it (or give "
                   "device.jitter, e.g. {F: 0.02, B: 0.02, step: 0.01})")
    out += [f"note: {n}" for n in res.notes]
    return out


def _result(r: Result) -> dict[str, Any]:
    return r.to_dict()


def to_dict(res: TuneResult, units: str) -> dict[str, Any]:
    best = res.best
    return {"units": units, "memory_limit": res.limit, "best": None if best is None else best.to_dict(),
            "candidates": [_result(r) for r in res.results], "notes": list(res.notes)}
