"""The simulator: start and end of every op from the cost model, and the metrics of the plan.

Each op starts when its lane predecessor and every op it needs have ended (the longest path over
the DAG); lanes are serial, lanes of one rank run concurrently. Memory is counted per rank from
the timed events: F allocates at its start, B (or I and W, by the declared split) frees at its end.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pptl.config import Costs
from pptl.dag import Successors, kahn_order, successors
from pptl.errors import InputError, InvalidScheduleError
from pptl.events import memory_events, op_events
from pptl.ir import Schedule
from pptl.op import COMPUTE_KINDS
from pptl.optable import KIND_CODE, LANE_CODE, Columns, OpTable, first_of, group_ids
from pptl.schedules._moe_meta import MoEMeta
from pptl.timeline import RankStats, Timeline, TimelineMeta, bubble_fraction

__all__ = ["Simulation", "RankMetrics", "durations", "simulate", "memory_events", "memory_events_of", "MemoryEvents", "peak_memory",
           "held_spans", "op_events", "rounding_slack"]


@dataclass(frozen=True, slots=True)
class RankMetrics(RankStats):
    """A rank's compute-lane :class:`~pptl.timeline.RankStats` in the plan, with its peak memory."""

    peak_activation: float
    """Peak activation memory (units of ``Config.activation``)."""


@dataclass
class Simulation:
    schedule: Schedule
    start: list[float]
    end: list[float]
    makespan: float
    ranks: list[RankMetrics]
    critical_path: list[int]
    """Op indices on one longest path, first to last."""
    peak_time: dict[int, float] = field(default_factory=dict)
    """Per rank: when its peak activation is first reached."""

    def metrics(self) -> dict[str, Any]:
        """JSON-ready metrics (the contract of ``pptl plan --output json``)."""
        s = self.schedule
        return {
            "makespan": self.makespan,
            "ops": s.n_ops,
            "ranks": [
                {"rank": r.rank, "busy": r.busy, "idle": r.idle, "bubble_fraction": r.bubble_fraction,
                 "peak_activation": r.peak_activation}
                for r in self.ranks
            ],
            "bubble_fraction": bubble_fraction(self.ranks, self.makespan),
            "peak_activation": max((r.peak_activation for r in self.ranks), default=0.0),
            "critical_path": [s.table.op(i).id for i in self.critical_path],
        }

    def timeline(self, *, with_waits: bool = True) -> Timeline:
        """The planned timeline (one :class:`Event` per op)."""
        return Timeline(op_events(self.schedule, self.start, self.end, with_waits=with_waits), self.timeline_meta())

    def timeline_meta(self) -> TimelineMeta:
        s = self.schedule
        return TimelineMeta(source="planned", units="unit" if not s.meta.get("units") else s.meta["units"],
                            family=s.family, pp=s.pp,
                            vpp=s.chunks_per_rank,
                            microbatches=s.microbatches, title=s.meta.get("title", ""),
                            extra={"makespan": self.makespan})


_COPIES = frozenset(("OFFLOAD", "ONLOAD", "H2D", "COPY"))
"""Copy kinds: with no cost of their own they take ``payload / Costs.copy_bandwidth``."""


def durations(schedule: Schedule, costs: Costs) -> list[float]:
    """Duration of every op. Raises InvalidScheduleError for a cost key with no value."""
    return _durations(schedule.table, costs).tolist()  # type: ignore[no-any-return]


