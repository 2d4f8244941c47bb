"""Rules about point-to-point communication."""
from __future__ import annotations

from pptl.checks.base import Context, Violation
from pptl.ir import Op

__all__ = ["unmatched_p2p"]


def unmatched_p2p(ctx: Context) -> list[Violation]:
    """PP008: a SEND without its RECV (or the reverse), a pair whose ranks disagree, or data that
    crosses ranks without a SEND/RECV in a schedule that lists its communication.

    Fixture: fixtures/invalid/unmatched_send.json. Notes: O(ops).
    """
    s = ctx.schedule
    ops = s.ops
    comm = ctx.work.comm
    if not comm:
        return []  # a compute-only schedule: communication is implicit
    out: list[Violation] = []
    for key, i in comm.items():
        kind, flow = key[0], key[1]
        if flow not in ("F", "B"):
            continue
        op = ops[i]
        j = comm.get(("RECV" if kind == "SEND" else "SEND", *key[1:]))
        partner: Op | None = None if j is None else ops[j]
        if partner is None:
            other = "RECV" if kind == "SEND" else "SEND"
            out.append(Violation("PP008", f"{op.id} has no matching {other} on rank {op.peer}", (op.id,)))
        elif partner.rank != op.peer or partner.peer != op.rank:
            out.append(Violation("PP008", f"{op.id} and {partner.id} disagree on their ranks", (op.id, partner.id)))
    # Every crossing of ranks needs a SEND on the producer side.
    items = ctx.work.items
    where: dict[tuple[int, int], int] = {}
    for i, _, d, st, _ in items:
        if (d, st) not in where:
            where[(d, st)] = ops[i].rank
    last = s.num_stages - 1
    for i, role, d, st, mb in items:
        if role == "F" and st < last:
            peer, flow = where.get((d, st + 1)), "F"
        elif role == "G" and st > 0:
            peer, flow = where.get((d, st - 1)), "B"
        else:
            continue
        if peer is not None and ("SEND", flow, d, st, mb) not in comm and peer != ops[i].rank:
            op = ops[i]
            out.append(Violation("PP008", f"{op.id} produces data for rank {peer} but no SEND_{flow} "
                                 f"of stage {st} mb {mb} carries it", (op.id,)))
    return out
