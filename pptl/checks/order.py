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