def _durations(t: OpTable, costs: Costs) -> Any:
    """:func:`durations` as a float64 array: the cost table is asked once per (cost key, stage)
    present, a SEND's time and a copy's once per payload (a SEND takes ``Costs.comm_time``, a
    RECV completes with its SEND, a copy with no cost of its own takes ``payload /
    copy_bandwidth``), and the answers are spread over the rows. ``Costs.rank_scale`` runs each
    rank's compute-lane ops at its own speed (side lanes keep theirs: an all-to-all or a copy is
    not the rank's compute)."""
    n = t.n
    kinds = t.kind_names
    send = t.where("kind", ("SEND",))
    comm = send | t.where("kind", ("RECV",))
    # cost key per row: the op's cost name, else its kind name; numbered over (kind, cost) codes
    nc = len(t.cost_names)
    combo = t.kind.astype(np.int64) * nc + t.cost
    key_names = [t.cost_names[c % nc] or kinds[c // nc] for c in range(len(kinds) * nc)]
    pair_code, size = group_ids(combo, t.stage)
    asked = np.flatnonzero(~comm)
    first = first_of(pair_code[asked], size, asked)  # a row of each (cost key, stage) a compute op has
    value = np.zeros(size)
    missing = np.zeros(size, dtype=bool)
    for p in np.flatnonzero(first >= 0).tolist():
        row = int(first[p])
        d = costs.lookup(key_names[int(combo[row])], int(t.stage[row]))
        if d is None:
            missing[p] = True
        else:
            value[p] = d
    out = value[pair_code] if n else np.zeros(0)
    out[comm] = 0.0  # a RECV completes with its SEND, which carries the transfer
    if send.any():
        out[send] = _per_payload(t.payload[send], costs.comm_time)
    if missing.any():
        miss = missing[pair_code] & ~comm
        copies = miss & t.where("kind", _COPIES) & (t.payload != 0)
        bad = np.flatnonzero(miss & ~copies)
        if bad.size:
            op = t.op(int(bad[0]))
            raise InvalidScheduleError(f"no cost for '{op.cost_key}' (op {op.id}); set it with --cost {op.cost_key}=VALUE")
        bw = costs.copy_bandwidth
        out[copies] = _per_payload(t.payload[copies], lambda b: b / bw)
    if costs.rank_scale:
        compute = np.flatnonzero(t.where("lane", ("compute",)))
        ranks = t.rank[compute]
        for r, f in costs.rank_scale.items():
            rows = compute[ranks == r]
            out[rows] *= f
    return out


def _per_payload(payload: Any, time_of: Any) -> Any:
    """``time_of(payload)`` per row, called once per distinct payload (as Python floats)."""
    found, inverse = np.unique(payload, return_inverse=True)
    return np.array([time_of(p) for p in found.tolist()], dtype=np.float64)[inverse.reshape(-1)]


def simulate(schedule: Schedule, costs: Costs | None = None, *, dag: Successors | None = None,
             order: list[int] | None = None, activation: float | None = None,
             w_activation: float | None = None) -> Simulation:
    """Time every op of ``schedule`` and compute its metrics.

    ``dag`` and ``order`` let a caller that has them (the checker) save their cost.

    Raises:
        InvalidScheduleError: the DAG has a cycle (run the checker for the cycle) or a cost is missing.

    Notes:
        O(ops + edges): one topological pass over the DAG (one per re-timing pass under contexts).
    """
    cfg = schedule.config
    if costs is None:
        costs = cfg.costs if cfg is not None else Costs()
    if activation is None:
        activation = cfg.activation if cfg is not None else 1.0
    if w_activation is None:
        w_activation = cfg.w_activation if cfg is not None else 0.0
    n = schedule.n_ops
    table = schedule.table
    dur_array = _durations(table, costs)
    dur = dur_array.tolist()
    succ = dag if dag is not None else successors(schedule)
    if order is None:
        order = kahn_order(succ)
    if order is None:
        raise InvalidScheduleError(_CYCLE)
    start, end = _push_longest(order, succ, dur)
    if costs.context or costs.beside:
        dur, start, end = _retime_in_context(schedule, costs, order, succ, dur, start, end)
        dur_array = np.asarray(dur, dtype=np.float64)
    times = (np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64))
    # max and argmax: the first op of the latest end
    makespan = float(times[1].max()) - float(times[0].min()) if n else 0.0
    last = int(times[1].argmax()) if n else -1
    if not makespan < float("inf"):  # also NaN; every renderer and writer needs finite times
        raise InputError(f"the timed schedule overflows a float (makespan {makespan}): a cost, comm.bytes or a "
                         "bandwidth is out of scale; costs up to 1e15 and bandwidths that keep bytes / bandwidth "
                         "finite work")
    path = _critical_path(succ, start, end, last)
    peaks, peak_at = _peak_memory(schedule, times[0], times[1], activation, w_activation)
    busy = _busy(schedule, table.columns, dur_array)
    ranks = [
        RankMetrics.of(r, b, makespan, peak_activation=peaks.get(r, 0.0))
        for r, b in sorted(busy.items())
    ]
    return Simulation(schedule, start, end, makespan, ranks, path, peak_at)


def _busy(schedule: Schedule, cols: Columns, dur: Any) -> dict[int, float]:
    """Compute-lane time per rank (every rank of the schedule, and any other an op names).
    ``bincount`` adds each rank's durations in op order (the floats of a loop)."""
    comp = cols.lane == LANE_CODE["compute"]
    ranks = cols.rank[comp]
    rank_ids, where = np.unique(np.concatenate([np.arange(schedule.pp, dtype=np.int64), ranks]), return_inverse=True)
    sums = np.bincount(where.reshape(-1)[schedule.pp:], weights=dur[comp], minlength=rank_ids.size)
    return dict(zip(rank_ids.tolist(), sums.tolist()))


_CYCLE = "the schedule deadlocks (its DAG has a cycle); run 'pptl check' to see the cycle"


def _push_longest(order: list[int], succ: Successors, dur: list[float]) -> tuple[list[float], list[float]]:
    """The longest path over the DAG, pushed along successors: each op, once its own end is known,
    raises the start of the ops after it. Returns (start, end)."""
    n = len(dur)
    start = [0.0] * n
    end = [0.0] * n
    bounds, targets = succ.bounds, succ.targets
    for u in order:
        e = start[u] + dur[u]
        end[u] = e
        for v in targets[bounds[u]:bounds[u + 1]]:
            if e > start[v]:
                start[v] = e
    return start, end


def _critical_path(succ: Successors, start: list[float], end: list[float], last: int) -> list[int]:
    """The longest path into ``last``: from each op to its first predecessor (in edge order) that
    ends when the op starts (none when it starts at 0). Only the ops on the path look their
    predecessors up."""
    if last < 0:
        return []
    n = len(start)
    by = np.argsort(succ.edge_v, kind="stable")  # each op's predecessors in edge order
    preds = succ.edge_u[by]
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(succ.edge_v, minlength=n), out=bounds[1:])
    path: list[int] = []
    v = last
    while v >= 0:
        path.append(v)
        t = start[v]
        nxt = -1
        if t > 0.0:
            for u in preds[bounds[v]:bounds[v + 1]].tolist():
                if end[u] == t:
                    nxt = u
                    break
        v = nxt
    path.reverse()
    return path


