"""The schedule as one graph: data facts plus lane order.

Nodes are op indices; an edge ``u -> v`` means v cannot start before u ends. The graph comes in
two forms: :class:`Successors` (flat lists built on arrays, what the order and the simulator
walk) and a ``networkx.DiGraph`` (:func:`build_dag`), which the checker builds only when the
cheap pass finds a cycle, to find and print it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from pptl.ir import Schedule
from pptl.optable import lane_edge_arrays

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Successors", "successors", "graph_of", "kahn_order", "left_in_cycles", "build_dag", "verified_order"]


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
    """:class:`Successors` of a schedule: its facts, then its lanes' order (:func:`graph_of`)."""
    du, dv = schedule.dep_arrays()
    lu, lv = lane_edge_arrays(schedule.lanes)
    return graph_of(schedule.n_ops, np.concatenate([du, lu]), np.concatenate([dv, lv]))


def graph_of(n: int, u: Any, v: Any) -> Successors:
    """:class:`Successors` of ``n`` nodes and the edges ``u[k] -> v[k]`` (int arrays).

    Notes: O(edges log edges) in numpy, then one ``tolist`` per list (no list per op).
    """
    u, v = u.astype(np.int64, copy=False), v.astype(np.int64, copy=False)
    by = np.argsort(u, kind="stable")  # each op's successors in edge order
    bounds = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=bounds[1:])
    return Successors(bounds.tolist(), v[by].tolist(), np.bincount(v, minlength=n).tolist(), u, v)


def kahn_order(succ: Successors) -> list[int] | None:
    """Ops in an order that respects every edge, or None when the graph has a cycle.

    Kahn's algorithm, generation by generation, successors in edge order (the order networkx's
    ``topological_sort`` gives on the same edges). Notes: O(ops + edges)."""
    order, indeg = _kahn(succ)
    return order if len(order) == len(indeg) else None


def left_in_cycles(succ: Successors) -> list[int]:
    """The nodes :func:`kahn_order` cannot order: on a cycle or behind one (none when acyclic)."""
    order, indeg = _kahn(succ)
    return [] if len(order) == len(indeg) else [v for v, d in enumerate(indeg) if d > 0]


def _kahn(succ: Successors) -> tuple[list[int], list[int]]:
    bounds, targets = succ.bounds, succ.targets
    indeg = list(succ.indeg)
    order = [v for v, d in enumerate(indeg) if d == 0]
    for u in order:  # a FIFO: the loop reaches what it appends, a generation after the one before
        for v in targets[bounds[u]:bounds[u + 1]]:
            indeg[v] -= 1
            if indeg[v] == 0:
                order.append(v)
    return order, indeg


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
    du, dv = schedule.dep_arrays()
    lu, lv = lane_edge_arrays(schedule.lanes)
    for u, v in zip(np.concatenate([du, lu]).tolist(), np.concatenate([dv, lv]).tolist()):
        succ[u][v] = attr
        pred[v][u] = attr
    return g


_NO_ATTRS: dict[str, object] = {}


def verified_order(schedule: Schedule, hint: Any) -> list[int] | None:
    """The ops sorted by ``hint`` (a claimed topological position per op), when every edge of the
    graph (the facts and each lane's order) goes strictly forward in it; else None.

    A plan file carries such a hint; checking it is one comparison per edge, where finding an
    order is a walk over every op. The hint is never trusted: a graph with a cycle has no
    labelling in which every edge goes forward, so a passing hint proves the graph acyclic.
    """
    n = schedule.n_ops
    hint = np.asarray(hint)
    if hint.shape != (n,) or hint.dtype.kind not in "iu":
        return None
    for u, v in (schedule.dep_arrays(), lane_edge_arrays(schedule.lanes)):
        if u.size and not (hint[u] < hint[v]).all():
            return None
    return np.argsort(hint, kind="stable").tolist()  # type: ignore[no-any-return]

