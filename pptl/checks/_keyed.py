"""Helpers of the rules' array paths: rows grouped by integer keys, and a schedule's lanes as arrays.

A key such as (role, direction, stage, mb) becomes one dense integer id (:func:`dense_ids`), and
"the first row of each key" a flat array indexed by it (:func:`first_of`): a few passes of numpy
instead of a dict entry per op.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from pptl.checks.work_arrays import group_ids
from pptl.ir import Schedule
from pptl.optable import KIND_CODE, flat_lanes

__all__ = ["dense_ids", "first_of", "LaneArrays", "lane_arrays", "RoleItems", "role_items"]

_I64 = np.int64


def dense_ids(cols: Sequence[Any]) -> tuple[Any, int]:
    """(ids, size): equal rows of the int columns ``cols`` get equal ids in ``range(size)``, and
    different rows different ids (:func:`pptl.checks.work_arrays.group_ids`)."""
    return group_ids(*cols)


def first_of(ids: Any, size: int, rows: Any) -> Any:
    """Per id, the least of ``rows`` (positions, op indices...) with that id, else -1."""
    none = np.iinfo(_I64).max
    out = np.full(size, none, dtype=_I64)
    np.minimum.at(out, ids, rows)
    out[out == none] = -1
    return out


@dataclass(frozen=True)
class LaneArrays:
    """Every (lane, position) of ``schedule.lanes``, in its iteration order (lanes in dict order,
    each in run order)."""

    keys: list[tuple[int, str]]
    """The lanes, in ``schedule.lanes`` order."""
    op: Any
    """The op index of each entry."""
    lane: Any
    """The lane (position in ``keys``) of each entry."""
    pos: Any
    """The entry's position on its lane."""
    rank: Any
    """The rank of the entry's lane (its key's, not the op's)."""
    unique: bool
    """Whether every op index is listed once."""


def lane_arrays(s: Schedule) -> LaneArrays:
    """:class:`LaneArrays` of a schedule (a check run keeps one: :attr:`pptl.checks.base.Context.lane_arrays`)."""
    keys, op, lane = flat_lanes(s.lanes)
    lengths = np.bincount(lane, minlength=len(keys)) if keys else np.zeros(0, dtype=_I64)
    starts = np.cumsum(lengths) - lengths
    pos = np.arange(op.size, dtype=_I64) - starts[lane]
    ranks = np.fromiter((k[0] for k in keys), dtype=_I64, count=len(keys))
    n = s.n_ops
    unique = op.size == 0 or int(np.bincount(op, minlength=n).max()) <= 1
    return LaneArrays(keys, op, lane, pos, ranks[lane] if keys else np.zeros(0, dtype=_I64), unique)


#: Role codes of :class:`RoleItems` (the order :func:`pptl.deps.roles` lists an op's roles in).
F, G, W = 0, 1, 2


@dataclass(frozen=True)
class RoleItems:
    """The units of work (:func:`pptl.deps.roles`) of some rows, one item per (row, role)."""

    src: Any
    """Index into the rows asked about."""
    role: Any
    """:data:`F`, :data:`G` or :data:`W`."""
    direction: Any
    stage: Any
    mb: Any


def role_items(table: Any, rows: Any, roles: tuple[int, ...] = (F, G, W)) -> RoleItems:
    """The work items of the ops ``rows`` (indices into ``table``), for the roles asked: F makes F;
    B makes G and W; I makes G; W makes W; FB with a pair makes F, and G and W of its pair."""
    cols = table.columns
    kind = cols.kind[rows]
    fb = (kind == KIND_CODE["FB"]) & table.has_pair[rows]
    pair = table.pair[rows]
    own = (cols.direction[rows], cols.stage[rows], cols.mb[rows])
    theirs = (pair[:, 2], pair[:, 0], pair[:, 1])
    made = {F: ((kind == KIND_CODE["F"]) | fb, None),
            G: ((kind == KIND_CODE["B"]) | (kind == KIND_CODE["I"]), fb),
            W: ((kind == KIND_CODE["B"]) | (kind == KIND_CODE["W"]), fb)}
    parts: list[tuple[Any, ...]] = []
    for role in roles:
        mine, paired = made[role]
        for sel, cols_of in ((mine, own), (paired, theirs)):
            if sel is None:
                continue
            at = np.flatnonzero(sel)
            parts.append((at, np.full(at.size, role, dtype=_I64), *(c[at] for c in cols_of)))
    return RoleItems(*(np.concatenate([p[k] for p in parts]) for k in range(5)))