def _retime_in_context(schedule: Schedule, costs: Costs, order: list[int], succ: Successors, dur: list[float],
                       start: list[float], end: list[float]) -> tuple[list[float], list[float], list[float]]:
    """Context hook (:mod:`pptl.contexts`): ops whose cost key has durations per context (alone, or
    beside compute of a kind) progress at the rate of the context they are in along their timed
    span, and so do compute ops with a duration beside a side-lane op (``Costs.beside``);
    re-timed until the durations settle. Family-agnostic: read off the lanes of each rank.
    Returns (durations, start, end)."""
    from pptl.contexts import BESIDE_PASSES, CONTEXT_PASSES, Span, compute_context_durations, context_durations, is_side

    ops = schedule.ops
    keys = [op.cost_key for op in ops]
    base = dur
    beside: list[tuple[int, float]] = []
    issued: list[tuple[int, list[int]]] = []
    if costs.beside:
        for i, op in enumerate(ops):
            if op.lane == "compute":
                b = costs.beside.get(op.stage, {}).get(op.cost_key)
                if b is not None:
                    beside.append((i, b))
            elif is_side(op.lane, op.kind):
                preds = succ.edge_u[succ.edge_v == i].tolist()
                issued.append((i, [u for u in preds if ops[u].rank == op.rank]))
    memo: list[float | None] = [None] * len(ops)
    swing = [0.0] * len(ops) if beside else []
    for _ in range(BESIDE_PASSES if beside else CONTEXT_PASSES):
        spans = [Span(op.rank, op.lane, op.kind, start[i], end[i]) for i, op in enumerate(ops)]
        new = context_durations(spans, keys, base, costs.context, memo) if costs.context else list(base)
        if beside:
            # both from the previous pass's spans: a compute op's rate depends on the side-lane
            # ops beside it and theirs on the compute beside them. A side-lane op holds its GPU
            # from when its own rank's inputs are ready: a collective's kernel, issued then, waits
            # there for its peers (the plan starts it when all are ready), as measured.
            held = list(spans)
            for i, us in issued:
                a = max((end[u] for u in us), default=start[i])
                held[i] = Span(ops[i].rank, ops[i].lane, ops[i].kind, min(a, start[i]), end[i])
            paced = compute_context_durations(held, base, beside, memo, swing)
            for i, _ in beside:
                new[i] = paced[i]
        if new == dur:
            break
        dur = new
        start, end = _push_longest(order, succ, dur)
    return dur, start, end


