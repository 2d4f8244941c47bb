"""Rules about point-to-point communication."""
from __future__ import annotations

import numpy as np

from pptl.checks.base import Context, Violation
from pptl.checks.work_arrays import F, G, first_of, group_ids, sender_stages
from pptl.optable import FLOW_CODE, KIND_CODE

__all__ = ["unmatched_p2p"]

_FAR = 1 << 62  # stages beyond +-2**62 (PP004 reports them) are clamped so that stage + 1 cannot wrap


def unmatched_p2p(ctx: Context) -> list[Violation]:
    """PP008: a SEND without its RECV (or the reverse), a pair whose ranks disagree, or data that
    crosses ranks without a SEND/RECV in a schedule that lists its communication.

    Fixture: fixtures/invalid/unmatched_send.json. Notes: O(ops).
    """
    t = ctx.table
    col = t.columns
    send, recv = KIND_CODE["SEND"], KIND_CODE["RECV"]
    is_comm = (col.kind == send) | (col.kind == recv)
    if not is_comm.any():
        return []  # a compute-only schedule: communication is implicit
    out: list[Violation] = []
    # 1. Each first SEND (RECV) of a message, in op order, against the first RECV (SEND) of it.
    fwd, bwd = FLOW_CODE["F"], FLOW_CODE["B"]
    c = np.flatnonzero(is_comm & ((col.flow == fwd) | (col.flow == bwd)))
    flow, kind = col.flow[c], col.kind[c]
    msg, size = group_ids(flow, col.direction[c], sender_stages(col, c), col.mb[c])
    slot = msg * 2 + (kind == recv)
    first = first_of(slot, 2 * size, c)
    firsts = np.flatnonzero(first >= 0)
    firsts = firsts[np.argsort(first[firsts], kind="stable")]
    partner = first[firsts ^ 1]
    me = first[firsts]
    lone = partner < 0
    pj = np.maximum(partner, 0)
    odd = ~lone & ((col.rank[pj] != col.peer[me]) | (col.peer[pj] != col.rank[me]))
    for i, j, alone in zip(me[lone | odd].tolist(), partner[lone | odd].tolist(), lone[lone | odd].tolist()):
        op = t.op(i)
        if alone:
            other = "RECV" if op.kind == "SEND" else "SEND"
            out.append(Violation("PP008", f"{op.id} has no matching {other} on rank {op.peer}", (op.id,)))
        else:
            p = t.op(j)
            out.append(Violation("PP008", f"{op.id} and {p.id} disagree on their ranks", (op.id, p.id)))
    # 2. Every crossing of ranks needs a SEND on the producer side.
    items = ctx.work_arrays  # op by op, F then G then W (shared with PP002-PP005)
    last = ctx.schedule.num_stages - 1
    crossing = ((items.role == F) & (items.stage < last)) | ((items.role == G) & (items.stage > 0))
    q = np.flatnonzero(crossing)
    q_d, q_st, q_role = items.direction[q], np.clip(items.stage[q], -_FAR, _FAR), items.role[q]
    q_next = np.where(q_role == F, q_st + 1, q_st - 1)
    # The rank of the first item of each (direction, stage), for the stage next to each crossing.
    ids, size = group_ids(*[np.concatenate([items.direction, q_d]), np.concatenate([items.stage, q_next])])
    first_item = first_of(ids[:items.op.size], size, np.arange(items.op.size, dtype=np.int64))
    at = first_item[ids[items.op.size:]]
    peer = np.where(at >= 0, col.rank[items.op[np.maximum(at, 0)]], 0)
    # Whether a SEND of (flow, direction, stage, mb) exists.
    sends = c[kind == send]
    q_flow = np.where(q_role == F, fwd, bwd).astype(col.flow.dtype)
    q_mb = items.mb[q]
    ids, size = group_ids(*[np.concatenate([col.flow[sends], q_flow]), np.concatenate([col.direction[sends], q_d]),
                           np.concatenate([np.clip(col.stage[sends], -_FAR, _FAR), q_st]), np.concatenate([col.mb[sends], q_mb])])
    sent = np.zeros(size, dtype=bool)
    sent[ids[:sends.size]] = True
    src = items.op[q]
    bad = (at >= 0) & ~sent[ids[sends.size:]] & (peer != col.rank[src])
    for i, p, f, st, mb in zip(src[bad].tolist(), peer[bad].tolist(), q_role[bad].tolist(), q_st[bad].tolist(),
                               q_mb[bad].tolist()):
        op = t.op(i)
        flow_name = "F" if f == F else "B"
        out.append(Violation("PP008", f"{op.id} produces data for rank {p} but no SEND_{flow_name} "
                             f"of stage {st} mb {mb} carries it", (op.id,)))
    return out
