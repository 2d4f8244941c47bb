"""Issue orders: the order in which each rank's host issues its ops, defined once.

A plan fixes the order of ops on each lane, not across the lanes of a rank; a runtime that enqueues
one rank's ops from one host thread needs one order of all of them. pptl's is
:func:`issue_key`: ops by planned start, ties broken by one topological order of the whole plan.
That is a linear extension of the plan's DAG on every rank at once, so a SEND is issued after the
op that produces its data and a RECV before the op that needs it, on every rank.

- ``pptl run`` (:mod:`pptl.run.program`) issues each rank's ops in that order; its SENDs and RECVs
  run on per-peer channels, so a RECV keeps its own place.
- The checker's P2P models and ``pptl export --to torch-csv --comms`` (:func:`program`) use the
  same order with each RECV moved to its SEND's place, so that every pair of ranks sees its
  transfers in one global order (NCCL matches them in order, without tags).
- A torch ``compute_comms`` CSV gives its own issue order (:func:`given_program`).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from pptl.dag import Successors, kahn_order, successors
from pptl.errors import InputError, InvalidScheduleError
from pptl.ir import Schedule
from pptl.messages import message_key
from pptl.schedules._pipeline_meta import PipelineMeta

__all__ = ["issue_key", "program", "given_program", "given_sequences"]


def issue_key(schedule: Schedule, *, dag: Successors | None = None, order: list[int] | None = None,
              start: list[float] | None = None, untimed: bool = False) -> list[tuple[float, int]]:
    """(planned start, topological position) per op: sorting a rank's ops by it gives the order its
    host issues them (a linear extension of the plan's DAG; keys are unique).

    Args:
        dag, order, start: the plan's DAG, topological order and simulated starts when the caller
            has them (the checker does); derived otherwise.
        untimed: when the plan cannot be simulated (a cost is missing), order by topological
            position alone (still a linear extension) instead of raising.

    Raises:
        InvalidScheduleError: the plan deadlocks, or (unless ``untimed``) lacks a cost.

    Notes:
        O(ops + deps) plus one simulation.
    """
    if dag is None:
        dag = successors(schedule)
    if order is None:
        order = kahn_order(dag)
        if order is None:
            raise InvalidScheduleError("the schedule deadlocks (its DAG has a cycle); run 'pptl check' "
                                       "to see the cycle")
    n = len(schedule.ops)
    if start is None:
        from pptl.simulate import simulate

        try:
            start = simulate(schedule, dag=dag, order=order).start
        except (InvalidScheduleError, InputError):  # a missing cost; times past a float
            if not untimed:
                raise
            start = [0.0] * n
    topo = [0] * n
    for k, v in enumerate(order):
        topo[v] = k
    return list(zip(start, topo))


def given_program(schedule: Schedule) -> dict[int, list[int]] | None:
    """Each rank's issue order from ``meta["program_order"]``, or None when the schedule has none
    or its lanes no longer fit it (a copy whose lanes were reordered)."""
    found = given_sequences(schedule)
    if found is None:
        return None
    seqs, lengths = found
    cut = np.cumsum(lengths)[:-1].tolist() if lengths else []
    return {rank: part.tolist() for rank, part in enumerate(np.split(seqs, cut))}


def given_sequences(schedule: Schedule) -> tuple[Any, list[int]] | None:
    """:func:`given_program` as arrays: every rank's issue order one after the other (int64), and
    each rank's length; None when it gives None."""
    letters = PipelineMeta.of(schedule).program_order
    if letters is None or len(letters) != schedule.pp:
        return None
    parts = []
    for rank, text in enumerate(letters):
        orders = [schedule.lanes.get((rank, lane), []) for lane in ("compute", "send", "recv")]
        # Each letter takes the next op of its lane: every lane used up exactly, no other letter.
        if [text.count(ch) for ch in "csr"] != [len(o) for o in orders] or len(text) != sum(map(len, orders)):
            return None
        code = np.frombuffer(text.encode("ascii", "replace"), dtype=np.uint8)
        seq = np.empty(code.size, dtype=np.int64)
        for ch, order in zip(b"csr", orders):
            seq[code == ch] = order
        parts.append(seq)
    lengths = [int(p.size) for p in parts]
    if sum(lengths) != schedule.n_ops:
        return None
    return (np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)), lengths


def program(schedule: Schedule, *, dag: Successors | None = None, order: list[int] | None = None,
            start: list[float] | None = None) -> dict[int, list[int]]:
    """Each rank's P2P issue order: the given one (:func:`given_program`), else derived.

    Derived: the :func:`issue_key` order with each RECV moved to the position of its SEND. Every
    pair of ranks then sees its transfers in one global order, a SEND follows the op that produces
    its data, and a RECV precedes the op that needs it, so the result passes all three P2P models
    of :mod:`pptl.checks.p2p`.

    Raises:
        InvalidScheduleError: the schedule deadlocks or lacks a cost (from the simulator).
    """
    given = given_program(schedule)
    if given is not None:
        return given
    key = issue_key(schedule, dag=dag, order=order, start=start)
    sends: dict[tuple[str, int, int, int], int] = {}
    for i, op in enumerate(schedule.ops):
        if op.kind == "SEND":
            sends.setdefault(message_key(op), i)
    for j, op in enumerate(schedule.ops):
        if op.kind == "RECV":
            s = sends.get(message_key(op))
            if s is not None:
                key[j] = key[s]  # keys are unique (topological position), so no ties remain
    out: dict[int, list[int]] = {}
    for i, op in enumerate(schedule.ops):
        out.setdefault(op.rank, []).append(i)
    for r in out:
        out[r].sort(key=key.__getitem__)
    return out
