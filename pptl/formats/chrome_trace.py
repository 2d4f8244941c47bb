"""Chrome trace (Trace Event Format) for Perfetto and chrome://tracing, planned or measured.

Layout: one process per rank (``pid`` = rank, named ``rank N``, sorted by rank), one thread per
lane (``tid`` = the lane's place in the rank's drawing order: compute first, named after the
lane). Every op is a complete event (``ph: X``) in microseconds; every SEND -> RECV pair is one
flow arrow (``ph: s`` / ``ph: f``); each rank has a counter track ``activation`` (``ph: C``) with
its activation memory (F allocates at start, B frees at end, I and W by ``w_activation``).

Units: measured timelines in ``us``/``ms``/``s`` convert exactly; planned timelines in cost-model
units are drawn with 1 unit = 1 ms (``otherData.us_per_unit`` records the scale).
"""
from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from pptl.events import memory_events
from pptl.fileio import atomic_write, check_writable, is_gz
from pptl.timeline import Event, Timeline

__all__ = ["US_PER_UNIT", "to_chrome", "dumps_chrome", "write_chrome"]

#: Microseconds per timeline unit ("unit" is a planned timeline's cost-model unit).
US_PER_UNIT = {"us": 1.0, "ms": 1000.0, "s": 1e6, "unit": 1000.0}


def to_chrome(timeline: Timeline, *, activation: float = 1.0, w_activation: float = 0.0,
              payloads: Mapping[str, float] | None = None) -> dict[str, Any]:
    """The trace as a JSON-ready dict (``traceEvents`` plus ``otherData``).

    ``payloads`` (op id -> payload) gives OFFLOAD/ONLOAD their activation units for the memory
    counter; events carry no payload, so without it they move no memory.

    Notes:
        O(events log events): events are sorted once per rank for the memory counter.
    """
    scale = US_PER_UNIT.get(timeline.meta.units, 1000.0)
    t0 = timeline.start

    def us(t: float) -> float:
        return round((t - t0) * scale, 3)

    lanes = timeline.lanes()
    tid: dict[tuple[int, str], int] = {}
    out: list[dict[str, Any]] = []
    for rank in timeline.ranks():
        out.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0, "args": {"name": f"rank {rank}"}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
    for rank, lane in lanes:
        k = sum(1 for key in tid if key[0] == rank)
        tid[rank, lane] = k
        out.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": k, "args": {"name": lane}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": rank, "tid": k, "args": {"sort_index": k}})
    for e in timeline.events:
        out.append({"ph": "X", "name": _label(e), "cat": e.kind, "pid": e.rank, "tid": tid[e.rank, e.lane],
                    "ts": us(e.start), "dur": round((e.end - e.start) * scale, 3), "args": _args(e)})
    out.extend(_flows(timeline, tid, us))
    out.extend(_memory(timeline, us, activation, w_activation, payloads or {}))
    m = timeline.meta
    other = {"source": m.source, "units": m.units, "us_per_unit": scale, "family": m.family, "pp": m.pp,
             "vpp": m.vpp, "microbatches": m.microbatches, "title": m.title, "clock": m.clock,
             "generator": "pptl"}
    return {"traceEvents": out, "displayTimeUnit": "ms", "otherData": other}


def dumps_chrome(timeline: Timeline, **kw: Any) -> str:
    return json.dumps(to_chrome(timeline, **kw), separators=(",", ":"), allow_nan=False)


def write_chrome(timeline: Timeline, path: str | Path, **kw: Any) -> Path:
    """Write the trace; gzip it when ``path`` ends in ``.gz`` (Perfetto opens both)."""
    p = check_writable(path)
    text = dumps_chrome(timeline, **kw).encode("utf-8")
    if is_gz(p):
        text = gzip.compress(text, mtime=0)
    return atomic_write(p, text)


def _label(e: Event) -> str:
    # The op id without its "r0/compute/" prefix: the track already says rank and lane.
    parts = e.op.split("/", 2)
    return parts[2] if len(parts) == 3 else e.op


def _args(e: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"op": e.op}
    for name, default in (("stage", -1), ("mb", -1), ("chunk", -1), ("direction", 0), ("peer", -1), ("sub", -1),
                          ("bucket", -1), ("half", -1)):
        v = getattr(e, name)
        if v != default:
            out[name] = v
    if e.label:
        out["label"] = e.label
    if e.pair is not None:
        out["pair"] = list(e.pair)
    if e.waits_on:
        out["waits_on"] = list(e.waits_on)
    return out


def _flow_of(e: Event) -> str:
    """F or B for a SEND/RECV event: its ``flow`` where a reader set it, else from its op id
    (``r0/send/SEND_F s0 mb1 ->r1``); "" when neither tells."""
    if e.flow in ("F", "B"):
        return e.flow
    head = e.op.split("/", 2)[-1].split(" ", 1)[0]
    return head.rsplit("_", 1)[-1] if "_" in head else ""


def _flows(timeline: Timeline, tid: dict[tuple[int, str], int], us) -> list[dict[str, Any]]:
    recvs: dict[tuple, Event] = {}
    for e in timeline.events:
        if e.kind == "RECV":
            flow = _flow_of(e)
            # A receive of no known pass came from the stage before (a forward's data) or after (a gradient):
            # its SEND names which.
            sources = (e.stage - 1,) if flow == "F" else (e.stage + 1,) if flow == "B" else (e.stage - 1, e.stage + 1)
            for src_stage in sources:
                recvs.setdefault((e.peer, e.rank, flow, e.direction, src_stage, e.mb), e)
    out: list[dict[str, Any]] = []
    n = 0
    for e in timeline.events:
        if e.kind != "SEND":
            continue
        r = recvs.get((e.rank, e.peer, _flow_of(e), e.direction, e.stage, e.mb))
        if r is None:
            continue
        n += 1
        name = f"{_flow_of(e) or 'P2P'} s{e.stage} mb{e.mb}"
        out.append({"ph": "s", "id": n, "name": name, "cat": "p2p", "pid": e.rank, "tid": tid[e.rank, e.lane],
                    "ts": us(e.start)})
        out.append({"ph": "f", "id": n, "name": name, "cat": "p2p", "pid": r.rank, "tid": tid[r.rank, r.lane],
                    "ts": us(r.start)})  # binds to the next slice: the RECV itself
    return out


class _Moved(NamedTuple):
    """What :func:`pptl.events.memory_events` reads of an op: its kind and payload."""

    kind: str
    payload: float


def _memory(timeline: Timeline, us, activation: float, w_activation: float,
            payloads: Mapping[str, float]) -> list[dict[str, Any]]:
    per_rank: dict[int, list[tuple[float, int, float]]] = {}
    for e in timeline.events:
        alloc, free = memory_events(_Moved(e.kind, payloads.get(e.op, 0.0)), activation, w_activation)
        if alloc:
            per_rank.setdefault(e.rank, []).append((e.start, 1, alloc))
        if free:
            per_rank.setdefault(e.rank, []).append((e.end, 0, -free))
    out: list[dict[str, Any]] = []
    for rank in sorted(per_rank):
        cur = 0.0
        out.append({"ph": "C", "name": "activation", "pid": rank, "ts": us(timeline.start), "args": {"activation": 0}})
        for t, _, delta in sorted(per_rank[rank]):
            cur += delta
            out.append({"ph": "C", "name": "activation", "pid": rank, "ts": us(t),
                        "args": {"activation": round(cur, 6)}})
    return out