@dataclass(frozen=True)
class MemoryEvents:
    """Every memory event of a timed schedule, one row each, sorted by rank, then time, frees
    before allocations at one time (an op that ends as the next begins has freed), then delta and
    op: allocations at an op's start, frees at its end (:func:`pptl.events.memory_events`), and
    the spans a family declares (``meta['held']``)."""

    rank: Any
    time: Any
    delta: Any
    op: Any
    """The op whose edge the event is at."""
    first: Any
    """Per row, where its rank first shows up (op index, or after every op for a held span): the
    order ranks are reported in."""


def memory_events_of(schedule: Schedule, start: Any, end: Any, activation: float, w_activation: float,
                     skip: frozenset[str] = frozenset()) -> MemoryEvents:
    """:class:`MemoryEvents` of ``schedule`` timed by ``start``/``end``; ops of the kinds in
    ``skip`` are left out (e.g. the copies, for the peak without offloading). Notes: O(n log n)."""
    table = schedule.table
    n = table.n
    k = table.columns.kind
    alloc = np.zeros(n)
    free = np.zeros(n)
    code = KIND_CODE
    alloc[(k == code["F"]) | (k == code["FB"])] = activation
    free[(k == code["B"]) | (k == code["FB"])] = activation
    free[k == code["I"]] = activation * (1.0 - w_activation)
    free[k == code["W"]] = activation * w_activation
    # Of the family kinds, only the copies of activations count (memory_events).
    offload = table.where("kind", ("OFFLOAD",))
    free[offload] = table.payload[offload]
    onload = table.where("kind", ("ONLOAD",))
    free[onload] = -table.payload[onload]
    skipped = table.where("kind", skip)
    dropped = skipped.copy()
    if MoEMeta.of(schedule).held_saved is True:
        # The held spans carry the saved activations layer by layer: the training-role markers
        # hold nothing, or the activations would count twice.
        dropped |= table.where("kind", COMPUTE_KINDS)
    alloc[dropped] = 0.0
    free[dropped] = 0.0
    start, end = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
    a, f = np.flatnonzero(alloc), np.flatnonzero(free)
    held = [h for h in held_spans(schedule) if not (skipped[h[0]] or skipped[h[2]])]
    ha = np.array([h[0] for h in held], dtype=np.int64)
    hb = np.array([h[2] for h in held], dtype=np.int64)
    amount = np.array([h[4] for h in held], dtype=np.float64)
    at_a = np.where(np.array([h[1] for h in held], dtype=bool), end[ha], start[ha]) if held else np.zeros(0)
    at_b = np.where(np.array([h[3] for h in held], dtype=bool), end[hb], start[hb]) if held else np.zeros(0)
    later = n + np.arange(len(held), dtype=np.int64)
    op = np.concatenate([a, f, ha, hb])
    rank = np.concatenate([table.rank[a], table.rank[f], table.rank[ha], table.rank[ha]])
    time = np.concatenate([start[a], end[f], at_a, at_b])
    flag = np.concatenate([np.ones(a.size, np.int8), np.zeros(f.size, np.int8), np.ones(ha.size, np.int8),
                           np.zeros(hb.size, np.int8)])
    delta = np.concatenate([alloc[a], -free[f], amount, -amount])
    first = np.concatenate([a, f, later, later])
    # A free at an op's end that also is its start (a zero-time op) has not happened before the
    # allocations at that time: with every cost 0 all of a rank's events share t = 0, and frees
    # first would count no activation at all (GPipe holds all m). Those ties follow the graph:
    # a topological order, each op's start before its end.
    zero = (flag == 0) & (time == np.concatenate([start[a], start[f], at_a, at_a]))
    if zero.any():
        topo = _topo_position(schedule)
        seq = np.where(zero | (flag == 1), 2 * topo[op] + (flag == 0), -1)
        o = np.lexsort((op, delta, seq, time, rank))
    else:
        o = np.lexsort((op, delta, flag, time, rank))
    return MemoryEvents(rank[o], time[o], delta[o], op[o], first[o])


