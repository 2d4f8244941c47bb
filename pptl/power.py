"""What a measured run's clock record (``meta.extra.gpu``, written by :mod:`pptl.run.gpuclock`) says
about its GPUs' power limit: whether the duty law (busy GPUs clock lower under a power cap) was in play, and
how far below its top clock each GPU ran.

Both readers of a calibrating run ask it: ``pptl tune --costs-from`` and ``pptl whatif --from``."""
from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

__all__ = ["CLOCK_DUTY_EXPONENT", "FREE_CLOCK_SHARE", "clock_exponent", "rank_clocks", "rank_order", "unthrottled"]

#: Share of a rank's samples a power or thermal limit held its clock, under which the rank ran free.
FREE_CLOCK_SHARE = 0.2
#: The clock law under a power cap: a GPU busy a share u of the time clocks as u ** -CLOCK_DUTY_EXPONENT, up to
#: its top clock. Measured apart from any schedule (bench/gpu_duty.py, 2 H200s at their 700 W cap, bursts of
#: bf16 GEMMs at a chosen share): 1500 MHz at full duty, 1650-1665 at 0.83 (exponent 0.53), 1935-1950 at 0.63
#: (0.55), the top 1980 at 0.49 (docs/benchmarks.md "The duty law on its own").
CLOCK_DUTY_EXPONENT = 0.55


def rank_order(key: Any) -> tuple[int, int, str]:
    """Sort key of a rank in the clock record (JSON keys are strings): rank numbers in number order, 2
    before 10; a key that is no ASCII number after them, by its text."""
    text = str(key)
    if text.isascii() and text.isdecimal():
        return (0, int(text), "")
    return (1, 0, text)


def _mhz(value: Any) -> float | None:
    """A clock from the record (hostile input): a number of MHz, positive and under 1e5; else None."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e5:
        return float(value)
    return None


def clock_exponent(gpu: Any, duty: Mapping[int, float]) -> tuple[float, float] | None:
    """(largest over smallest busy share of the ranks with a clock, a): how the ranks' median SM clocks went
    with how busy each was, clock ~ duty ** -a by least squares in logs. None where fewer than two ranks have
    both a clock (MHz, positive) and a busy share (0..1], or all are equally busy. ``gpu``: a measured
    timeline's ``meta.extra.gpu``, read as hostile (bounded, every value checked)."""
    if not isinstance(gpu, dict) or len(gpu) > 4096:
        return None
    pts = []
    for r, g in gpu.items():
        if not (isinstance(r, str) and r.isascii() and r.isdecimal() and len(r) <= 6 and isinstance(g, dict)):
            continue
        mhz, u = _mhz(g.get("sm_mhz")), duty.get(int(r))
        if mhz is not None and isinstance(u, (int, float)) and 0 < u <= 1:
            pts.append((math.log(u), math.log(mhz), u))
    if len(pts) < 2:
        return None
    mx, my = sum(p[0] for p in pts) / len(pts), sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    if sxx <= 0:
        return None
    a = -sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx
    return max(p[2] for p in pts) / min(p[2] for p in pts), a


def rank_clocks(gpu: Any, ranks: Iterable[int]) -> dict[int, tuple[float, float]] | None:
    """Per rank of ``ranks``: (its median SM clock, its GPU's top SM clock) in MHz, the first at most the
    second. None unless the record has both for every one of ``ranks`` (positive numbers under 1e5).
    ``gpu``: a measured timeline's ``meta.extra.gpu``, read as hostile (bounded, every value checked)."""
    if not isinstance(gpu, dict) or len(gpu) > 4096:
        return None
    out: dict[int, tuple[float, float]] = {}
    for r in ranks:
        g = gpu.get(str(r))
        if not isinstance(g, dict):
            return None
        mhz, top = _mhz(g.get("sm_mhz")), _mhz(g.get("max_sm_mhz"))
        if mhz is None or top is None:
            return None
        out[r] = (min(mhz, top), top)
    return out or None


def unthrottled(gpu: Any, ranks: int) -> str | None:
    """How the run's ranks ran when none had its clock held by a power or thermal limit in
    :data:`FREE_CLOCK_SHARE` of its samples or more (one phrase per rank); None when a rank was held,
    or the record is absent, covers another number of ranks, or does not say."""
    if not isinstance(gpu, dict) or len(gpu) != ranks:
        return None
    parts = []
    for r in sorted(gpu, key=rank_order):
        g = gpu[r]
        share = g.get("slowed") if isinstance(g, dict) else None
        if not isinstance(share, (int, float)) or isinstance(share, bool) or not 0 <= share < FREE_CLOCK_SHARE:
            return None
        mhz = g.get("sm_mhz")
        at = f" at {mhz:.0f} MHz" if isinstance(mhz, (int, float)) and not isinstance(mhz, bool) else ""
        parts.append(f"rank {r}{at}, held in {100 * share:.0f}% of samples")
    return "; ".join(parts)
