"""The simulator: start and end of every op from the cost model, and the metrics of the plan.

Each op starts when its lane predecessor and every op it needs have ended (the longest path over
the DAG); lanes are serial, lanes of one rank run concurrently. Memory is counted per rank from
the timed events: F allocates at its start, B (or I and W, by the declared split) frees at its end.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from pptl.config import Costs
from pptl.dag import build_dag
from pptl.errors import InputError, InvalidScheduleError
from pptl.ir import Op, Schedule
from pptl.timeline import Event, Timeline, TimelineMeta

__all__ = ["Simulation", "RankMetrics", "durations", "simulate", "memory_events", "memory_timeline", "peak_memory"]


@dataclass(frozen=True, slots=True)
class RankMetrics:
    rank: int
    busy: float
    """Time the compute lane is busy."""
    idle: float
    """Makespan minus busy: the bubble."""
    bubble_fraction: float
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

    def metrics(self) -> dict:
        """JSON-ready metrics (the contract of ``pptl plan --output json``)."""
        ops = self.schedule.ops
        return {
            "makespan": self.makespan,
            "ops": len(ops),
            "ranks": [
                {"rank": r.rank, "busy": r.busy, "idle": r.idle, "bubble_fraction": r.bubble_fraction,
                 "peak_activation": r.peak_activation}
                for r in self.ranks
            ],
            "bubble_fraction": (sum(r.idle for r in self.ranks) / (self.makespan * len(self.ranks))
                                if self.ranks and self.makespan > 0 else 0.0),
            "peak_activation": max((r.peak_activation for r in self.ranks), default=0.0),
            "critical_path": [ops[i].id for i in self.critical_path],
        }

    def timeline(self, *, with_waits: bool = True) -> Timeline:
        """The planned timeline (one :class:`Event` per op)."""
        s = self.schedule
        waits: dict[int, list[int]] = {}
        if with_waits:
            for u, v in s.deps:
                waits.setdefault(v, []).append(u)
        ids = [op.id for op in s.ops]
        events = [
            Event(op=ids[i], rank=op.rank, lane=op.lane, start=self.start[i], end=self.end[i], kind=op.kind,
                  stage=op.stage, mb=op.mb, direction=op.direction, chunk=op.chunk, pair=op.pair,
                  label=op.label, sub=op.sub, peer=op.peer,
                  waits_on=tuple(ids[u] for u in waits.get(i, ())), flow=op.flow)
            for i, op in enumerate(s.ops)
        ]
        cfg = s.config
        meta = TimelineMeta(source="planned", units="unit" if not s.meta.get("units") else s.meta["units"],
                            family=s.family, pp=s.pp,
                            # chunks per rank as built (zbv and dualpipev: 2, whatever the config's vpp)
                            vpp=max(getattr(cfg, "vpp", 1) if cfg else 1, s.num_stages // max(1, s.pp)),
                            microbatches=s.microbatches, title=s.meta.get("title", ""),
                            extra={"makespan": self.makespan})
        return Timeline(events, meta)


def durations(schedule: Schedule, costs: Costs) -> list[float]:
    """Duration of every op. Raises InvalidScheduleError for a cost key with no value."""
    out: list[float] = []
    cache: dict[tuple[str, int], float] = {}
    for op in schedule.ops:
        if op.kind == "SEND":
            out.append(costs.comm_time(op.payload))
            continue
        if op.kind == "RECV":
            out.append(0.0)  # the transfer is on the SEND; a RECV completes with it
            continue
        key = (op.cost_key, op.stage)
        d = cache.get(key)
        if d is None:
            d = costs.lookup(op.cost_key, op.stage)
            if d is None and op.payload and op.kind in ("OFFLOAD", "ONLOAD", "H2D", "COPY"):
                d = op.payload / costs.copy_bandwidth
            if d is None:
                raise InvalidScheduleError(f"no cost for '{op.cost_key}' (op {op.id}); set it with --cost {op.cost_key}=VALUE")
            cache[key] = d
        out.append(d)
    return out


def simulate(schedule: Schedule, costs: Costs | None = None, *, dag: nx.DiGraph | None = None,
             order: list[int] | None = None, activation: float | None = None,
             w_activation: float | None = None) -> Simulation:
    """Time every op of ``schedule`` and compute its metrics.

    Raises:
        InvalidScheduleError: the DAG has a cycle (run the checker for the cycle) or a cost is missing.

    Notes:
        O(ops + edges): one topological pass over the DAG.
    """
    cfg = schedule.config
    if costs is None:
        costs = cfg.costs if cfg is not None else Costs()
    if activation is None:
        activation = cfg.activation if cfg is not None else 1.0
    if w_activation is None:
        w_activation = cfg.w_activation if cfg is not None else 0.0
    g = dag if dag is not None else build_dag(schedule)
    dur = durations(schedule, costs)
    n = len(schedule.ops)
    start = [0.0] * n
    end = [0.0] * n
    via = [-1] * n
    pred = g.pred
    try:
        if order is None:
            order = list(nx.topological_sort(g))
    except nx.NetworkXUnfeasible:
        raise InvalidScheduleError("the schedule deadlocks (its DAG has a cycle); run 'pptl check' to see the cycle") from None
    for v in order:
        t = 0.0
        best = -1
        for u in pred[v]:
            e = end[u]
            if e > t:
                t, best = e, u
        start[v] = t
        end[v] = t + dur[v]
        via[v] = best
    makespan = max(end, default=0.0) - min(start, default=0.0)
    if not makespan < float("inf"):  # also NaN; every renderer and writer needs finite times
        raise InputError(f"the timed schedule overflows a float (makespan {makespan}): a cost, comm.bytes or a "
                         "bandwidth is out of scale; costs up to 1e15 and bandwidths that keep bytes / bandwidth "
                         "finite work")
    path: list[int] = []
    if n:
        v = max(range(n), key=end.__getitem__)
        while v >= 0:
            path.append(v)
            v = via[v]
        path.reverse()
    peaks, peak_at = peak_memory(schedule, start, end, activation, w_activation)
    busy: dict[int, float] = {r: 0.0 for r in range(schedule.pp)}
    for i, op in enumerate(schedule.ops):
        if op.lane == "compute":
            busy[op.rank] = busy.get(op.rank, 0.0) + dur[i]
    ranks = [
        RankMetrics(r, b, makespan - b, (makespan - b) / makespan if makespan > 0 else 0.0, peaks.get(r, 0.0))
        for r, b in sorted(busy.items())
    ]
    return Simulation(schedule, start, end, makespan, ranks, path, peak_at)


def memory_events(op: Op, activation: float, w_activation: float) -> tuple[float, float]:
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


def memory_timeline(schedule: Schedule, start: list[float], end: list[float], activation: float,
                    w_activation: float, skip: frozenset[str] = frozenset()
                    ) -> dict[int, list[tuple[float, int, float, int]]]:
    """Per rank, the memory events (time, 0 free / 1 allocate, delta, op index), sorted.

    At equal times frees come before allocations (an op that ends as the next begins has freed).
    Ops of the kinds in ``skip`` are left out (e.g. the copies, for the peak without offloading).
    """
    per_rank: dict[int, list[tuple[float, int, float, int]]] = {}
    for i, op in enumerate(schedule.ops):
        if op.kind in skip:
            continue
        alloc, free = memory_events(op, activation, w_activation)
        if alloc:
            per_rank.setdefault(op.rank, []).append((start[i], 1, alloc, i))
        if free:
            per_rank.setdefault(op.rank, []).append((end[i], 0, -free, i))
    for evs in per_rank.values():
        evs.sort()
    return per_rank


def peak_memory(schedule: Schedule, start: list[float], end: list[float], activation: float,
                w_activation: float, skip: frozenset[str] = frozenset()
                ) -> tuple[dict[int, float], dict[int, float]]:
    """Peak activation per rank and when it is first reached.

    Counts the training kinds and activation offloading (OFFLOAD frees its payload at its end,
    ONLOAD brings it back at its end; see :func:`memory_events`).
    """
    peaks: dict[int, float] = {}
    when: dict[int, float] = {}
    for r, evs in memory_timeline(schedule, start, end, activation, w_activation, skip).items():
        cur = best = 0.0
        at = 0.0
        for t, _, delta, _ in evs:
            cur += delta
            if cur > best + 1e-12:
                best, at = cur, t
        peaks[r] = best
        when[r] = at
    return peaks, when
