"""The schedule as one graph: data facts plus lane order.

Nodes are op indices; an edge ``u -> v`` means v cannot start before u ends. The graph comes in
two forms: :class:`Adjacency` (plain lists, what the simulator and the hot checks walk; a
topological order costs one pass) and a ``networkx.DiGraph`` (:func:`build_dag`), which the
checker builds only when the cheap pass finds a cycle, to find and print it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

from pptl.ir import Schedule

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Adjacency", "Successors", "adjacency", "successors", "kahn_order", "build_dag", "facts", "lane_edges",
           "topological_order"]


@dataclass(frozen=True, slots=True)
class Adjacency:
    """Predecessors and successors of every op, as lists indexed by op (an edge may repeat when
    a data fact and the lane order say the same thing; every walk here tolerates that)."""

    pred: list[list[int]]
    succ: list[list[int]]


def adjacency(schedule: Schedule) -> Adjacency:
    """The DAG's edges (data facts, then lane order) as lists. Notes: O(ops + edges).

    A schedule made from a table is read from its fact arrays: neither its ``Op`` objects nor its
    ``deps`` tuples are built. (Sorting the edges on arrays and cutting one list per op is slower
    than this loop while the cycle collector is off, as in the CLI: 145 ms against 95 on a 391k-op
    plan, 2026-11-26.)
    """
    n = schedule.n_ops
    pred: list[list[int]] = [[] for _ in range(n)]
    succ: list[list[int]] = [[] for _ in range(n)]
    for u, v in facts(schedule):
        succ[u].append(v)
        pred[v].append(u)
    for order in schedule.lanes.values():
        for u, v in zip(order, order[1:]):
            succ[u].append(v)
            pred[v].append(u)
    return Adjacency(pred, succ)


def facts(schedule: Schedule) -> Iterable[tuple[int, int]]:
    """The data facts (producer, consumer), from the fact arrays of a schedule whose ops were
    never built (made from a table) rather than building its ``deps`` tuples."""
    if schedule.has_ops():
        return schedule.deps
    du, dv = schedule.dep_arrays()
    return zip(du.tolist(), dv.tolist())


@dataclass(frozen=True, slots=True)
class Successors:
    """The successors of every op as one flat list cut by ``bounds`` (op ``u``'s are
    ``targets[bounds[u]:bounds[u + 1]]``, facts first, then its lane successor), and the number
    of predecessors of each: what a walk in topological order needs, without per-op lists.

    Every edge is also kept as arrays, in that same order (``edge_u``, ``edge_v``), for the
    passes that look an op's predecessors up afterwards (the critical path)."""

    bounds: list[int]
    targets: list[int]
    indeg: list[int]
    edge_u: Any
    edge_v: Any


def successors(schedule: Schedule) -> Successors:
    """:class:`Successors` of a schedule, from its fact arrays and lanes with numpy.

    Notes: O(edges log edges) in numpy, then one ``tolist`` per list: on a 391k-op plan about a
    third of the time of :func:`adjacency` and a fraction of its memory (no list per op).
    """
    import numpy as np

    from pptl.optable import lane_edge_arrays

    n = schedule.n_ops
    du, dv = schedule.dep_arrays()
    lu, lv = lane_edge_arrays(schedule)
    u, v = np.concatenate([du, lu]).astype(np.int64, copy=False), np.concatenate([dv, lv]).astype(np.int64, copy=False)
    by = np.argsort(u, kind="stable")  # each op's successors in edge order, as adjacency lists them
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=bounds[1:])
    return Successors(bounds.tolist(), v[by].tolist(), np.bincount(v, minlength=n).tolist(), u, v)


def kahn_order(succ: Successors) -> list[int] | None:
    """:func:`topological_order` over :class:`Successors`: the same order (Kahn's, generation
    by generation, successors in edge order), or None when the graph has a cycle."""
    bounds, targets = succ.bounds, succ.targets
    indeg = list(succ.indeg)
    order = [v for v, d in enumerate(indeg) if d == 0]
    for u in order:
        for v in targets[bounds[u]:bounds[u + 1]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    return order if len(order) == len(indeg) else None


def topological_order(adj: Adjacency) -> list[int] | None:
    """Ops in an order that respects every edge, or None when the graph has a cycle.

    Kahn's algorithm, generation by generation (the order networkx's ``topological_sort`` gives
    on the same edges). Notes: O(ops + edges).
    """
    succ = adj.succ
    indeg = [len(p) for p in adj.pred]
    order = [v for v, d in enumerate(indeg) if d == 0]
    for u in order:  # a FIFO: the loop reaches what it appends, a generation after the one before
        for v in succ[u]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    return order if len(order) == len(indeg) else None


def lane_edges(schedule: Schedule) -> list[tuple[int, int]]:
    """Consecutive ops on each (rank, lane): the order the schedule chose."""
    out: list[tuple[int, int]] = []
    for order in schedule.lanes.values():
        out.extend(zip(order, order[1:]))
    return out


def build_dag(schedule: Schedule) -> nx.DiGraph:
    """Data dependencies and lane order of ``schedule``, as a networkx graph (for its cycle search).

    Notes:
        O(ops + deps). About 1 s and 0.5 GB for 400k ops.
    """
    import networkx as nx  # here: a plan whose graph is acyclic never needs networkx

    g = nx.DiGraph()
    # Filling the adjacency dicts directly is 5x faster than add_edges_from at 1M edges; every edge
    # shares one empty attribute dict because pptl never sets edge attributes.
    n = schedule.n_ops
    node, succ, pred = g._node, g._succ, g._pred
    for i in range(n):
        node[i] = {}
        succ[i] = {}
        pred[i] = {}
    attr = _NO_ATTRS
    for u, v in facts(schedule):
        succ[u][v] = attr
        pred[v][u] = attr
    for order in schedule.lanes.values():
        for u, v in zip(order, order[1:]):
            succ[u][v] = attr
            pred[v][u] = attr
    return g


_NO_ATTRS: dict[str, object] = {}
