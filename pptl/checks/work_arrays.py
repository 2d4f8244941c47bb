"""The work every op does, as numpy arrays: the array twin of :class:`pptl.checks.base.WorkIndex`.

One row per unit of work (role, direction, stage, mb), in the order ``WorkIndex.items`` lists
them: op by op, and within an op F, then G (input gradient), then W. Rules that run on an
:class:`pptl.optable.OpTable` (PP002-PP005, and any other that indexes work) read it instead of
building ``Op`` objects; it is built once per check run (:attr:`pptl.checks.base.Context.work_arrays`) and shared by its rules.

Roles are coded 0 (F), 1 (G), 2 (W): :data:`ROLES` gives the names ``WorkIndex`` uses.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from pptl.optable import OpTable

__all__ = ["ROLES", "WorkArrays", "work_arrays", "group_ids"]

ROLES = ("F", "G", "W")
_I64 = np.int64
#: Per kind: (units of work, role of the first). B is G then W; an FB with a pair is F, G, W.
_SHAPE = {"F": (1, 0), "B": (2, 1), "I": (1, 1), "W": (1, 2), "FB": (3, 0)}
#: Ids spread over at most this many slots (times the rows) are used as they are, not compressed.
_DENSE_SLACK = 4


def group_ids(*cols: Any) -> tuple[Any, int]:
    """(ids, size): one id in ``0..size-1`` per row, equal where the rows of ``cols`` are equal.

    Ids come from the columns' values themselves when they pack into a range not much larger than
    the rows (then ``size`` may exceed the number of distinct rows), else from ``np.unique``.
    """
    n = int(cols[0].size) if cols else 0
    if n == 0:
        return np.zeros(0, dtype=_I64), 0
    cols = tuple(np.asarray(c).astype(_I64, copy=False) for c in cols)  # narrow codes would wrap below
    lows = [int(c.min()) for c in cols]
    spans = [int(c.max()) - lo + 1 for c, lo in zip(cols, lows)]
    size = 1
    for s in spans:
        size *= s  # Python ints: no overflow while deciding
    if size >= 2**62:
        _, inv = np.unique(np.stack(cols, axis=1), axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        return inv.astype(_I64), int(inv.max()) + 1
    packed = np.zeros(n, dtype=_I64)
    for c, lo, s in zip(cols, lows, spans):
        packed *= s
        packed += c - lo
    if size <= _DENSE_SLACK * n + 1024:
        return packed, size
    uniq, inv = np.unique(packed, return_inverse=True)
    return inv.reshape(-1).astype(_I64), int(uniq.size)


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
        """bool per row: another row does the same unit of work (``WorkIndex.repeated`` is ``any``)."""
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
