"""A schedule's ops as timeline events, and the memory each op allocates and frees: what the
simulator, the plan file and the Chrome trace writer all read (a core module: it imports only
the schedule and the timeline types)."""
from __future__ import annotations

from itertools import repeat
from typing import Any, Iterable, Sequence

import numpy as np

from pptl.ir import Schedule
from pptl.timeline import Event

__all__ = ["op_events", "memory_events"]


def op_events(schedule: Schedule, start: Sequence[float], end: Sequence[float], *,
              with_waits: bool = True) -> list[Event]:
    """One :class:`Event` per op (indexed like ``schedule.ops``), naming the ops it waits on.
    Read from the table's columns: no ``Op`` is built."""
    t = schedule.table
    n = t.n
    ids = t.ids()
    none: tuple[str, ...] = ()
    waits: list[tuple[str, ...]] | Iterable[tuple[str, ...]] = repeat(none, n)
    if with_waits:
        du, dv = schedule.dep_arrays()
        if len(du):
            by = np.argsort(dv, kind="stable")  # each op's producers in fact order
            cut = np.searchsorted(dv[by], np.arange(n + 1)).tolist()
            producers = list(map(ids.__getitem__, du[by].tolist()))
            waits = [tuple(producers[a:b]) if a < b else none for a, b in zip(cut, cut[1:])]
    pairs: list[tuple[int, ...] | None] | Iterable[None] = repeat(None, n)
    if t.has_pair.any():
        pairs = [tuple(p) if h else None for p, h in zip(t.pair.tolist(), t.has_pair.tolist())]
    tl = np.ndarray.tolist
    return list(map(Event, ids, tl(t.rank), t.strings("lane"), start, end, t.strings("kind"), tl(t.stage), tl(t.mb),
                    tl(t.direction), tl(t.chunk), pairs, t.strings("label"), tl(t.sub), tl(t.peer), waits,
                    t.strings("flow"), tl(t.bucket), tl(t.half)))


def memory_events(op: Any, activation: float, w_activation: float) -> tuple[float, float]:
    """(allocated at start, freed at end) by one op, in activation units (a negative free is an
    allocation at the end: an ONLOAD's data is on the GPU once the copy ends)."""
    k = op.kind
    if k == "F":
        return activation, 0.0
    if k == "B":
        return 0.0, activation
    if k == "I":
        return 0.0, activation * (1.0 - w_activation)
    if k == "W":
        return 0.0, activation * w_activation
    if k == "FB":
        return activation, activation
    # Offloaded activations are off the GPU from the end of their OFFLOAD to the end of their
    # ONLOAD; for these two kinds ``payload`` is in the unit of ``activation``.
    if k == "OFFLOAD":
        return 0.0, op.payload
    if k == "ONLOAD":
        return 0.0, -op.payload
    return 0.0, 0.0
