"""A schedule's ops as timeline events, and the memory each op allocates and frees: what the
simulator, the plan file and the Chrome trace writer all read (a core module: it imports only
the schedule and the timeline types)."""
from __future__ import annotations

from typing import Any, Sequence

from pptl.ir import Schedule
from pptl.timeline import Event

__all__ = ["op_events", "memory_events"]


def op_events(schedule: Schedule, start: Sequence[float], end: Sequence[float], *,
              with_waits: bool = True) -> list[Event]:
    """One :class:`Event` per op (indexed like ``schedule.ops``), naming the ops it waits on."""
    waits: dict[int, list[int]] = {}
    if with_waits:
        for u, v in schedule.deps:
            waits.setdefault(v, []).append(u)
    ids = [op.id for op in schedule.ops]
    none: tuple[str, ...] = ()
    return [
        Event(op=ids[i], rank=op.rank, lane=op.lane, start=start[i], end=end[i], kind=op.kind,
              stage=op.stage, mb=op.mb, direction=op.direction, chunk=op.chunk, pair=op.pair,
              label=op.label, sub=op.sub, peer=op.peer,
              waits_on=tuple(ids[u] for u in waits[i]) if i in waits else none, flow=op.flow, bucket=op.bucket,
              half=op.half)
        for i, op in enumerate(schedule.ops)
    ]


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
