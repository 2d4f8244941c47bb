"""Rules about order: work before what it needs on one rank, and cycles across ranks."""
from __future__ import annotations

from pptl.checks.base import Context, Violation
from pptl.deps import roles

__all__ = ["local_order", "deadlock"]


def local_order(ctx: Context) -> list[Violation]:
    """PP006: on one rank, a backward (B or I) listed before its own F, or a W before its I.

    Such an order can never run; the deadlock rule sees it too, as a cycle on one rank.
    Fixture: fixtures/invalid/b_before_f.json. Notes: O(ops).
    """
    if ctx.table is not None:
        found = _local_order_arrays(ctx)
        if found is not None:
            return found
    if not ctx.work.repeated:
        return _local_order_unique(ctx)
    s = ctx.schedule
    out: list[Violation] = []
    for (rank, lane), order in s.lanes.items():
        pos: dict[tuple[str, int, int, int], tuple[int, str]] = {}
        for k, i in enumerate(order):
            op = s.ops[i]
            for key in roles(op):
                pos.setdefault(key, (k, op.id))
        for k, i in enumerate(order):
            op = s.ops[i]
            if op.kind in ("B", "I") or op.kind == "FB":
                targets = [("F", op.direction, op.stage, op.mb)] if op.kind != "FB" else []
                if op.kind == "FB" and op.pair is not None:
                    ps, pm, pd = op.pair
                    targets = [("F", pd, ps, pm)]
                for t in targets:
                    f = pos.get(t)
                    if f is not None and f[0] > k:
                        out.append(Violation("PP006", f"{op.id} comes before {f[1]} on rank {rank}, "
                                             "but a backward needs its forward", (op.id, f[1])))
            elif op.kind == "W":
                g = pos.get(("G", op.direction, op.stage, op.mb))
                if g is not None and g[0] > k and s.ops[order[g[0]]].kind == "I":
                    out.append(Violation("PP006", f"{op.id} comes before {g[1]} on rank {rank}, "
                                         "but a weight gradient needs its input gradient", (op.id, g[1])))
    return out


def _local_order_unique(ctx: Context) -> list[Violation]:
    """:func:`local_order` where each unit of work has one producer: the producer index is the
    per-lane one, so one pass over the backward ops does (same violations, same order)."""
    s = ctx.schedule
    ops = s.ops
    producer = ctx.work.producer
    out: list[Violation] = []
    for (rank, _lane), order in s.lanes.items():
        pos = {i: k for k, i in enumerate(order)}
        for k, i in enumerate(order):
            op = ops[i]
            kind = op.kind
            if kind == "B" or kind == "I" or kind == "FB":
                if kind != "FB":
                    t = ("F", op.direction, op.stage, op.mb)
                elif op.pair is not None:
                    ps, pm, pd = op.pair
                    t = ("F", pd, ps, pm)
                else:
                    continue
                j = producer.get(t)
                if j is not None and pos.get(j, -1) > k:
                    out.append(Violation("PP006", f"{op.id} comes before {ops[j].id} on rank {rank}, "
                                         "but a backward needs its forward", (op.id, ops[j].id)))
            elif kind == "W":
                j = producer.get(("G", op.direction, op.stage, op.mb))
                if j is not None and pos.get(j, -1) > k and ops[j].kind == "I":
                    out.append(Violation("PP006", f"{op.id} comes before {ops[j].id} on rank {rank}, "
                                         "but a weight gradient needs its input gradient", (op.id, ops[j].id)))
    return out


def _local_order_arrays(ctx: Context) -> list[Violation] | None:
    """:func:`local_order` on the op table: the first position of each unit of work on each lane,
    looked up for every backward and W (same violations, same order). None when a lane lists an
    op twice (the plain path's answer then depends on which listing it reads)."""
    import numpy as np

    from pptl.checks._keyed import F, G, dense_ids, first_of, role_items
    from pptl.columns import KIND_CODE

    t = ctx.table
    assert t is not None
    la = ctx.lane_arrays
    if la.op.size == 0:
        return []
    if not la.unique:
        return None
    made = role_items(t, la.op, (F, G))  # what each lane entry makes (W is never looked up)
    kind = t.columns.kind[la.op]
    backward = np.flatnonzero((kind == KIND_CODE["B"]) | (kind == KIND_CODE["I"]))
    fb = np.flatnonzero((kind == KIND_CODE["FB"]) & t.has_pair[la.op])
    w = np.flatnonzero(kind == KIND_CODE["W"])
    pair = t.pair[la.op[fb]]
    col = t.columns
    # What each of them needs: its F (a B or I), its pair's F (an FB), its G (a W).
    need = np.concatenate([backward, fb, w])
    need_role = np.repeat(np.array([F, F, G], dtype=np.int64), [backward.size, fb.size, w.size])
    need_d = np.concatenate([col.direction[la.op[backward]], pair[:, 2], col.direction[la.op[w]]])
    need_st = np.concatenate([col.stage[la.op[backward]], pair[:, 0], col.stage[la.op[w]]])
    need_mb = np.concatenate([col.mb[la.op[backward]], pair[:, 1], col.mb[la.op[w]]])
    if need.size == 0:
        return []
    ids, size = dense_ids([np.concatenate([la.lane[made.src], la.lane[need]]),
                           np.concatenate([made.role, need_role]), np.concatenate([made.direction, need_d]),
                           np.concatenate([made.stage, need_st]), np.concatenate([made.mb, need_mb])])
    first = first_of(ids[:made.src.size], size, made.src)  # entry indices: one lane's grow with position
    at = first[ids[made.src.size:]]
    bad = at > need
    is_w = need_role == G
    bad[is_w] &= kind[np.maximum(at[is_w], 0)] == KIND_CODE["I"]
    out: list[Violation] = []
    o = np.argsort(need[bad], kind="stable")
    for e, f, wgrad in zip(need[bad][o].tolist(), at[bad][o].tolist(), is_w[bad][o].tolist()):
        a, b = t.op(int(la.op[e])).id, t.op(int(la.op[f])).id
        rank = int(la.rank[e])
        why = "a weight gradient needs its input gradient" if wgrad else "a backward needs its forward"
        out.append(Violation("PP006", f"{a} comes before {b} on rank {rank}, but {why}", (a, b)))
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
