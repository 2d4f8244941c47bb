"""The training facts written op by op (dict lookups keyed by tuples): a clear statement of the
rules in :mod:`pptl.deps`, kept as the oracle its numpy derivation is tested against."""
from __future__ import annotations

from pptl.ir import Op
from pptl.messages import message_key

_Key = tuple[str, int, int, int]


def training_deps_loop(ops: list[Op], num_stages: int) -> list[tuple[int, int]]:
    """:func:`pptl.deps.training_deps` in one Python pass, op by op: the oracle the array
    derivation is tested against."""
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