def rounding_slack(delta: Any, share: float) -> float:
    """How far a running sum of the memory events ``delta`` may be off by rounding: ``share`` of
    the largest event. Relative, not absolute: activations given in a large unit (1e-13 of it per
    micro-batch) are memory like any other, where an absolute 1e-12 would read them as rounding
    (peak 0, any limit met)."""
    return share * float(np.abs(delta).max()) if delta.size else 0.0


def _topo_position(schedule: Schedule) -> Any:
    """Each op's position in a topological order of its dependencies (lane order included); the
    op index where the graph has a cycle (a broken plan, reported by its own rule)."""
    n = schedule.table.n
    order = kahn_order(successors(schedule))
    pos = np.arange(n, dtype=np.int64)
    if order is not None and len(order) == n:
        pos[np.asarray(order, dtype=np.int64)] = np.arange(n, dtype=np.int64)
    return pos


def held_spans(schedule: Schedule) -> list[tuple[int, int, int, int, float]]:
    """``meta['held']``: ``[op a, 0 start | 1 end, op b, 0 | 1, amount]`` — ``amount`` activation
    units held on op a's rank from that edge of a to that edge of b. Plan files are input from
    elsewhere: a malformed entry is an error naming it."""
    held = MoEMeta.of(schedule).held
    if not held:
        return []
    n = len(schedule.ops)
    out: list[tuple[int, int, int, int, float]] = []
    for k, (a, ea, b, eb, amount) in enumerate(held):
        if not (a < n and b < n and schedule.ops[a].rank == schedule.ops[b].rank):
            raise InputError(f"field 'meta.held[{k}]': got {[a, ea, b, eb, amount]}, expected [op index, 0|1, op "
                             "index on the same rank, 0|1, amount >= 0]")
        out.append((a, ea, b, eb, float(amount)))
    return out


def peak_memory(schedule: Schedule, start: list[float], end: list[float], activation: float,
                w_activation: float, skip: frozenset[str] = frozenset()
                ) -> tuple[dict[int, float], dict[int, float]]:
    """Peak activation per rank and when it is first reached.

    Counts the training kinds and activation offloading (OFFLOAD frees its payload at its end,
    ONLOAD brings it back at its end; see :func:`memory_events`).
    """
    return _peak_memory(schedule, start, end, activation, w_activation, skip)


def _peak_memory(schedule: Schedule, start: Any, end: Any, activation: float, w_activation: float,
                 skip: frozenset[str] = frozenset()) -> tuple[dict[int, float], dict[int, float]]:
    """:func:`peak_memory`: each rank's running sum added in event order (``cumsum`` is
    sequential), and a new peak only where the sum rises above the last one by more than
    :func:`rounding_slack` (a 1e-12 share of the rank's largest event)."""
    ev = memory_events_of(schedule, start, end, activation, w_activation, skip)
    t, delta, rank = ev.time, ev.delta, ev.rank
    bounds = np.flatnonzero(np.diff(rank)) + 1
    starts = [0, *bounds.tolist()]
    stops = [*bounds.tolist(), int(rank.size)]
    found: list[tuple[int, int, float, float]] = []
    for lo, hi in zip(starts, stops):
        if lo == hi:
            continue
        cur = np.cumsum(delta[lo:hi])
        high = np.maximum(np.maximum.accumulate(cur), 0.0)
        new = np.flatnonzero(cur > np.concatenate(([0.0], high[:-1])))
        best = at = 0.0
        slack = rounding_slack(delta[lo:hi], 1e-12)
        for j in new.tolist():
            c = float(cur[j])
            if c > best + slack:
                best, at = c, float(t[lo + j])
        found.append((int(ev.first[lo:hi].min()), int(rank[lo]), best, at))
    found.sort()  # ranks in the order they first show up
    return {r: p for _, r, p, _ in found}, {r: w for _, r, _, w in found}
