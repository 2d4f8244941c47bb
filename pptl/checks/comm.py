"""Rules about point-to-point communication."""
from __future__ import annotations

from pptl.checks import Context, Violation
from pptl.deps import comm_key, roles

__all__ = ["unmatched_p2p"]


def unmatched_p2p(ctx: Context) -> list[Violation]:
    """PP008: a SEND without its RECV (or the reverse), a pair whose ranks disagree, or data that
    crosses ranks without a SEND/RECV in a schedule that lists its communication.

    Fixture: fixtures/invalid/unmatched_send.json. Notes: O(ops).
    """
    s = ctx.schedule
    comm: dict[tuple, object] = {}
    for op in s.ops:
        if op.kind in ("SEND", "RECV"):
            comm.setdefault(comm_key(op), op)
    if not comm:
        return []  # a compute-only schedule: communication is implicit
    out: list[Violation] = []
    for key, op in comm.items():
        kind, flow, d, st, mb = key
        if flow not in ("F", "B"):
            continue
        if kind == "SEND":
            partner = comm.get(("RECV", flow, d, st + 1 if flow == "F" else st - 1, mb))
        else:
            partner = comm.get(("SEND", flow, d, st - 1 if flow == "F" else st + 1, mb))
        if partner is None:
            other = "RECV" if kind == "SEND" else "SEND"
            out.append(Violation("PP008", f"{op.id} has no matching {other} on rank {op.peer}", (op.id,)))
        elif partner.rank != op.peer or partner.peer != op.rank:
            out.append(Violation("PP008", f"{op.id} and {partner.id} disagree on their ranks", (op.id, partner.id)))
    # Every crossing of ranks needs a SEND on the producer side.
    where: dict[tuple[int, int], int] = {}
    for op in s.ops:
        for _, d, st, _ in roles(op):
            where.setdefault((d, st), op.rank)
    for op in s.ops:
        for role, d, st, mb in roles(op):
            if role == "F" and st + 1 < s.num_stages:
                peer, flow = where.get((d, st + 1)), "F"
            elif role == "G" and st > 0:
                peer, flow = where.get((d, st - 1)), "B"
            else:
                continue
            if peer is not None and peer != op.rank and ("SEND", flow, d, st, mb) not in comm:
                out.append(Violation("PP008", f"{op.id} produces data for rank {peer} but no SEND_{flow} "
                                     f"of stage {st} mb {mb} carries it", (op.id,)))
    return out
