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
- A message of flow ``F`` goes from stage ``s`` to ``s + 1`` of its direction, one of flow ``B``
  from ``s`` to ``s - 1``; a SEND and the RECV of its data share
  :func:`pptl.messages.message_key`.

Notes:
    O(n) in the number of ops, with dict lookups keyed by tuples.

This module needs no other pptl module at run time but :mod:`pptl.messages`: :mod:`pptl.ir` imports it to derive the
facts of a re-ordered schedule (``Schedule.with_lanes``).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pptl.messages import message_key

if TYPE_CHECKING:  # only for annotations: ir imports this module to derive the facts of a new lane order
    from pptl.ir import Op

__all__ = ["roles", "training_deps", "training_deps_again", "training_deps_columns", "comm_key", "VECTOR_MIN_OPS"]

#: From this many ops on, the facts are derived with numpy key joins (:mod:`pptl._deps_np`);
#: below, the plain loop is faster than importing numpy.
VECTOR_MIN_OPS = 20_000

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
    """(kind, flow, direction, stage, mb) of a SEND or RECV: the op's own stage (the sender's for
    a SEND, the receiver's for a RECV). To pair a SEND with its RECV, use :func:`pptl.messages.message_key`."""
    return (op.kind, op.flow, op.direction, op.stage, op.mb)


def training_deps(ops: list[Op], num_stages: int) -> list[tuple[int, int]]:
    """(producer, consumer) index pairs for every training fact among ``ops``.

    Args:
        ops: the schedule's ops (any order).
        num_stages: stages per direction; stage ``num_stages - 1`` is where the loss is.

    Returns:
        A list of edges, without duplicates. Missing producers add no edge: the checker
        reports missing work separately.

    Notes:
        One pass to index producers and messages, one to link consumers; written out per kind
        (no generator per op) because ``pptl plan`` and ``pptl check`` both run it on 400k ops.
    """
    out: list[tuple[int, int]] | None = None
    if len(ops) >= VECTOR_MIN_OPS:
        from pptl._deps_np import deps_of_ops

        out = deps_of_ops(ops, num_stages)
    if out is None:
        out = _training_deps_loop(ops, num_stages)
    global _last
    _last = (ops, len(ops), num_stages, out)
    return out


# The last derivation: (ops list, its length, num_stages, result). Ops lists are not edited in
# place (a new order or op set is a new Schedule), so the same list of the same length has the
# same facts; `pptl plan -o` derives them when building and would again when writing.
_last: tuple[list[Op], int, int, list[tuple[int, int]]] | None = None


def training_deps_again(ops: list[Op], num_stages: int) -> list[tuple[int, int]]:
    """:func:`training_deps`, reusing the previous result when it was derived from this very list."""
    last = _last
    if last is not None and last[0] is ops and last[1] == len(ops) and last[2] == num_stages:
        return last[3]
    return training_deps(ops, num_stages)


def training_deps_columns(kind: list[str], rank: list[int], stage: list[int], mb: list[int], direction: list[int],
                          flow: list[str], pair: list[tuple[int, int, int] | None],
                          num_stages: int, *, ops: list[Op] | None = None) -> list[tuple[int, int]] | None:
    """:func:`training_deps` of ops given as columns (a plan file's, or the ones a family builds),
    or None when the vector path does not apply (few ops, or indices too wide to pack); the
    caller then derives them from the ops.

    ``ops``: the op list the columns describe, when there is one; :func:`training_deps_again`
    then reuses the result for it.
    """
    if len(kind) < VECTOR_MIN_OPS:
        return None
    from pptl._deps_np import deps_of_columns

    out = deps_of_columns(kind, rank, stage, mb, direction, flow, pair, num_stages)
    if ops is not None and out is not None:
        global _last
        _last = (ops, len(ops), num_stages, out)
    return out


def _training_deps_loop(ops: list[Op], num_stages: int) -> list[tuple[int, int]]:
    """:func:`training_deps` in one Python pass (the reference the vector path is tested against)."""
    prod: dict[_Key, int] = {}
    comm: dict[tuple[str, str, int, int, int], int] = {}  # (kind, *message_key) -> first such op
    put = prod.setdefault
    for i, op in enumerate(ops):
        k = op.kind
        if k == "F":
            put(("F", op.direction, op.stage, op.mb), i)
        elif k == "B":
            d, st, mb = op.direction, op.stage, op.mb
            put(("G", d, st, mb), i)
            put(("W", d, st, mb), i)
        elif k == "I":
            put(("G", op.direction, op.stage, op.mb), i)
        elif k == "W":
            put(("W", op.direction, op.stage, op.mb), i)
        elif k == "SEND" or k == "RECV":
            comm.setdefault((k, *message_key(op)), i)
        elif k == "FB" and op.pair is not None:
            put(("F", op.direction, op.stage, op.mb), i)
            ps, pm, pd = op.pair
            put(("G", pd, ps, pm), i)
            put(("W", pd, ps, pm), i)

    edges: set[tuple[int, int]] = set()
    add = edges.add
    get = prod.get
    last = num_stages - 1
    cget = comm.get

    def link(src: int, dst: int, flow: str, d: int, s_src: int, mb: int) -> None:
        if ops[src].rank == ops[dst].rank:
            add((src, dst))
            return
        send = cget(("SEND", flow, d, s_src, mb))
        recv = cget(("RECV", flow, d, s_src, mb))
        if send is None and recv is None:
            add((src, dst))  # compute-only schedule: communication is implicit
            return
        if send is not None:
            add((src, send))
        if recv is not None:
            add((recv, dst))
        if send is not None and recv is not None:
            add((send, recv))

    def grad(i: int, d: int, st: int, mb: int) -> None:
        # G(d, st, mb) needs F(d, st, mb) on its own stage and G(d, st + 1, mb) from the next.
        if 0 <= st <= last:
            src = get(("F", d, st, mb))
            if src is not None and src != i:
                add((src, i))
        if 0 <= st + 1 <= last:
            src = get(("G", d, st + 1, mb))
            if src is not None and src != i:
                link(src, i, "B", d, st + 1, mb)

    for i, op in enumerate(ops):
        k = op.kind
        if k == "F" or k == "FB":
            if k == "FB" and op.pair is None:
                continue
            st = op.stage - 1
            if 0 <= st <= last:
                src = get(("F", op.direction, st, op.mb))
                if src is not None and src != i:
                    link(src, i, "F", op.direction, st, op.mb)
            if k == "FB":
                ps, pm, pd = op.pair  # type: ignore[misc]
                grad(i, pd, ps, pm)
        elif k == "B" or k == "I":
            grad(i, op.direction, op.stage, op.mb)
        elif k == "W":
            if 0 <= op.stage <= last:
                src = get(("G", op.direction, op.stage, op.mb))
                if src is not None and src != i:
                    add((src, i))
    # SEND/RECV whose partner is missing still hang off their producer/consumer.
    for key, i in comm.items():
        kind, flow, d, s, mb = key
        if kind == "SEND":
            src = get(("F" if flow == "F" else "G", d, s, mb))
            if src is not None:
                add((src, i))
        else:
            send = cget(("SEND", flow, d, s, mb))
            if send is not None:
                add((send, i))
    return sorted(e for e in edges if e[0] != e[1])
