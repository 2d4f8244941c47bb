"""The lane order a run executed, where it differs from the plan's.

``pptl run``'s default message mode on CUDA, ``sync-send`` (:mod:`pptl.run.executor`), runs each
SEND on its rank's compute stream right after the op that produced its data, and the next compute
op waits for it: the compute lane pays every send. The plan keeps SENDs on a lane of their own,
so a plan simulated as written misses that time (about 0.07 ms a send on H100/H200, 1-2% of a
1F1B step). Sampling a measured run's plan with the SENDs moved onto the compute lane, as they
ran, keeps the simulator's graph and costs and only changes the lane order it walks.
"""
from __future__ import annotations

from pptl.ir import Schedule

__all__ = ["sends_on_compute"]


def sends_on_compute(schedule: Schedule, beside: frozenset[int] | None = None) -> Schedule:
    """A copy of ``schedule`` whose SENDs run on their rank's compute lane, each right after the
    last compute op of its rank it depends on (in plan order among SENDs after the same op).
    A SEND with no such producer keeps its own lane, and so does one ``sync-send`` runs beside
    compute (:func:`pptl.run.program.held_sends`: holding compute there could deadlock the run);
    ``beside``, those SENDs where the caller has them (:func:`pptl.run.program.beside_compute`).

    Notes:
        O(ops + deps), and O(ops x ranks) to tell the SENDs sync-send holds.
    """
    from pptl.run.program import beside_compute

    ops = schedule.ops
    if beside is None:
        beside = beside_compute(schedule)
    producer: dict[int, list[int]] = {}
    for u, v in schedule.deps:
        if ops[v].kind == "SEND" and ops[u].rank == ops[v].rank and ops[u].lane == "compute" and v not in beside:
            producer.setdefault(v, []).append(u)
    if not producer:
        return schedule
    lanes = {k: list(v) for k, v in schedule.lanes.items()}
    pos = {i: k for key, order in schedule.lanes.items() if key[1] == "compute" for k, i in enumerate(order)}
    moved: dict[int, list[int]] = {}  # compute op -> SENDs issued right after it
    for key, order in schedule.lanes.items():
        if key[1] == "compute":
            continue
        for i in order:
            if i in producer:
                last = max(producer[i], key=lambda u: pos.get(u, -1))
                moved.setdefault(last, []).append(i)
        lanes[key] = [i for i in order if i not in producer]
    for r in sorted({ops[i].rank for i in producer}):
        key = (r, "compute")
        out: list[int] = []
        for i in schedule.lanes.get(key, []):
            out.append(i)
            out.extend(moved.get(i, ()))
        lanes[key] = out
    return schedule.copy_with(lanes={k: v for k, v in lanes.items() if v})
