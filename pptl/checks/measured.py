"""What a measured timeline must obey whatever the schedule: data cannot arrive before it was sent.

Two rules, over the events of one measured timeline (``pptl run``, profiler traces):

- **PP090** ``recv-before-send``: a RECV ends before its SEND started. The receiver cannot hold
  data the sender had not begun to send, so the two ranks' times are not on one clock (or an event
  was stamped at the wrong point).
- **PP091** ``consumer-before-producer``: an op starts before the data it consumes had arrived:
  before the end of the RECV it waits on, or before the end of the op that produced that data
  (on its own rank, or on the sending rank, through the SEND/RECV pair).

Both allow a stated tolerance: the clocks' uncertainty the run wrote (``meta.extra["clock"]
["tolerance_ms"]``, see :mod:`pptl.run.timebase`), or :data:`DEFAULT_TOLERANCE_MS` for a timeline
that states none. A violation is a **measurement error**, not a schedule error and not transfer
time: ``pptl check`` reports it with these codes, and ``pptl compare`` and ``pptl explain`` put one
line in front of their numbers.

A RECV's SEND is the SEND its ``waits_on`` names, else the one with the same message key
(:func:`pptl.messages.message_key`) from the RECV's peer to its rank, k-th RECV to k-th SEND in
time order. Notes: O(events + dependency edges).
"""
from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from pptl.checks.base import Violation
from pptl.messages import message_key
from pptl.op import COMPUTE_KINDS
from pptl.timeline import Event, Timeline, unit_scale

__all__ = ["DEFAULT_TOLERANCE_MS", "RECV_BEFORE_SEND", "CONSUMER_BEFORE_PRODUCER", "tolerance",
           "measured_violations", "measurement_line"]

RECV_BEFORE_SEND = "PP090"
CONSUMER_BEFORE_PRODUCER = "PP091"
#: Tolerance of a measured timeline that states none (ms).
DEFAULT_TOLERANCE_MS = 0.01
#: Kinds whose end is when their data exists (producers), and kinds that consume data.
_PRODUCERS = COMPUTE_KINDS
_CONSUMERS = COMPUTE_KINDS | {"SEND"}


def tolerance(tl: Timeline) -> float:
    """The tolerance of ``tl`` in its own unit: the one its clock states, else the default."""
    clock = tl.meta.extra.get("clock") if isinstance(tl.meta.extra, dict) else None
    ms = DEFAULT_TOLERANCE_MS
    if isinstance(clock, dict) and isinstance(clock.get("tolerance_ms"), (int, float)):
        ms = max(0.0, float(clock["tolerance_ms"]))
    return ms * (unit_scale("ms", tl.meta.units) or 1.0)


def _sends_of(events: Sequence[Event], by_id: dict[str, int]) -> dict[int, int]:
    """RECV event index -> its SEND event index."""
    out: dict[int, int] = {}
    queues: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        if e.kind == "SEND":
            queues[(message_key(e), e.rank, e.peer)].append(i)
    for q in queues.values():
        q.sort(key=lambda i: events[i].start)
    taken = {by_id[w] for e in events if e.kind == "RECV" for w in e.waits_on
             if w in by_id and events[by_id[w]].kind == "SEND"}
    recvs = sorted((i for i, e in enumerate(events) if e.kind == "RECV"), key=lambda i: events[i].start)
    nth: dict[tuple[object, ...], int] = defaultdict(int)
    for i in recvs:
        e = events[i]
        named = [by_id[w] for w in e.waits_on if w in by_id and events[by_id[w]].kind == "SEND"]
        if named:
            out[i] = named[0]
            continue
        key = (message_key(e), e.peer, e.rank)
        q = [j for j in queues.get(key, ()) if j not in taken]
        k = nth[key]
        if k < len(q):
            out[i] = q[k]
            nth[key] += 1
    return out


def measured_violations(tl: Timeline, tol: float | None = None) -> list[Violation]:
    """PP090 and PP091 over ``tl`` (empty for a planned timeline: the simulator is exact)."""
    if tl.meta.source != "measured":
        return []
    tol = tolerance(tl) if tol is None else tol
    u = tl.meta.units
    events = tl.events
    by_id = {e.op: i for i, e in enumerate(events)}
    send_of = _sends_of(events, by_id)
    out: list[Violation] = []
    for r, s in sorted(send_of.items(), key=lambda rs: events[rs[0]].start):
        recv, send = events[r], events[s]
        if recv.end < send.start - tol:
            out.append(Violation(RECV_BEFORE_SEND, f"measurement error: {recv.op} ends at {recv.end:.6g} {u}, "
                                 f"{send.start - recv.end:.6g} {u} before its SEND {send.op} starts "
                                 f"({send.start:.6g} {u}; tolerance {tol:.3g} {u}): the ranks' times are not on "
                                 "one clock", (recv.op, send.op)))
    for v, e in enumerate(events):
        if e.kind not in _CONSUMERS:
            continue
        for w in e.waits_on:
            u_i = by_id.get(w)
            if u_i is None:
                continue
            p = events[u_i]
            producers = [u_i] if p.kind in _PRODUCERS or p.kind == "RECV" else []
            if p.kind == "RECV" and u_i in send_of:  # through the message, to what the sender sent
                producers += [by_id[x] for x in events[send_of[u_i]].waits_on
                              if x in by_id and events[by_id[x]].kind in _PRODUCERS]
            for q in producers:
                src = events[q]
                if e.start < src.end - tol:
                    how = "received" if src.kind == "RECV" else "produced"
                    out.append(Violation(CONSUMER_BEFORE_PRODUCER,
                                         f"measurement error: {e.op} starts at {e.start:.6g} {u}, {src.end - e.start:.6g} "
                                         f"{u} before its input was {how} by {src.op} (ends {src.end:.6g} {u}; "
                                         f"tolerance {tol:.3g} {u})", (e.op, src.op)))
    return out


def measurement_line(violations: Sequence[Violation]) -> str | None:
    """One line for ``compare`` and ``explain``: how many, and the worst (None when there are none)."""
    if not violations:
        return None
    codes = sorted({v.code for v in violations})
    return (f"measurement error ({', '.join(codes)}): {len(violations)} event pair"
            f"{'s' if len(violations) != 1 else ''} out of causal order across ranks, e.g. {violations[0].message.removeprefix('measurement error: ')}; "
            "waits across those ranks are not transfer time (run 'pptl check' on the timeline for the list)")
