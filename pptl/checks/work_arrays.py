"""What the rules index, as numpy arrays over the op table: the work every op does
(:class:`WorkArrays`, one row per unit of work (role, direction, stage, mb): op by op, and within
an op F, then G (input gradient), then W), every lane entry (:class:`LaneArrays`), and rows
grouped by integer keys (:func:`group_ids`, :func:`first_of`). A key such as (role, direction,
stage, mb) becomes one dense integer id, and "the first row of each key" a flat array indexed by
it: a few passes of numpy instead of a dict entry per op. Each is built once per check run
(:class:`pptl.checks.base.Context`) and shared by its rules.

Roles are coded 0 (F), 1 (G), 2 (W), the order :func:`pptl.deps.roles` lists an op's roles in
(:data:`ROLES` gives their names).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from pptl.optable import FLOW_CODE, KIND_CODE, OpTable, first_of, flat_lanes, group_ids

if TYPE_CHECKING:
    from pptl.ir import Schedule

__all__ = ["ROLES", "F", "G", "W", "WorkArrays", "work_arrays", "items_of", "first_place", "group_ids", "first_of",
           "sender_stages", "LaneArrays", "lane_arrays"]

ROLES = ("F", "G", "W")
F, G, W = 0, 1, 2
_I64 = np.int64
#: Per kind: (units of work, role of the first). B is G then W; an FB with a pair is F, G, W.
_SHAPE = {"F": (1, 0), "B": (2, 1), "I": (1, 1), "W": (1, 2), "FB": (3, 0)}


@dataclass(frozen=True, eq=False)
class WorkArrays:
    """One row per unit of work; every column is int64 and as long as the others."""

    op: Any
    """The op doing it (row of the table), non-decreasing."""
    role: Any
    """0 F, 1 G, 2 W (:data:`ROLES`)."""
    direction: Any
    stage: Any
    mb: Any

    @property
    def n(self) -> int:
        return int(self.op.size)

    def in_range(self, stages: int, microbatches: int, directions: int) -> Any:
        """bool per row: stage, mb and direction within the schedule's sizes."""
        return ((self.stage >= 0) & (self.stage < stages) & (self.mb >= 0) & (self.mb < microbatches)
                & (self.direction >= 0) & (self.direction < directions))

    @cached_property
    def key(self) -> tuple[Any, int]:
        """:func:`group_ids` of (role, direction, stage, mb): equal ids, the same unit of work."""
        return group_ids(self.role, self.direction, self.stage, self.mb)

    @cached_property
    def repeated(self) -> Any:
        """bool per row: another row does the same unit of work."""
        ids, size = self.key
        if not self.n:
            return np.zeros(0, dtype=bool)
        return np.bincount(ids, minlength=size)[ids] > 1


def work_arrays(table: OpTable) -> WorkArrays:
    count_of = np.array([_SHAPE.get(k, (0, 0))[0] for k in table.kind_names] or [0], dtype=_I64)
    first_of = np.array([_SHAPE.get(k, (0, 0))[1] for k in table.kind_names] or [0], dtype=_I64)
    counts = count_of[table.kind]
    fb = counts == 3
    if fb.any():
        counts = np.where(fb & ~table.has_pair, 0, counts)  # an FB without its pair does no work
    op = np.repeat(np.arange(table.n, dtype=_I64), counts)
    starts = np.cumsum(counts) - counts
    pos = np.arange(op.size, dtype=_I64) - starts[op]  # 0, 1, 2 within an op
    role = first_of[table.kind][op] + pos
    direction, stage, mb = table.direction[op], table.stage[op], table.mb[op]  # copies: safe to write
    halves = pos > 0
    if fb.any():
        halves &= fb[op]  # the G and W of an FB belong to its pair
        if halves.any():
            p = table.pair[op[halves]]
            stage[halves], mb[halves], direction[halves] = p[:, 0], p[:, 1], p[:, 2]
    return WorkArrays(op, role, direction, stage, mb)


def items_of(w: WorkArrays, rows: Any, roles: tuple[int, ...]) -> WorkArrays:
    """The units of work of the ops ``rows`` (op indices, in any order, repeats allowed) for the
    ``roles`` asked, as :class:`WorkArrays` whose ``op`` is the position in ``rows``."""
    start, stop = np.searchsorted(w.op, rows, "left"), np.searchsorted(w.op, rows, "right")
    counts = stop - start
    src = np.repeat(np.arange(rows.size, dtype=_I64), counts)
    at = np.repeat(start, counts) + np.arange(src.size, dtype=_I64) - np.repeat(np.cumsum(counts) - counts, counts)
    keep = np.isin(w.role[at], roles)
    src, at = src[keep], at[keep]
    return WorkArrays(src, w.role[at], w.direction[at], w.stage[at], w.mb[at])


def first_place(made: WorkArrays, group: Any, place: Any, want: tuple[Any, Any, Any, Any, Any]) -> Any:
    """For each wanted (group, role, direction, stage, mb), the least ``place`` of an item of
    ``made`` (its group ``group``) doing that work in that group, else -1."""
    ids, size = group_ids(*(np.concatenate([a, b]) for a, b in zip(
        (group, made.role, made.direction, made.stage, made.mb), want)))
    return first_of(ids[:made.op.size], size, place)[ids[made.op.size:]]


def sender_stages(cols: Any, rows: Any) -> Any:
    """:func:`pptl.messages.message_key`'s stage of the SENDs and RECVs ``rows``: the sender's.
    Stages beyond +-2**62 (PP004 reports them) are clamped so that stage + 1 cannot wrap."""
    stage = np.clip(cols.stage[rows], -(1 << 62), 1 << 62)
    recv = cols.kind[rows] == KIND_CODE["RECV"]
    return np.where(recv, np.where(cols.flow[rows] == FLOW_CODE["F"], stage - 1, stage + 1), stage)


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
    rank: Any
    """The rank of the entry's lane (its key's, not the op's)."""
    unique: bool
    """Whether every op index is listed once."""


def lane_arrays(s: Schedule) -> LaneArrays:
    """:class:`LaneArrays` of a schedule (a check run keeps one: :attr:`pptl.checks.base.Context.lane_arrays`)."""
    keys, op, lane = flat_lanes(s.lanes)
    ranks = np.fromiter((k[0] for k in keys), dtype=_I64, count=len(keys))
    n = s.n_ops
    unique = op.size == 0 or int(np.bincount(op, minlength=n).max()) <= 1
    return LaneArrays(keys, op, lane, ranks[lane] if keys else np.zeros(0, dtype=_I64), unique)
