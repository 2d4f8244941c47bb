"""What the non-training families change in a run's program (pure).

:mod:`pptl.run.families` picks the executor per family and explains why these refinements exist;
they live here, apart from that dispatcher, because the executors themselves use them (a module
that both dispatches to the executors and serves them would import them and be imported back).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Mapping

from pptl.ir import Schedule

if TYPE_CHECKING:
    from pptl.run.program import Program

__all__ = ["refine", "symmetric_issue", "remote_hop_waits", "cost_means"]


def refine(program: Program, *, issue: Mapping[int, tuple[int, ...]] | None = None,
           waits: Mapping[int, Mapping[int, Iterable[int]]] | None = None) -> Program:
    """``program`` with some ranks' issue orders replaced and extra waits added (rank -> op -> producers)."""
    ranks = []
    for rp in program.ranks:
        merged = {v: tuple(us) for v, us in rp.waits.items()}
        for v, us in (waits or {}).get(rp.rank, {}).items():
            merged[v] = tuple(sorted(set(merged.get(v, ())) | set(us)))
        waited = frozenset(u for us in merged.values() for u in us)
        order = (issue or {}).get(rp.rank, rp.issue)
        if sorted(order) != sorted(rp.issue):
            raise ValueError(f"rank {rp.rank}: a refined issue order must hold the same ops")
        ranks.append(replace(rp, issue=tuple(order), waits=merged, waited=waited))
    return replace(program, ranks=tuple(ranks))


def _twin_key(op: Any) -> tuple:
    return (op.kind, op.lane, op.stage, op.mb, op.sub, op.flow, op.chunk, op.bucket, op.half)


def symmetric_issue(program: Program, groups: list[list[int]]) -> dict[int, tuple[int, ...]]:
    """Issue orders where every member of each group follows its first member, op for op.

    Returns {} (keep the program's orders) when some member's ops are not twins of the first's.
    """
    ops = program.schedule.ops
    out: dict[int, tuple[int, ...]] = {}
    for group in groups:
        lead = group[0]
        for rank in group[1:]:
            twins = {_twin_key(ops[i]): i for i in program.ranks[rank].issue}
            lead_issue = program.ranks[lead].issue
            if len(twins) != len(lead_issue) or any(_twin_key(ops[i]) not in twins for i in lead_issue):
                return {}
            out[rank] = tuple(twins[_twin_key(ops[i])] for i in lead_issue)
    return out


def remote_hop_waits(schedule: Schedule) -> dict[int, dict[int, tuple[int, ...]]]:
    """rank -> op -> producers on the op's own rank that reach it through one op of another rank."""
    ops = schedule.ops
    preds: dict[int, list[int]] = {}
    for u, v in schedule.deps:
        preds.setdefault(v, []).append(u)
    out: dict[int, dict[int, set[int]]] = {}
    for v, us in preds.items():
        r = ops[v].rank
        for u in us:
            if ops[u].rank == r:
                continue
            for w in preds.get(u, ()):
                if ops[w].rank == r:
                    out.setdefault(r, {}).setdefault(v, set()).add(w)
    return {r: {v: tuple(sorted(ws)) for v, ws in m.items()} for r, m in out.items()}


def cost_means(schedule: Schedule, events: Iterable[Any],
               together: Callable[[Any], Hashable | None] | None = None, *, contexts: bool = False
               ) -> dict[str, Any]:
    """Measured mean duration per cost key ({"base": {key: ms}, "stages": {stage: {key: ms}}}).

    Messages (SEND/RECV) are left out: ``pptl plan --costs-from`` takes their latency from the
    send-to-receive gaps. ``together`` names the collective an op belongs to (None: not one): a
    collective's copies on the ranks that join it count from the last one to arrive, since the
    plan starts each copy when its own inputs are ready and models no wait for the others.
    ``contexts``: also ``"context"``, the side-lane means per context (:mod:`pptl.contexts`).
    """
    events = list(events)
    by_id = {op.id: op for op in schedule.ops}
    rows = [(by_id[e.op], e) for e in events if e.op in by_id and by_id[e.op].kind not in ("SEND", "RECV")]
    last_start: dict[Hashable, float] = {}
    if together is not None:
        for op, e in rows:
            key = together(op)
            if key is not None:
                last_start[key] = max(last_start.get(key, e.start), e.start)
    base: dict[str, list[float]] = {}
    stages: dict[int, dict[str, list[float]]] = {}
    for op, e in rows:
        key = together(op) if together is not None else None
        duration = e.end - max(e.start, last_start[key]) if key is not None else e.duration
        duration = max(duration, 0.0)
        base.setdefault(op.cost_key, []).append(duration)
        if op.stage >= 0:
            stages.setdefault(op.stage, {}).setdefault(op.cost_key, []).append(duration)
    mean = lambda v: sum(v) / len(v)  # noqa: E731
    out: dict[str, Any] = {"base": {k: mean(v) for k, v in sorted(base.items())},
                           "stages": {str(s): {k: mean(v) for k, v in sorted(d.items())}
                                      for s, d in sorted(stages.items())}}
    if contexts:
        # Side-lane ops per context (alone / beside compute of a kind), timed as above: a
        # collective's copy from its last participant's start.
        from pptl.contexts import Span, measure_contexts

        evs = [(by_id[e.op], e) for e in events if e.op in by_id]
        spans, keys, durs = [], [], []
        for op, e in evs:
            key = together(op) if together is not None else None
            a = max(e.start, last_start[key]) if key is not None else e.start
            spans.append(Span(op.rank, op.lane, op.kind, min(a, e.end), e.end))
            side = op.lane != "compute" and op.kind not in ("SEND", "RECV") and op.lane != "pass"
            keys.append(op.cost_key if side else None)
            durs.append(max(0.0, e.end - a))
        out["context"] = measure_contexts(spans, keys, durs)
        out["compute_context"] = _compute_contexts(evs)
    return out


def _compute_contexts(evs: list[tuple[Any, Any]]) -> dict[str, Any]:
    """Compute ops' alone and beside-a-side-lane-op durations per stage and cost key
    (:func:`pptl.contexts.measure_compute_contexts`), on the side-lane ops' own spans: a
    collective's copy kernel holds SMs from its own start, waiting for its peers included."""
    from pptl.contexts import Span, measure_compute_contexts

    spans = [Span(op.rank, op.lane, op.kind, e.start, e.end) for op, e in evs]
    keys = [op.cost_key if op.lane == "compute" else None for op, _ in evs]
    found = measure_compute_contexts(spans, keys, [op.stage for op, _ in evs])
    return {"alone": {str(s): v for s, v in found.alone.items()},
            "beside": {str(s): v for s, v in found.beside.items()}}
