"""The data facts of pipeline training, derived from the ops alone (never from their order).

Work items are named by a *role* and a place: ``("F", d, s, mb)`` is the forward of micro-batch
``mb`` at stage ``s`` of direction ``d``; ``"G"`` is its input gradient (produced by B, I, or the B
half of FB); ``"W"`` its weight gradient (B, W, or the B half of FB).

Facts:

- F(d, s, mb) needs F(d, s-1, mb).
- G(d, s, mb) needs F(d, s, mb) and G(d, s+1, mb) (the last stage starts from the loss).
- W(d, s, mb) needs G(d, s, mb) when they are separate ops (I then W).
- Across ranks, data goes producer -> SEND -> RECV -> consumer; when the schedule has no
  SEND/RECV for a crossing (a compute-only schedule), the edge is direct.

Notes:
    O(n) in the number of ops, with dict lookups keyed by tuples.
"""
from __future__ import annotations

from typing import Iterable

from pptl.ir import Op

__all__ = ["roles", "training_deps", "comm_key"]

_Key = tuple[str, int, int, int]


def roles(op: Op) -> list[_Key]:
    """The work items an op produces, as (role, direction, stage, mb)."""
    k = op.kind
    if k == "F":
        return [("F", op.direction, op.stage, op.mb)]
    if k == "B":
        return [("G", op.direction, op.stage, op.mb), ("W", op.direction, op.stage, op.mb)]
    if k == "I":
        return [("G", op.direction, op.stage, op.mb)]
    if k == "W":
        return [("W", op.direction, op.stage, op.mb)]
    if k == "FB" and op.pair is not None:
        s, m, d = op.pair
        return [("F", op.direction, op.stage, op.mb), ("G", d, s, m), ("W", d, s, m)]
    return []


def comm_key(op: Op) -> tuple[str, str, int, int, int]:
    """(kind, flow, direction, stage, mb) of a SEND or RECV."""
    return (op.kind, op.flow, op.direction, op.stage, op.mb)


def training_deps(ops: list[Op], num_stages: int) -> list[tuple[int, int]]:
    """(producer, consumer) index pairs for every training fact among ``ops``.

    Args:
        ops: the schedule's ops (any order).
        num_stages: stages per direction; stage ``num_stages - 1`` is where the loss is.

    Returns:
        A list of edges, without duplicates. Missing producers add no edge: the checker
        reports missing work separately.
    """
    prod: dict[_Key, int] = {}
    comm: dict[tuple[str, str, int, int, int], int] = {}
    for i, op in enumerate(ops):
        if op.kind == "SEND" or op.kind == "RECV":
            comm.setdefault(comm_key(op), i)
        else:
            for key in roles(op):
                prod.setdefault(key, i)

    edges: set[tuple[int, int]] = set()
    add = edges.add

    def link(src: int, dst: int, flow: str, d: int, s_src: int, s_dst: int, mb: int) -> None:
        if ops[src].rank == ops[dst].rank:
            add((src, dst))
            return
        send = comm.get(("SEND", flow, d, s_src, mb))
        recv = comm.get(("RECV", flow, d, s_dst, mb))
        if send is None and recv is None:
            add((src, dst))  # compute-only schedule: communication is implicit
            return
        if send is not None:
            add((src, send))
        if recv is not None:
            add((recv, dst))
        if send is not None and recv is not None:
            add((send, recv))

    last = num_stages - 1
    for i, op in enumerate(ops):
        for role, d, s, mb, crossing in _needs(op):
            if s < 0 or s > last:
                continue
            src = prod.get((role, d, s, mb))
            if src is None or src == i:
                continue
            if not crossing:
                add((src, i))
            elif role == "F":
                link(src, i, "F", d, s, s + 1, mb)
            else:
                link(src, i, "B", d, s, s - 1, mb)
    # SEND/RECV whose partner is missing still hang off their producer/consumer.
    for key, i in comm.items():
        kind, flow, d, s, mb = key
        role = "F" if flow == "F" else "G"
        if kind == "SEND":
            src = prod.get((role, d, s, mb))
            if src is not None:
                add((src, i))
        else:
            src_stage = s - 1 if flow == "F" else s + 1
            send = comm.get(("SEND", flow, d, src_stage, mb))
            if send is not None:
                add((send, i))
    return [e for e in edges if e[0] != e[1]]


def _needs(op: Op) -> Iterable[tuple[str, int, int, int, bool]]:
    """Work items an op consumes: (role, direction, stage, mb, crosses a stage boundary)."""
    k = op.kind
    if k == "F":
        if op.stage > 0:
            yield ("F", op.direction, op.stage - 1, op.mb, True)
    elif k in ("B", "I"):
        yield from _grad_needs(op.direction, op.stage, op.mb)
    elif k == "W":
        yield ("G", op.direction, op.stage, op.mb, False)
    elif k == "FB" and op.pair is not None:
        if op.stage > 0:
            yield ("F", op.direction, op.stage - 1, op.mb, True)
        s, m, d = op.pair
        yield from _grad_needs(d, s, m)


def _grad_needs(d: int, s: int, mb: int) -> Iterable[tuple[str, int, int, int, bool]]:
    yield ("F", d, s, mb, False)
    yield ("G", d, s + 1, mb, True)
