"""Metrics of ``moe-1f1b-overlap`` plans (``Family.extra_metrics``), usable on measured timelines too.

- **Exposed time** of a class of ops (EP all-to-alls; offload/onload copies) on a rank: the time
  one of them runs while the rank's compute lane is idle, i.e. the length of (union of their
  intervals) minus (its overlap with the union of compute intervals). This is what a profiler
  calls exposed communication, so planned and measured runs compare directly. An all-to-all's
  copy on each member counts from the last member's start (:func:`exposure`): the plan models
  no wait for a late member, so a measured copy's wait for its peer would be counted as
  communication on one side only (the same rule ``--costs-from`` times collectives by).
- **Peak activation with and without offloading**: the simulator's memory model (F allocates at
  start, I/W free at end, Offload frees its bytes at its end, Onload brings them back at its end)
  counted once with and once without the copies.

Notes:
    O(ops log ops): intervals sorted per rank.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from pptl.intervals import overlap_length, union
from pptl.ir import Schedule
from pptl.schedules._moe_meta import MoEMeta
from pptl.simulate import peak_memory

__all__ = ["EP_KINDS", "COPY_KINDS", "exposed_time", "exposed_in_timeline", "exposure", "exposure_of_timeline",
           "peak_without", "moe_metrics"]

EP_KINDS = frozenset({"A2A_DISPATCH", "A2A_COMBINE"})
COPY_KINDS = frozenset({"OFFLOAD", "ONLOAD"})

_Interval = tuple[int, str, str, float, float]  # rank, lane, kind, start, end


def exposed_time(intervals: Iterable[_Interval], kinds: frozenset[str], *,
                 compute_lane: str = "compute") -> tuple[dict[int, float], dict[int, float]]:
    """Per rank: (time ops of ``kinds`` run, the part of it with the compute lane idle)."""
    busy: dict[int, list[tuple[float, float]]] = {}
    comp: dict[int, list[tuple[float, float]]] = {}
    for rank, lane, kind, a, b in intervals:
        if kind in kinds:
            busy.setdefault(rank, []).append((a, b))
        elif lane == compute_lane:
            comp.setdefault(rank, []).append((a, b))
    total: dict[int, float] = {}
    exposed: dict[int, float] = {}
    for rank, spans in busy.items():
        u = union(spans)
        t = sum(b - a for a, b in u)
        total[rank] = t
        exposed[rank] = max(0.0, t - overlap_length(u, union(comp.get(rank, []))))
    return total, exposed


def exposed_in_timeline(timeline: Any, kinds: frozenset[str]) -> tuple[dict[int, float], dict[int, float]]:
    """:func:`exposed_time` over a :class:`pptl.timeline.Timeline` (planned or measured)."""
    return exposed_time(((e.rank, e.lane, e.kind, e.start, e.end) for e in timeline.events), kinds)


def exposure(schedule: Schedule, start: Sequence[float], end: Sequence[float]) -> dict[str, Any]:
    """EP and copy time per rank and their exposed part, the worst rank's too: the one definition
    a plan (simulated times) and a run (measured times, op by op) are both measured by.

    ``start``/``end`` are per op of ``schedule`` (NaN: not run). Each all-to-all copy starts at
    the latest start among the copies of that all-to-all on the members of its EP group."""
    ops = schedule.ops
    group_of = MoEMeta.of(schedule).group_of()
    latest: dict[tuple[Any, ...], float] = {}
    for i, op in enumerate(ops):
        if op.kind in EP_KINDS and start[i] == start[i]:
            k = _a2a_key(op, group_of)
            latest[k] = max(latest.get(k, start[i]), start[i])
    ivs = []
    for i, op in enumerate(ops):
        a, b = start[i], end[i]
        if a != a or b != b:
            continue
        if op.kind in EP_KINDS:
            a = min(b, latest[_a2a_key(op, group_of)])
        ivs.append((op.rank, op.lane, op.kind, a, b))
    ranks = range(schedule.pp)
    ep_total, ep_exposed = exposed_time(ivs, EP_KINDS)
    cp_total, cp_exposed = exposed_time(ivs, COPY_KINDS)
    def per(d: dict[int, float]) -> list[float]:
        return [round(d.get(r, 0.0), 9) for r in ranks]

    return {"ep_time": max(ep_total.values(), default=0.0), "exposed_ep": max(ep_exposed.values(), default=0.0),
            "copy_time": max(cp_total.values(), default=0.0),
            "exposed_copy": max(cp_exposed.values(), default=0.0),
            "per_rank": {"ep_time": per(ep_total), "exposed_ep": per(ep_exposed), "copy_time": per(cp_total),
                         "exposed_copy": per(cp_exposed)}}


def exposure_of_timeline(schedule: Schedule, timeline: Any) -> dict[str, Any]:
    """:func:`exposure` of a timeline (planned or measured) of ``schedule``'s ops, matched by op id."""
    index = {op.id: i for i, op in enumerate(schedule.ops)}
    nan = float("nan")
    start, end = [nan] * len(schedule.ops), [nan] * len(schedule.ops)
    for e in timeline.events:
        i = index.get(e.op)
        if i is not None:
            start[i], end[i] = e.start, e.end
    return exposure(schedule, start, end)


def _a2a_key(op: Any, group_of: dict[int, int]) -> tuple[Any, ...]:
    return (group_of.get(op.rank, op.rank), op.kind, op.flow, op.stage, op.mb, op.sub, op.chunk)


def peak_without(schedule: Schedule, start: list[float], end: list[float], skip: frozenset[str]) -> dict[int, float]:
    """Peak activation per rank under the simulator's memory model, ignoring ops of kinds ``skip``."""
    cfg = schedule.config
    act = cfg.activation if cfg is not None else 1.0
    wact = cfg.w_activation if cfg is not None else 0.0
    return peak_memory(schedule, start, end, act, wact, skip)[0]


def moe_metrics(schedule: Schedule, sim: Any) -> dict[str, Any]:
    """``metrics['moe']``: exposed EP and copy time, peak activation with and without offloading,
    per rank and their maximum; plus ``report`` lines for ``pptl plan``."""
    ranks = range(schedule.pp)
    exp = exposure(schedule, sim.start, sim.end)
    with_off = peak_without(schedule, sim.start, sim.end, frozenset())
    without = peak_without(schedule, sim.start, sim.end, COPY_KINDS)
    moved = {r: 0.0 for r in ranks}
    for op in schedule.ops:
        if op.kind == "OFFLOAD":
            moved[op.rank] += op.payload
    per = lambda d: [round(d.get(r, 0.0), 9) for r in ranks]  # noqa: E731
    out = {
        **{k: v for k, v in exp.items() if k != "per_rank"},
        "peak_activation": max(with_off.values(), default=0.0),
        "peak_activation_no_offload": max(without.values(), default=0.0),
        "offloaded": max(moved.values(), default=0.0),
        "per_rank": {**exp["per_rank"], "peak_activation": per(with_off),
                     "peak_activation_no_offload": per(without), "offloaded": per(moved)},
    }
    report = [f"EP all-to-all: {out['ep_time']:g} per rank, {out['exposed_ep']:g} exposed (compute idle) "
              f"on the worst rank"]
    if out["copy_time"] > 0:
        report.append(f"offload/onload: {out['copy_time']:g} per rank, {out['exposed_copy']:g} exposed; "
                      f"peak activation {out['peak_activation']:g} with offloading, "
                      f"{out['peak_activation_no_offload']:g} without")
    return {"moe": out, "report": report}
