"""Rules about order: work before what it needs on one rank, and cycles across ranks."""
from __future__ import annotations

import numpy as np

from pptl.checks.base import Context, Violation
from pptl.checks.work_arrays import F, G, first_place, items_of
from pptl.optable import KIND_CODE

__all__ = ["local_order", "deadlock"]


def local_order(ctx: Context) -> list[Violation]:
    """PP006: on one rank, a backward (B or I) listed before its own F, or a W before its I.

    Such an order can never run; the deadlock rule sees it too, as a cycle on one rank.
    Fixture: fixtures/invalid/b_before_f.json. Notes: O(ops log ops) in numpy.
    """
    t = ctx.table
    col = t.columns
    la = ctx.lane_arrays
    if la.op.size == 0:
        return []
    # The first position of each unit of work on each lane (entries of one lane grow with their
    # position), looked up for every backward (its F), FB (its pair's F) and W (its G).
    made = items_of(ctx.work_arrays, la.op, (F, G))
    kind = col.kind[la.op]
    backward = np.flatnonzero((kind == KIND_CODE["B"]) | (kind == KIND_CODE["I"]))
    fb = np.flatnonzero((kind == KIND_CODE["FB"]) & t.has_pair[la.op])
    w = np.flatnonzero(kind == KIND_CODE["W"])
    pair = t.pair[la.op[fb]]
    need = np.concatenate([backward, fb, w])
    if need.size == 0:
        return []
    need_role = np.repeat(np.array([F, F, G], dtype=np.int64), [backward.size, fb.size, w.size])
    need_d = np.concatenate([col.direction[la.op[backward]], pair[:, 2], col.direction[la.op[w]]])
    need_st = np.concatenate([col.stage[la.op[backward]], pair[:, 0], col.stage[la.op[w]]])
    need_mb = np.concatenate([col.mb[la.op[backward]], pair[:, 1], col.mb[la.op[w]]])
    at = first_place(made, la.lane[made.op], made.op, (la.lane[need], need_role, need_d, need_st, need_mb))
    bad = at > need
    is_w = need_role == G
    bad[is_w] &= kind[np.maximum(at[is_w], 0)] == KIND_CODE["I"]  # a W after its B is fine
    out: list[Violation] = []
    o = np.argsort(need[bad], kind="stable")
    for e, f, wgrad in zip(need[bad][o].tolist(), at[bad][o].tolist(), is_w[bad][o].tolist()):
        a, b = t.op(int(la.op[e])).id, t.op(int(la.op[f])).id
        why = "a weight gradient needs its input gradient" if wgrad else "a backward needs its forward"
        out.append(Violation("PP006", f"{a} comes before {b} on rank {int(la.rank[e])}, but {why}", (a, b)))
    return out


def deadlock(ctx: Context) -> list[Violation]:
    """PP007: a cycle in the DAG (data facts + lane order): the schedule waits on itself.

    The message walks the cycle op by op, saying for each step whether it is a data need or
    the lane's order. Fixture: fixtures/invalid/deadlock_two_ranks.json.

    Notes: O(ops + edges) (one topological sort; ``nx.find_cycle`` only when it fails).
    """
    if ctx.order is not None:
        return []
    import networkx as nx  # only once the cheap pass has proved a cycle, to find and print it

    s = ctx.schedule
    cycle = nx.find_cycle(ctx.dag)
    lane_next: dict[int, int] = {}
    for order in s.lanes.values():
        for a, b in zip(order, order[1:]):
            lane_next[a] = b
    ids = ctx.ids
    steps = []
    for u, v in cycle:
        how = "(next on lane)" if lane_next.get(u) == v else "(needed by)"
        steps.append(f"{ids[u]} -> {how}")
    ranks = sorted({s.ops[u].rank for u, _ in cycle})
    text = " ".join(steps) + f" {ids[cycle[0][0]]}"
    span = f"ranks {', '.join(map(str, ranks))}" if len(ranks) > 1 else f"rank {ranks[0]}"
    return [Violation("PP007", f"deadlock across {span}: {text}", tuple(ids[u] for u, _ in cycle))]
